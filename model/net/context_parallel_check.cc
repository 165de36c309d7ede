// Started under `mpirun -np N` by context_parallel_test: each rank runs one of N slices along time
// of the same sequences with MesaNet's context parallelism (MPI point-to-point hand-over of the
// layers' states and state gradients) and also the whole sequences alone; the loss summed over
// the ranks and the gradients summed over the ranks must equal the whole-sequence ones. For each
// mixer and a hybrid, on fresh random parameters and tokens (a seed drawn by rank 0, printed),
// two forward/backward passes in a row. Prints "cp_check rank R: OK ..." per model, exits 1 on a
// mismatch.
//
//   mpirun -np 2 context_parallel_check [--impl=chunked|reference] [--tokens=T] [--tol=X]
//                                       [--loss_tol=X]
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/cli_flags.h"
#include "kernels/mesa/mesa_op.h"
#include "model/backend/cpu_backend.h"
#include "model/comm/mpi_communicator.h"
#include "model/mixers/mixer_layer.h"
#include "model/net/mesanet.h"
#include "model/net/test_models.h"
#include "model/params/param_tensor.h"
#include "spec/mixers.h"

ABSL_FLAG(std::string, impl, "chunked",
          "mixer operators: chunked (float32) or reference (float64)");
ABSL_FLAG(int, tokens, 256, "tokens per whole sequence (split over the ranks)");
ABSL_FLAG(double, tol, 1e-5, "largest gradient difference allowed, |diff| / |g| (2-norms)");
ABSL_FLAG(int, seed, 0, "parameter and token seed (0: a fresh one from rank 0)");
ABSL_FLAG(std::string, models, "",
          "comma-separated subset of mesa,gla,deltanet,gated_deltanet,hybrid");
ABSL_FLAG(double, loss_tol, 1e-6, "largest relative difference of the loss allowed");

namespace mesa::model {
namespace {

constexpr int kBatch = 2;
constexpr int kVocab = 97;
constexpr int kBos = 0;

struct Pass {
  double loss = 0;
  std::vector<float> grads;
};

// One forward and backward of `net` on [kBatch, net seq_len] tokens; gradients of the loss sum.
absl::StatusOr<Pass> Run(MesaNet& net, const std::vector<int32_t>& tokens,
                         const std::vector<int32_t>& targets) {
  net.ZeroGrads();
  absl::StatusOr<ForwardStats> fwd =
      net.Forward(tokens.data(), targets.data(), kBatch, {net.config().cg_steps, 0.0f});
  if (!fwd.ok()) return fwd.status();
  if (!fwd->finite) return absl::InternalError("non-finite loss");
  absl::StatusOr<double> bwd = net.Backward(1.0f);
  if (!bwd.ok()) return bwd.status();
  Pass pass{fwd->loss_sum, std::vector<float>(net.num_params())};
  net.GetGradsToHost(pass.grads.data());
  return pass;
}

// [kBatch, t] columns [begin, begin + len) of row-major [kBatch, t] values.
std::vector<int32_t> Columns(const std::vector<int32_t>& v, int t, int begin, int len) {
  std::vector<int32_t> out;
  for (int b = 0; b < kBatch; ++b) {
    out.insert(out.end(), v.begin() + b * t + begin, v.begin() + b * t + begin + len);
  }
  return out;
}

absl::Status CheckModel(const std::string& name, const std::vector<MixerKind>& layers,
                        MpiCommunicator& comm, CpuBackend& backend, uint64_t seed) {
  const double tol = absl::GetFlag(FLAGS_tol), loss_tol = absl::GetFlag(FLAGS_loss_tol);
  const int rank = comm.rank(), n = comm.world_size();
  const int t = absl::GetFlag(FLAGS_tokens);
  if (t % n != 0) return absl::InvalidArgumentError("--tokens must split evenly over the ranks");
  const int slice = t / n;
  const ModelConfig config = SmallTestConfig(layers, kVocab, kBos);
  absl::StatusOr<std::unique_ptr<MesaNet>> whole = MesaNet::Create(config, &backend, kBatch, t);
  if (!whole.ok()) return whole.status();
  absl::StatusOr<std::unique_ptr<MesaNet>> part = MesaNet::Create(config, &backend, kBatch, slice);
  if (!part.ok()) return part.status();
  if (absl::Status s = (*part)->SetContextParallel(
          {&comm, rank > 0 ? rank - 1 : -1, rank + 1 < n ? rank + 1 : -1});
      !s.ok()) {
    return s;
  }
  // The same parameters everywhere, moved off their initialisation so that every state matters.
  const std::vector<float> params =
      NoisyTestParams(config, &backend, seed, static_cast<uint32_t>(seed), 0.05f);
  if (params.empty()) return absl::InternalError("test parameters");
  std::mt19937 rng(static_cast<uint32_t>(seed) + 1);
  (*whole)->SetParamsFromHost(params.data());
  (*part)->SetParamsFromHost(params.data());

  std::uniform_int_distribution<int32_t> token(0, kVocab - 1);
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<int32_t> tokens(kBatch * t), targets(kBatch * t);
    for (int32_t& x : tokens) x = token(rng);
    for (int32_t& x : targets) x = token(rng);
    absl::StatusOr<Pass> ref = Run(**whole, tokens, targets);
    if (!ref.ok()) return ref.status();
    absl::StatusOr<Pass> got = Run(**part, Columns(tokens, t, rank * slice, slice),
                                   Columns(targets, t, rank * slice, slice));
    if (!got.ok()) return got.status();
    if (absl::Status s = comm.AllReduce(&got->loss, 1, ReduceOp::kSum); !s.ok()) return s;
    if (absl::Status s = comm.AllReduce(got->grads.data(), static_cast<int64_t>(got->grads.size()),
                                        ReduceOp::kSum);
        !s.ok()) {
      return s;
    }
    // The gradients as one vector: |diff| / |g| (2-norms), and the largest element's difference;
    // per tensor too, so that a mismatch names the tensor that differs most.
    double ref_sq = 0, diff_sq = 0, max_ref = 0, max_diff = 0, worst_rel = -1;
    std::string worst;
    for (const ParamTensor& tensor : (*whole)->layout().tensors()) {
      double tensor_ref_sq = 0, tensor_diff_sq = 0;
      for (int64_t i = tensor.offset; i < tensor.offset + tensor.size; ++i) {
        const double g = ref->grads[i], d = static_cast<double>(got->grads[i]) - g;
        tensor_ref_sq += g * g;
        tensor_diff_sq += d * d;
        max_ref = std::max(max_ref, std::abs(g));
        max_diff = std::max(max_diff, std::abs(d));
      }
      ref_sq += tensor_ref_sq;
      diff_sq += tensor_diff_sq;
      const double rel = std::sqrt(tensor_diff_sq / std::max(tensor_ref_sq, 1e-300));
      if (rel > worst_rel) {
        worst_rel = rel;
        worst = tensor.name;
      }
    }
    const double loss_rel = std::abs(got->loss - ref->loss) / std::abs(ref->loss);
    const double grad_rel = std::sqrt(diff_sq / ref_sq);
    const std::string line = absl::StrCat(
        name, " pass ", pass, " loss ", ref->loss, " vs ", got->loss, " rel ", loss_rel,
        "; gradients |diff| / |g| ", grad_rel, ", max |diff| ", max_diff, " of max |g| ", max_ref,
        "; most different tensor ", worst, " (", worst_rel, ")");
    if (!(loss_rel <= loss_tol) || !(grad_rel <= tol) || ref_sq == 0) {
      return absl::InternalError(absl::StrCat("mismatch: ", line));
    }
    std::printf("cp_check rank %d: OK %s\n", rank, line.c_str());
  }
  return absl::OkStatus();
}

int Main() {
  absl::StatusOr<std::unique_ptr<MpiCommunicator>> comm = MpiCommunicator::Create();
  if (!comm.ok()) {
    std::fprintf(stderr, "cp_check: %s\n", comm.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<kernels::MesaImpl> impl = kernels::ParseMesaImpl(absl::GetFlag(FLAGS_impl));
  if (!impl.ok()) {
    std::fprintf(stderr, "cp_check: %s\n", impl.status().ToString().c_str());
    return 1;
  }
  CpuBackend backend({.num_threads = 1, .mesa_impl = *impl});
  // A fresh seed from rank 0, the same on every rank.
  double seed = (*comm)->rank() != 0 ? 0
                : absl::GetFlag(FLAGS_seed) > 0
                    ? absl::GetFlag(FLAGS_seed)
                    : static_cast<double>(std::random_device{}() % 1000000);
  if (absl::Status s = (*comm)->AllReduce(&seed, 1, ReduceOp::kSum); !s.ok()) {
    std::fprintf(stderr, "cp_check: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("cp_check rank %d of %d: seed=%.0f impl=%s\n", (*comm)->rank(), (*comm)->world_size(),
              seed, absl::GetFlag(FLAGS_impl).c_str());
  // Two layers of every mixer whose layer can run context-parallel (MixerLayer::CarryElems), then
  // one of each in a hybrid, last mixer first.
  std::vector<std::pair<std::string, std::vector<MixerKind>>> models;
  std::vector<MixerKind> hybrid;
  for (const spec::MixerTraits& mixer : spec::kMixers) {
    const std::unique_ptr<MixerLayer> layer = MakeMixerLayer(mixer.kind, ModelConfig{});
    if (layer == nullptr || layer->CarryElems(1) < 0) continue;
    models.push_back({mixer.name, {mixer.kind, mixer.kind}});
    hybrid.insert(hybrid.begin(), mixer.kind);
  }
  models.push_back({"hybrid", hybrid});
  if (absl::GetFlag(FLAGS_models).empty()) {
    std::printf("cp_check rank %d: %zu models\n", (*comm)->rank(), models.size());
  }
  const std::string only = absl::GetFlag(FLAGS_models);
  for (const auto& [name, layers] : models) {
    if (!only.empty() &&
        !absl::StrContains(absl::StrCat(",", only, ","), absl::StrCat(",", name, ","))) {
      continue;
    }
    if (absl::Status s = CheckModel(name, layers, **comm, backend, static_cast<uint64_t>(seed));
        !s.ok()) {
      std::fprintf(stderr, "cp_check rank %d: %s\n", (*comm)->rank(), s.ToString().c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace mesa::model

int main(int argc, char** argv) {
  mesa::base::ParseFlagsOrExit(
      argc, argv,
      "context_parallel_check (under mpirun -np N)\n"
      "  MesaNet's context parallelism against whole sequences, every mixer.");
  return mesa::model::Main();
}
