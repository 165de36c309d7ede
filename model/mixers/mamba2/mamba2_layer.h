// The Mamba-2 mixer (docs/math.md §8.10): from the block's normalised input, one in-projection
// [z | x | B | C | dt]; a causal convolution with bias over x, B, C and SiLU; the SSD scan with
// softplus dt, A = -exp(A_log) and the skip D (kernels/ssd/); the gated RMSNorm
// w ⊙ RMSNorm(y ⊙ SiLU(z)); and the output projection, which the layer adds to the residual
// stream itself (its traits say it owns its projections: the block has no o_norm or o_proj).
#ifndef MESANET_MODEL_MIXERS_MAMBA2_MAMBA2_LAYER_H_
#define MESANET_MODEL_MIXERS_MAMBA2_MAMBA2_LAYER_H_

#include <cstdint>
#include <memory>

#include "model/mixers/mamba2/ssd_ops.h"
#include "model/mixers/mixer_layer.h"
#include "model/mixers/mixer_ops.h"

namespace mesa::model {

// The gated RMSNorm's eps (the public Mamba2 block's).
inline constexpr float kSsmNormEps = 1e-5f;

class Mamba2Layer : public MixerLayer {
 public:
  explicit Mamba2Layer(const ModelConfig& config) : config_(config) {}

  void Plan(BufferPlan& plan, int64_t bt) override;
  void PlanScratch(BufferPlan& plan, int64_t bt) override;
  // `o` is the residual stream [B*T, d_model]: the layer adds its output to it.
  absl::StatusOr<double> Forward(const MixerCall& call, Act ln, Act o,
                                 const MesaSolve& solve) override;
  // `d_o` is the gradient of the residual stream (read only).
  absl::StatusOr<double> Backward(const MixerCall& call, Act ln, Act d_o, Act d_ln,
                                  const MesaSolve& solve) override;
  absl::StatusOr<std::unique_ptr<MixerState>> NewState(Backend& backend, int rows) override;
  absl::StatusOr<double> ForwardFrom(const MixerCall& call, Act ln, Act o, const MesaSolve& solve,
                                     MixerState& state, int first_row) override;
  double SolveFlopsPerToken(int cg_steps) const override;
  // The convolution tail [batch, W-1, d_in + 2N], then S [batch, H_m, P, N].
  int64_t CarryElems(int batch) const override {
    return int64_t{batch} * (TailElems() + StateElems());
  }

 private:
  int64_t TailElems() const {
    return int64_t{config_.conv_width - 1} * config_.ssm_conv_channels();
  }
  int64_t StateElems() const { return int64_t{config_.ssm_inner} * config_.ssm_state; }
  // The in-projection, the convolution (continued from `tail` when given) and its SiLU.
  void Inputs(const MixerCall& call, Act ln, float* tail);
  SsdActs OperatorInputs(const MixerCall& call) const;
  // The gated norm and the output projection, added to the residual stream `o`.
  void Output(const MixerCall& call, Act o);

  const ModelConfig config_;
  LayerOps<SsdOps> ops_;
  // Kept for the backward: z, the convolution's input and output (before SiLU), x | B | C after
  // SiLU, dt before softplus, the scan's y, the gated g = y ⊙ SiLU(z), its norm and rstd.
  Act z_, xbc_pre_, xbc_conv_, xbc_, dt_pre_, y_, g_, normed_;
  float* rstd_ = nullptr;
  // Backward scratch.
  Act d_normed_, d_g_, d_z_, d_y_, d_xbc_, d_conv_, d_xbc_pre_, d_dt_;
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_MIXERS_MAMBA2_MAMBA2_LAYER_H_
