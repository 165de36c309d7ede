// eval.internals measured on the evaluated tokens (docs/trainer.md "Internals"): per layer x head
// the mean forward CG steps, statistics of the gates γ and β, and the condition number of the
// solve's system H_t + diag(Λ) at the last position of each row of the first batch. Computed on
// the host from the layer's operator inputs (MesaNet::CopySolveInputsToHost), outside the fused
// kernels: the state H is recomputed in float64 and its eigenvalues taken exactly (LAPACK).
#ifndef MESANET_MODEL_TRAINER_INTERNALS_H_
#define MESANET_MODEL_TRAINER_INTERNALS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "mesa/v1/job.pb.h"
#include "model/mixers/mixer_layer.h"
#include "model/net/mesanet.h"

namespace mesa::model {

// H_T of row `b`, head `h` after the row's last token, from a zero state at the start of the
// window (as the evaluation's forward starts each window) or, with `in.doc_start`, at the last
// document's start: sum_t β_t (prod_{s>t} γ_s) k_t k_tᵀ over those t, float64 [D, D] row-major.
std::vector<double> FinalKeyState(const SolveInputs& in, int64_t b, int64_t h);

// λ_max / λ_min of the symmetric positive definite n x n matrix `a` (row-major), from its
// eigenvalues (LAPACK dsyev). InvalidArgument when λ_min <= 0 (not positive definite).
absl::StatusOr<double> SpdConditionNumber(std::vector<double> a, int n);

// Accumulates the figures over the evaluation's forwards; Fill writes them into the per-layer
// results of ModelInternals.
class InternalsProbe {
 public:
  explicit InternalsProbe(const ModelConfig& model);
  // After each evaluation Forward of `batch` rows, with the per-token CG steps the net kept
  // (MesaNet::CopyTokenCgStepsToHost, copied once by the caller). `whole_rows`: the rows are whole
  // windows (no context parallelism), so their state can be recomputed for the condition numbers.
  absl::Status Observe(const MesaNet& net, const std::vector<int32_t>& token_steps, int batch,
                       bool whole_rows);
  void Fill(std::vector<mesa::v1::LayerInternals>* layers) const;

 private:
  struct Moments {
    double sum = 0, sum_sq = 0, min = 0, max = 0;
    int64_t n = 0;
    void Add(double x);
    double mean() const { return sum / n; }
    double std() const;
  };
  struct Head {
    Moments gamma, beta, condition;
    double cg_sum = 0;
    int64_t cg_tokens = 0;
  };
  const ModelConfig model_;
  std::vector<std::vector<Head>> heads_;  // [layer][head]
  int64_t batches_ = 0;
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_TRAINER_INTERNALS_H_
