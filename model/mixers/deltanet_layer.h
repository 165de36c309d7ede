// The DeltaNet and Gated DeltaNet mixers (kernels/deltanet/README.md): the Mesa layer's q, k, v
// projections, short convolutions on q and k, SiLU + L2 normalisation of q and k per head, the
// input gate β = sigmoid(b_proj(x)) and, for Gated DeltaNet, the same forget gate γ as Mesa (γ cap
// included, so every mixer has one parametrisation, as the MesaNet paper's comparisons do); then
// the delta rule S_t = γ_t S_{t-1} (I − β_t k_t k_tᵀ) + β_t v_t k_tᵀ, o_t = S_t q_t.
#ifndef MESANET_MODEL_MIXERS_DELTANET_LAYER_H_
#define MESANET_MODEL_MIXERS_DELTANET_LAYER_H_

#include "model/mixers/mixer_layer.h"

namespace mesa::model {

class DeltaNetLayer : public MixerLayer {
 public:
  DeltaNetLayer(const ModelConfig& config, bool gated) : config_(config), gated_(gated) {}

  void Plan(BufferPlan& plan, int64_t bt) override;
  absl::StatusOr<double> Forward(const MixerCall& call, Act ln, Act o,
                                 const MesaSolve& solve) override;
  absl::StatusOr<double> Backward(const MixerCall& call, Act ln, Act d_o, Act d_ln,
                                  const MesaSolve& solve, MixerScratch& scratch) override;
  double SolveFlopsPerToken(int cg_steps) const override;

 private:
  DeltaActs OperatorInputs(int batch, int seq_len) const;

  const ModelConfig config_;
  const bool gated_;
  // Kept from the forward for the backward. DeltaNet has no γ projection: its a_pre stays zero so
  // the shared gate kernels compute β alone, and its log_gamma is not passed to the operator.
  Act q_pre_, k_pre_, q_conv_, k_conv_, q_, k_, v_, a_pre_, b_pre_;
  float *beta_ = nullptr, *log_gamma_ = nullptr;
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_MIXERS_DELTANET_LAYER_H_
