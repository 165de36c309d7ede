#include "model/trainer/session.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"
#include "model/backend/choice/backend_choice.h"
#include "model/backend/cpu_backend.h"
#include "model/backend/cuda/cuda_backend.h"
#include "model/comm/communicator_factory.h"

namespace mesa::model {

double PeakFlops(const std::string& device, int threads, double configured) {
  if (configured > 0) return configured;
  if (device == "cuda") return 989e12;
  return threads * 2.5e9 * 32;
}

ActivationType ActivationsFor(Precision precision) {
  return precision == Precision::kFp32 ? ActivationType::kFloat32 : ActivationType::kBfloat16;
}

absl::StatusOr<Session> MakeSession(const JobConfig& config, const TrainerOptions& options) {
  Session s;
  // mesa-train's main has already let $MESA_DEVICE fill an empty --device. The device names and
  // bf16-on-CPU were checked with the spec (spec/validate_job_spec.h); what is left is what only
  // the machine can say.
  std::string device = options.device.empty() ? config.training.device : options.device;
  if (device.empty()) device = "auto";
  const Precision precision = config.training.precision;
  CudaBackendOptions cuda_options;
  if (device != "cpu" && options.comm_from_env) {
    // Without a GPU this fails and ChooseBackend says why.
    auto index = CudaDeviceForLocalRank(options.comm_env.local_rank);
    if (index.ok()) cuda_options.device = *index;
  }
  cuda_options.activations = ActivationsFor(precision);
  // Fixed-step training knows its CG step count; skip the per-layer read-back.
  cuda_options.exact_cg_steps = false;
  cuda_options.deterministic = config.training.deterministic;
  s.threads = options.num_threads > 0
                  ? options.num_threads
                  : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  CpuBackendOptions cpu_options;
  cpu_options.num_threads = s.threads;
  cpu_options.mesa_impl = options.mesa_impl;
  // Device "cuda" without a usable GPU is UNAVAILABLE: the node's fault, not the job's (a worker
  // placed it on a GPU): infra, exit 1, retried.
  auto choice = ChooseBackend(device, cuda_options, cpu_options);
  if (!choice.ok()) return choice.status();
  s.backend = std::move(choice->backend);
  const bool on_gpu = choice->on_gpu;
  if (!on_gpu && precision == Precision::kBf16) {
    // Device "auto" without a usable GPU: the CPU backend has fp32 activations only, and silently
    // training in another precision than the one asked for would be a surprise.
    return absl::InvalidArgumentError(absl::StrCat(
        "training.precision: \"bf16\" needs a CUDA device, and device \"auto\" found none (",
        choice->no_gpu, "); use precision \"auto\" or \"fp32\" to train on the CPU"));
  }
  auto comm = options.comm_from_env ? CreateCommunicatorFromEnv(options.comm_env, choice->device())
                                    : CreateCommunicator(options.rank, options.world_size);
  if (!comm.ok()) return comm.status();
  s.comm = *std::move(comm);
  if (on_gpu) {
    // NCCL orders each collective after the work queued so far on this stream: what lets a
    // gradient bucket start while the rest of the backward pass is still queued.
    if (CudaBackendControl* control = GetCudaControl(s.backend.get()); control != nullptr) {
      s.comm->SetComputeStream(control->stream());
    }
  }
  // The spec was validated against this rank count (spec/validate_job_spec.h); a communicator of
  // another size is a launcher's mistake.
  const int context = config.training.context_parallel;
  const int rank = s.comm->rank(), world = s.comm->world_size();
  if (world % context != 0) {
    return absl::InvalidArgumentError(absl::StrCat("training.context_parallel ", context,
                                                   " does not divide the ", world, " ranks"));
  }
  s.slice = {rank % context, context};
  s.data_rank = rank / context;
  s.data_ranks = world / context;
  s.micro_batch = config.data.MicroBatch(s.data_ranks);
  auto net = MakeNet(config, s, config.data.seq_len);
  if (!net.ok()) return net.status();
  s.net = *std::move(net);
  return s;
}

absl::StatusOr<std::unique_ptr<MesaNet>> MakeNet(const JobConfig& config, const Session& s,
                                                 int seq_len) {
  auto net = MesaNet::Create(config.model, s.backend.get(), s.micro_batch, seq_len / s.slice.count);
  if (!net.ok()) return net.status();
  if (s.slice.count > 1) {
    const int rank = s.comm->rank();
    const ContextParallel cp{.comm = s.comm.get(),
                             .prev = s.slice.index > 0 ? rank - 1 : -1,
                             .next = s.slice.index + 1 < s.slice.count ? rank + 1 : -1};
    if (absl::Status st = (*net)->SetContextParallel(cp); !st.ok()) return st;
  }
  return net;
}

std::string SpecJson(const JobConfig& config) {
  std::string out;
  google::protobuf::util::JsonPrintOptions print;
  print.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(config.spec, &out, print);
  return out;
}

std::string CheckpointRoot(const JobConfig& config, const TrainerOptions& options) {
  return config.checkpoint.dir.empty() ? options.workdir + "/checkpoints" : config.checkpoint.dir;
}

}  // namespace mesa::model
