// The DeltaNet and Gated DeltaNet mixers (kernels/deltanet/README.md): the Mesa layer's q, k, v
// projections, short convolutions on q and k, SiLU + L2 normalisation of q and k per head, the
// input gate β = sigmoid(b_proj(x)) and, for Gated DeltaNet, the same forget gate γ as Mesa (γ cap
// included, so every mixer has one parametrisation, as the MesaNet paper's comparisons do); then
// the delta rule S_t = γ_t S_{t-1} (I − β_t k_t k_tᵀ) + β_t v_t k_tᵀ, o_t = S_t q_t, through
// DeltaNetOps (deltanet_ops.h).
#ifndef MESANET_MODEL_MIXERS_DELTANET_DELTANET_LAYER_H_
#define MESANET_MODEL_MIXERS_DELTANET_DELTANET_LAYER_H_

#include "model/mixers/deltanet/deltanet_ops.h"
#include "model/mixers/mixer_layer.h"
#include "model/mixers/mixer_ops.h"
#include "model/mixers/qk_features.h"

namespace mesa::model {

class DeltaNetLayer : public MixerLayer {
 public:
  DeltaNetLayer(const ModelConfig& config, bool gated)
      : config_(config), gated_(gated), features_(config, /*forget_gate=*/gated) {}

  void Plan(BufferPlan& plan, int64_t bt) override;
  absl::StatusOr<double> Forward(const MixerCall& call, Act ln, Act o,
                                 const MesaSolve& solve) override;
  absl::StatusOr<double> Backward(const MixerCall& call, Act ln, Act d_o, Act d_ln,
                                  const MesaSolve& solve) override;
  void PlanScratch(BufferPlan& plan, int64_t bt) override;
  absl::StatusOr<std::unique_ptr<MixerState>> NewState(Backend& backend, int rows) override;
  absl::StatusOr<double> ForwardFrom(const MixerCall& call, Act ln, Act o, const MesaSolve& solve,
                                     MixerState& state, int first_row) override;
  double SolveFlopsPerToken(int cg_steps) const override;
  // The convolution tails, then S [batch, H, D, D].
  int64_t CarryElems(int batch) const override {
    return features_.CarryElems(batch) +
           int64_t{batch} * config_.n_heads * config_.head_dim * config_.head_dim;
  }

 private:
  // The operator's inputs, with the carried state of a context-parallel call.
  DeltaActs OperatorInputs(const MixerCall& call) const;

  const ModelConfig config_;
  const bool gated_;
  // DeltaNet has no γ projection (QkFeatures without a forget gate), and its log_gamma is not
  // passed to the operator.
  QkFeatures features_;
  LayerOps<DeltaNetOps> ops_;
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_MIXERS_DELTANET_DELTANET_LAYER_H_
