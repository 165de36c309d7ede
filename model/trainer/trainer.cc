#include "model/trainer/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/util/json_util.h"
#include "model/backend/cpu_backend.h"
#include "model/backend/cuda/cuda_backend.h"
#include "model/checkpoint/checkpoint.h"
#include "model/comm/communicator.h"
#include "model/comm/communicator_factory.h"
#include "model/data/data_loader.h"
#include "model/model/mesanet.h"
#include "model/optimizer/adamw.h"
#include "model/trainer/evaluate.h"

namespace mesa::model {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// Peak FLOP/s of one process for MFU, unless the options say otherwise. CPU: cores x 2.5 GHz x
// 32 fp32 FLOP/cycle (AVX2, 2 FMA units). GPUs: the H100/H200 dense bf16 tensor-core peak, the
// figure MFU is quoted against.
double PeakFlops(const std::string& device, int threads, double configured) {
  if (configured > 0) return configured;
  if (device == "cuda") return 989e12;
  return threads * 2.5e9 * 32;
}

// Everything a run needs, built in the order that validates before allocating.
struct Session {
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<MesaNet> net;
  int micro_batch = 0;
  int threads = 0;
};

absl::StatusOr<Session> MakeSession(const JobConfig& config, const TrainerOptions& options) {
  Session s;
  // mesa-train's main has already let $MESA_DEVICE fill an empty --device.
  std::string device = options.device.empty() ? config.training.device : options.device;
  if (device.empty()) device = "auto";
  if (device != "auto" && device != "cpu" && device != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown device \"", device, "\"; expected auto, cpu or cuda"));
  }
  const Precision precision = config.training.precision;
  if (precision == Precision::kBf16 && device == "cpu") {
    return absl::InvalidArgumentError(
        "training.precision: \"bf16\" needs a CUDA device, but the device is \"cpu\" (use "
        "\"auto\" or \"fp32\")");
  }
  std::string no_gpu;  // why device "auto" fell back to the CPU
  if (device != "cpu") {
    CudaBackendOptions cuda_options;
    if (options.comm_from_env) {
      // Without a GPU this fails and CreateCudaBackend below says why.
      auto index = CudaDeviceForLocalRank(options.comm_env.local_rank);
      if (index.ok()) cuda_options.device = *index;
    }
    // "auto" is bf16 on CUDA; fp32 keeps exact comparisons possible.
    cuda_options.activations =
        precision == Precision::kFp32 ? ActivationType::kFloat32 : ActivationType::kBfloat16;
    // Fixed-step training knows its CG step count; skip the per-layer read-back.
    cuda_options.exact_cg_steps = false;
    auto cuda = CreateCudaBackend(cuda_options);
    if (cuda.ok()) {
      s.backend = *std::move(cuda);
    } else if (device == "cuda") {
      // The node's fault, not the job's (a worker placed it on a GPU): infra, exit 1, retried.
      return absl::UnavailableError(
          absl::StrCat("device \"cuda\" requested: ", cuda.status().message()));
    } else {
      no_gpu = std::string(cuda.status().message());
    }
  }
  const bool on_gpu = s.backend != nullptr;
  if (!on_gpu && precision == Precision::kBf16) {
    // Device "auto" without a usable GPU: the CPU backend has fp32 activations only, and silently
    // training in another precision than the one asked for would be a surprise.
    return absl::InvalidArgumentError(absl::StrCat(
        "training.precision: \"bf16\" needs a CUDA device, and device \"auto\" found none (",
        no_gpu, "); use precision \"auto\" or \"fp32\" to train on the CPU"));
  }
  auto comm = options.comm_from_env
                  ? CreateCommunicatorFromEnv(options.comm_env, on_gpu ? "cuda" : "cpu")
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
  s.threads = options.num_threads > 0
                  ? options.num_threads
                  : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (!on_gpu) {
    CpuBackendOptions backend_options;
    backend_options.num_threads = s.threads;
    backend_options.mesa_impl = options.mesa_impl;
    s.backend = std::make_unique<CpuBackend>(backend_options);
  }
  s.micro_batch = config.data.MicroBatch(options.world_size);
  auto net = MesaNet::Create(config.model, s.backend.get(), s.micro_batch, config.data.seq_len);
  if (!net.ok()) return net.status();
  s.net = *std::move(net);
  return s;
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

}  // namespace

mesa::v1::TrainerExitCode ExitCodeFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return mesa::v1::TRAINER_EXIT_OK;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kUnimplemented:
      return mesa::v1::TRAINER_EXIT_USER_ERROR;
    case absl::StatusCode::kAborted:
      return mesa::v1::TRAINER_EXIT_DIVERGED;
    default:
      return mesa::v1::TRAINER_EXIT_INFRA_ERROR;
  }
}

absl::StatusOr<RunResult> RunTraining(const JobConfig& config, const TrainerOptions& options,
                                      EventSink& events) {
  const auto start = Clock::now();
  auto session_or = MakeSession(config, options);
  if (!session_or.ok()) return session_or.status();
  Session& s = *session_or;
  MesaNet& net = *s.net;
  Backend& backend = *s.backend;
  const DataSettings& data = config.data;
  auto train = DataLoader::Open(data.train_paths, s.micro_batch, data.seq_len, options.rank,
                                options.world_size);
  if (!train.ok()) return train.status();
  std::unique_ptr<DataLoader> val_loader;
  if (config.training.eval_interval > 0) {
    auto val = DataLoader::Open(data.val_paths, s.micro_batch, data.seq_len, options.rank,
                                options.world_size);
    if (!val.ok()) return val.status();
    val_loader = *std::move(val);
  }
  // ZeRO-1 (optimizer.zero_stage 1, several ranks): each rank keeps the AdamW moments of its
  // shard only (contiguous equal chunks, ShardLayout); gradients are reduce-scattered, each rank
  // updates its shard of the weights, and the weights are all-gathered (docs/distributed.md).
  const bool zero1 = config.optimizer.zero_stage == 1 && s.comm->world_size() > 1;
  const ShardLayout shards{net.num_params(), zero1 ? s.comm->world_size() : 1};
  const int shard_rank = zero1 ? s.comm->rank() : 0;
  AdamW adamw(config.optimizer, net.layout(), &backend, shards.begin(shard_rank),
              shards.end(shard_rank));
  // Reduce-scatter / all-gather buffer (padded to world_size equal chunks); ZeRO-1 only.
  float* zero_buffer = zero1 ? backend.AllocateFloats(shards.padded_size()) : nullptr;
  struct FreeOnExit {
    Backend* backend;
    float* ptr;
    ~FreeOnExit() {
      if (ptr != nullptr) backend->Free(ptr);
    }
  } free_zero_buffer{&backend, zero_buffer};

  // Initial state: explicit --resume, else our own latest checkpoint (a retried job), else
  // checkpoint.init_from (weights only), else the seed.
  const std::string root = CheckpointRoot(config, options);
  TrainState state;
  std::string resume_from = options.resume;
  if (resume_from.empty() && !ListStepDirs(root).empty()) resume_from = root;
  if (!resume_from.empty()) {
    auto ckpt = LoadCheckpoint(resume_from, config.model, net.layout(), /*want_optimizer=*/true);
    if (!ckpt.ok()) return ckpt.status();
    for (const std::string& reason : ckpt->skipped) {
      events.Log("skipped corrupt checkpoint: " + reason);
    }
    net.SetParamsFromHost(ckpt->params.data());
    if (ckpt->has_optimizer) {
      // Checkpoints hold the whole moments whatever the rank count; take this rank's range.
      backend.CopyToDevice(adamw.m(), ckpt->exp_avg.data() + adamw.shard_begin(),
                           sizeof(float) * adamw.size());
      backend.CopyToDevice(adamw.v(), ckpt->exp_avg_sq.data() + adamw.shard_begin(),
                           sizeof(float) * adamw.size());
    }
    state = ckpt->state;  // its seed and spec are replaced by this run's below
    if (absl::Status st = (*train)->SetPosition(state.data); !st.ok()) return st;
    events.Log(absl::StrCat("resumed from ", ckpt->dir, " at step ", state.step));
    mesa::v1::TrainerEvent resumed;
    resumed.mutable_resumed()->set_step(state.step);
    resumed.mutable_resumed()->set_checkpoint(ckpt->dir);
    for (const std::string& reason : ckpt->skipped) resumed.mutable_resumed()->add_skipped(reason);
    events.Emit(std::move(resumed));
  } else if (!config.checkpoint.init_from.empty()) {
    auto ckpt = LoadCheckpoint(config.checkpoint.init_from, config.model, net.layout(), false);
    if (!ckpt.ok()) return ckpt.status();
    net.SetParamsFromHost(ckpt->params.data());
    events.Log(absl::StrCat("initialised weights from ", ckpt->dir));
  } else {
    net.InitializeParams(config.training.seed);
    if (absl::Status st = s.comm->Broadcast(net.params(), net.num_params(), 0); !st.ok()) return st;
  }
  state.seed = config.training.seed;
  state.spec_json = SpecJson(config);

  const int64_t total_steps = config.training.steps;
  const int accum = data.grad_accum_steps;
  const int64_t tokens_per_step = int64_t{data.batch_size} * data.seq_len;
  // MFU counts model FLOPs; the CG iterations are reported separately (mfu_with_cg).
  const double flops_per_token = net.TrainFlopsPerToken(0);
  const double flops_per_token_cg = net.TrainFlopsPerToken(config.model.cg_steps);
  const double peak = PeakFlops(s.backend->Name(), s.threads, options.peak_flops) * options.world_size;
  const MesaSolve train_solve{config.model.cg_steps, 0.0f};
  // Overlap the gradient all-reduce with the last micro-batch's backward pass (plain data
  // parallelism; ZeRO-1 reduce-scatters after the backward, see below).
  const bool overlap = !zero1 && s.comm->world_size() > 1 && options.grad_bucket_bytes > 0;
  const int64_t bucket_elements =
      std::max<int64_t>(1, options.grad_bucket_bytes / static_cast<int64_t>(sizeof(float)));
  events.Log(absl::StrFormat(
      "model %s: %d layers, d_model %d, %d heads x %d, %lld parameters; batch %d x %d (%d micro-"
      "batches of %d), %lld steps, %s (%s activations) with %d threads%s",
      MixerName(config.model.mixer), config.model.n_layers, config.model.d_model,
      config.model.n_heads, config.model.head_dim,
      static_cast<long long>(net.layout().num_values()), data.batch_size, data.seq_len, accum,
      s.micro_batch, static_cast<long long>(total_steps),
      s.backend->Name(), ActivationTypeName(backend.activation_type()), s.threads,
      overlap ? absl::StrFormat("; gradient all-reduce overlapped with the backward, %.3g MiB "
                                "buckets", bucket_elements * 4.0 / (1 << 20))
              : std::string()));
  {
    mesa::v1::TrainerEvent event;
    mesa::v1::StartEvent& start_event = *event.mutable_start();
    start_event.set_step(state.step);
    start_event.set_communicator(s.comm->name());
    start_event.set_total_steps(total_steps);
    start_event.set_parameters(net.layout().num_values());
    start_event.set_device(s.backend->Name());
    start_event.set_threads(s.threads);
    start_event.set_world_size(options.world_size);
    start_event.set_zero_stage(zero1 ? 1 : 0);
    start_event.set_precision(PrecisionName(config.training.precision));
    start_event.set_activations(ActivationTypeName(backend.activation_type()));
    start_event.set_grad_overlap(overlap);
    start_event.set_grad_bucket_bytes(overlap ? bucket_elements * 4 : 0);
    start_event.set_optimizer_state_bytes(2 * sizeof(float) * adamw.size());
    events.Emit(std::move(event));
  }

  auto save = [&](const char* why) -> absl::StatusOr<std::string> {
    state.data = (*train)->position();
    std::vector<float> params(net.num_params()), m(net.num_params()), v(net.num_params());
    net.GetParamsToHost(params.data());
    if (zero1) {
      // Gathered, so a checkpoint is the same file whatever the rank count and resumes on any.
      for (auto [moment, host] : {std::pair{adamw.m(), &m}, std::pair{adamw.v(), &v}}) {
        if (adamw.size() > 0) backend.Copy(zero_buffer + adamw.shard_begin(), moment, adamw.size());
        if (absl::Status st = s.comm->AllGather(zero_buffer, shards); !st.ok()) return st;
        backend.CopyToHost(host->data(), zero_buffer, sizeof(float) * host->size());
      }
    } else {
      backend.CopyToHost(m.data(), adamw.m(), sizeof(float) * m.size());
      backend.CopyToHost(v.data(), adamw.v(), sizeof(float) * v.size());
    }
    const auto t0 = Clock::now();
    if (absl::Status st = s.comm->Barrier(); !st.ok()) return st;
    absl::StatusOr<std::string> dir = std::string();
    if (options.rank == 0) {
      dir = SaveCheckpoint(root, config.model, net.layout(), params.data(), m.data(), v.data(),
                           state, config.checkpoint.keep_last);
      if (!dir.ok()) return dir.status();
      mesa::v1::TrainerEvent event;
      event.mutable_checkpoint()->set_step(state.step);
      event.mutable_checkpoint()->set_path(*dir);
      event.mutable_checkpoint()->set_reason(why);
      event.mutable_checkpoint()->set_seconds(Seconds(t0));
      events.Emit(std::move(event));
      events.Log(absl::StrCat("checkpoint ", *dir, " (", why, ")"));
    }
    return dir;
  };
  auto run_eval = [&]() -> absl::StatusOr<EvalResult> {
    if (absl::Status st = val_loader->SetPosition({}); !st.ok()) return st;
    return Evaluate(net, *val_loader, s.micro_batch, data.seq_len, config.training.eval_batches,
                    train_solve, s.comm.get());
  };

  RunResult result;
  int consecutive_nonfinite = 0;
  int64_t steps_this_run = 0;
  double last_loss = NAN;
  std::vector<std::vector<int32_t>> tokens(accum), targets(accum);
  auto window_start = Clock::now();
  int64_t window_tokens = 0;
  while (state.step < total_steps) {
    const auto step_start = Clock::now();
    const float lr = LearningRate(config.optimizer, state.step, total_steps);
    // Read every micro-batch first: the loss is normalised by the step's token count. The stop
    // request is reduced with it, so every rank stops after the same step.
    const bool stop_local = options.stop_requested != nullptr && options.stop_requested->load();
    double step_counts[2] = {0, stop_local ? 1.0 : 0.0};  // valid targets, stop votes
    for (int a = 0; a < accum; ++a) {
      if (absl::Status st = (*train)->Next(&tokens[a], &targets[a]); !st.ok()) return st;
      for (int32_t t : targets[a]) step_counts[0] += t != config.model.bos_token;
    }
    if (absl::Status st = s.comm->AllReduce(step_counts, 2, ReduceOp::kSum); !st.ok()) return st;
    const double valid_targets = step_counts[0];  // over every rank
    const bool stop_after_step = step_counts[1] > 0;
    const float loss_scale = valid_targets > 0 ? static_cast<float>(1.0 / valid_targets) : 0.0f;
    net.ZeroGrads();
    // Collectives are matched by the order ranks issue them, so every rank must issue the same
    // ones even when only some see a non-finite loss. The loss sum and "some rank saw a
    // non-finite loss" are reduced once per step, after the last forward and BEFORE the last
    // backward: a rank whose loss went non-finite stops computing and votes at once; the others
    // vote after their last forward. Every rank then knows, before any gradient bucket is sent,
    // whether the step survives; if not, no rank runs the last backward or reduces gradients
    // (the step is skipped everywhere), so no rank waits for a bucket another never sends.
    bool finite = true;  // this rank's losses until the vote, every rank's after it
    bool voted = false;
    double local_loss_sum = 0, loss_sum = 0;  // this rank's, every rank's (after the vote)
    auto vote = [&]() -> absl::Status {
      double step_sums[2] = {local_loss_sum, finite ? 0.0 : 1.0};
      if (absl::Status st = s.comm->AllReduce(step_sums, 2, ReduceOp::kSum); !st.ok()) return st;
      loss_sum = step_sums[0];
      finite = step_sums[1] == 0;
      voted = true;
      return absl::OkStatus();
    };
    double cg_forward = 0, cg_backward = 0;
    std::optional<GradientBucketer> bucketer;
    for (int a = 0; a < accum; ++a) {
      auto stats = net.Forward(tokens[a].data(), targets[a].data(), s.micro_batch, train_solve);
      if (!stats.ok()) return stats.status();
      const bool injected = options.nonfinite_forward && options.nonfinite_forward(state.step, a);
      if (!stats->finite || injected) {
        finite = false;
        break;
      }
      local_loss_sum += stats->loss_sum;
      cg_forward += stats->cg_steps_mean / accum;
      const bool last = a == accum - 1;
      MesaNet::GradsReadyFn on_grads_ready;
      if (last) {
        if (absl::Status st = vote(); !st.ok()) return st;
        if (!finite) break;
        // Only the last micro-batch reduces: earlier ones only accumulate into grads().
        if (overlap) {
          bucketer.emplace(s.comm.get(), net.grads(), net.num_params(), bucket_elements);
          on_grads_ready = [&bucketer](int64_t offset, int64_t n) {
            return bucketer->MarkReady(offset, n);
          };
        }
      }
      auto cg = net.Backward(options.inject_nonfinite ? NAN : loss_scale, on_grads_ready);
      if (!cg.ok()) return cg.status();
      cg_backward += *cg / accum;
    }
    if (!voted) {
      if (absl::Status st = vote(); !st.ok()) return st;
    }
    // Gradients are summed over ranks (each rank's loss is already scaled by 1 / the global token
    // count), before the norm and clipping: the result is one process's gradient of the whole
    // batch. With overlap the buckets already in flight are completed; ZeRO-1 reduce-scatters
    // (after the backward: its equal shards do not line up with the per-layer ranges the backward
    // finishes, so overlapping it needs shard-aligned buckets; a follow-up): the sum lands only
    // in this rank's shard. A skipped step (finite is the same on every rank) reduces nothing.
    float* grads = net.grads();
    int grad_buckets = 0;
    if (finite && bucketer.has_value()) {
      if (absl::Status st = bucketer->Finish(); !st.ok()) return st;
      grad_buckets = bucketer->buckets_sent();
    } else if (finite && zero1) {
      backend.Copy(zero_buffer, net.grads(), net.num_params());
      if (shards.padded_size() > net.num_params()) {
        backend.Zero(zero_buffer + net.num_params(), shards.padded_size() - net.num_params());
      }
      if (absl::Status st = s.comm->ReduceScatter(zero_buffer, shards, ReduceOp::kSum); !st.ok()) {
        return st;
      }
      grads = zero_buffer;  // same offsets as net.grads() over [0, num_params)
    } else if (finite) {
      if (absl::Status st = s.comm->AllReduce(net.grads(), net.num_params(), ReduceOp::kSum);
          !st.ok()) {
        return st;
      }
    }
    const double loss = valid_targets > 0 ? loss_sum / valid_targets : 0.0;
    double grad_norm = NAN;
    if (finite && zero1) {
      double sum_sq = adamw.ShardSumOfSquares(grads);
      if (absl::Status st = s.comm->AllReduce(&sum_sq, 1, ReduceOp::kSum); !st.ok()) return st;
      grad_norm = std::sqrt(sum_sq);
    } else if (finite) {
      grad_norm = adamw.GradNorm(grads);
    }
    if (!finite || !std::isfinite(loss) || !std::isfinite(grad_norm)) {
      ++consecutive_nonfinite;
      ++state.skipped_steps;
      ++state.step;  // the batch is consumed; the schedule moves on
      ++steps_this_run;
      mesa::v1::TrainerEvent event;
      event.mutable_step()->set_step(state.step);
      event.mutable_step()->set_total_steps(total_steps);
      event.mutable_step()->set_skipped(true);
      event.mutable_step()->set_skipped_steps(state.skipped_steps);
      events.Emit(std::move(event));
      events.Log(absl::StrCat("step ", state.step, ": non-finite loss or gradients, skipped (",
                              consecutive_nonfinite, " in a row)"));
      if (consecutive_nonfinite >= options.max_consecutive_nonfinite) {
        return absl::AbortedError(absl::StrCat(
            "training diverged: non-finite loss or gradients in ", consecutive_nonfinite,
            " consecutive steps (last at step ", state.step,
            "); lower optimizer.lr or raise optimizer.warmup_steps"));
      }
    } else {
      consecutive_nonfinite = 0;
      adamw.Update(net.params(), grads, grad_norm, lr, state.step - state.skipped_steps);
      if (zero1) {
        // Every rank updated its shard of the weights; gather them all.
        if (adamw.size() > 0) {
          backend.Copy(zero_buffer + adamw.shard_begin(), net.params() + adamw.shard_begin(),
                       adamw.size());
        }
        if (absl::Status st = s.comm->AllGather(zero_buffer, shards); !st.ok()) return st;
        backend.Copy(net.params(), zero_buffer, net.num_params());
      }
      ++state.step;
      ++steps_this_run;
      last_loss = loss;
      state.tokens_seen += tokens_per_step;
      window_tokens += tokens_per_step;
      if (state.step % config.training.log_interval == 0 || state.step == total_steps) {
        const double elapsed = Seconds(window_start);
        const double tps = elapsed > 0 ? window_tokens / elapsed : 0;
        const double step_seconds = Seconds(step_start);
        const double eta = tps > 0 ? (total_steps - state.step) * tokens_per_step / tps : 0;
        mesa::v1::TrainerEvent event;
        mesa::v1::StepEvent& step_event = *event.mutable_step();
        step_event.set_step(state.step);
        step_event.set_total_steps(total_steps);
        step_event.set_loss(loss);
        step_event.set_lr(lr);
        step_event.set_grad_norm(grad_norm);
        step_event.set_tokens_per_second(tps);
        step_event.set_mfu(tps * flops_per_token / peak);
        step_event.set_mfu_with_cg(tps * flops_per_token_cg / peak);
        step_event.set_cg_steps_mean(cg_forward);
        step_event.set_cg_steps_mean_backward(cg_backward);
        step_event.set_grad_buckets(grad_buckets);
        step_event.set_step_seconds(step_seconds);
        step_event.set_tokens(state.tokens_seen);
        step_event.set_eta_seconds(eta);
        step_event.set_skipped_steps(state.skipped_steps);
        events.Emit(std::move(event));
        events.Progress(state.step, total_steps, loss, tps, eta);
        if (!isatty(STDERR_FILENO)) {
          events.Log(absl::StrFormat("step %lld/%lld loss %.4f lr %.3g grad_norm %.3f %.0f tok/s",
                                     static_cast<long long>(state.step),
                                     static_cast<long long>(total_steps), loss, lr, grad_norm, tps));
        }
        window_start = Clock::now();
        window_tokens = 0;
      }
    }
    if (options.crash_after_steps >= 0 && steps_this_run >= options.crash_after_steps) {
      result.steps_done = state.step;
      result.final_loss = last_loss;
      return result;  // as if killed: no checkpoint, no events
    }
    if (val_loader != nullptr && state.step % config.training.eval_interval == 0 &&
        state.step < total_steps) {
      auto eval = run_eval();
      if (!eval.ok()) return eval.status();
      mesa::v1::TrainerEvent event;
      event.mutable_eval()->set_step(state.step);
      *event.mutable_eval()->mutable_metrics() = eval->ToProto(false);
      events.Emit(std::move(event));
      events.Log(absl::StrFormat("step %lld: val loss %.4f, perplexity %.2f",
                                 static_cast<long long>(state.step), eval->loss, eval->perplexity));
    }
    // One process stops right after the step in which the request arrived; several ranks stop
    // after the first step whose reduction saw a request (all ranks agree on it).
    const bool stop = stop_after_step ||
                      (s.comm->world_size() == 1 && options.stop_requested != nullptr &&
                       options.stop_requested->load());
    if (stop || (config.checkpoint.interval_steps > 0 &&
                 state.step % config.checkpoint.interval_steps == 0 && state.step < total_steps)) {
      auto dir = save(stop ? "stop" : "interval");
      if (!dir.ok()) return dir.status();
      result.checkpoint_dir = *dir;
    }
    if (stop) {
      mesa::v1::TrainerEvent event;
      event.mutable_stopped()->set_step(state.step);
      event.mutable_stopped()->set_checkpoint(result.checkpoint_dir);
      event.mutable_stopped()->set_reason("SIGTERM");
      events.Emit(std::move(event));
      events.Log(absl::StrCat("stopped at step ", state.step, " on request"));
      result.outcome = RunOutcome::kStopped;
      result.steps_done = state.step;
      result.final_loss = last_loss;
      return result;
    }
  }
  auto dir = save("final");
  if (!dir.ok()) return dir.status();
  result.checkpoint_dir = *dir;
  result.steps_done = state.step;
  result.final_loss = last_loss;
  result.result.set_final_loss(last_loss);
  result.result.set_step(state.step);
  result.result.set_skipped_steps(state.skipped_steps);
  result.result.set_tokens(state.tokens_seen);
  result.result.set_checkpoint_path(*dir);
  result.result.set_seconds(Seconds(start));
  if (val_loader != nullptr) {
    auto eval = run_eval();
    if (!eval.ok()) return eval.status();
    *result.result.mutable_eval() = eval->ToProto(false);
  }
  mesa::v1::TrainerEvent event;
  *event.mutable_result() = result.result;
  events.Emit(std::move(event));
  events.Log(absl::StrFormat("done: %lld steps, final loss %.4f, checkpoint %s",
                             static_cast<long long>(state.step), last_loss, *dir));
  return result;
}

absl::StatusOr<RunResult> RunEvaluation(const JobConfig& config, const TrainerOptions& options,
                                        EventSink& events) {
  auto session_or = MakeSession(config, options);
  if (!session_or.ok()) return session_or.status();
  Session& s = *session_or;
  std::string source = config.eval.checkpoint;
  if (source.empty()) source = options.resume;
  if (source.empty()) source = CheckpointRoot(config, options);
  auto ckpt = LoadCheckpoint(source, config.model, s.net->layout(), /*want_optimizer=*/false);
  if (!ckpt.ok()) return ckpt.status();
  for (const std::string& reason : ckpt->skipped) {
    mesa::v1::TrainerEvent event;
    event.mutable_warning()->set_message("skipped corrupt checkpoint: " + reason);
    events.Emit(std::move(event));
    events.Log("skipped corrupt checkpoint: " + reason);
  }
  s.net->SetParamsFromHost(ckpt->params.data());
  auto loader = DataLoader::Open(config.data.val_paths, s.micro_batch, config.data.seq_len,
                                 options.rank, options.world_size);
  if (!loader.ok()) return loader.status();
  MesaSolve solve;
  if (config.model.mixer == MixerKind::kGla) {
    solve = {0, 0.0f};
  } else if (config.model.cg_tol > 0) {
    solve = {config.model.cg_max_steps, config.model.cg_tol};
  } else {
    solve = {config.model.cg_steps, 0.0f};
  }
  auto eval = Evaluate(*s.net, **loader, s.micro_batch, config.data.seq_len,
                       config.eval.max_batches, solve, s.comm.get());
  if (!eval.ok()) return eval.status();
  RunResult result;
  result.checkpoint_dir = ckpt->dir;
  result.final_loss = eval->loss;
  *result.result.mutable_eval() = eval->ToProto(config.eval.per_position);
  result.result.set_checkpoint_path(ckpt->dir);
  result.result.set_step(ckpt->state.step);
  mesa::v1::TrainerEvent event;
  *event.mutable_result() = result.result;
  events.Emit(std::move(event));
  events.Log(absl::StrFormat("eval of %s: loss %.4f, perplexity %.3f, mean CG steps %.2f",
                             ckpt->dir, eval->loss, eval->perplexity, eval->cg_steps_mean));
  return result;
}

}  // namespace mesa::model
