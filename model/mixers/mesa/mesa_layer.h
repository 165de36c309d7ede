// The Mesa mixer (docs/math.md §1.2) and GLA, which is the same layer read out with 0 CG steps:
// q, k, v projections; causal depthwise convolutions on q and k; SiLU and L2 normalisation of q and
// k per head; the forget gate γ and input gate β from two projections of the input; λ from its
// parameters; the Mesa operator (kernels/mesa/mesa_op.h) through MesaOps (mesa_ops.h).
#ifndef MESANET_MODEL_MIXERS_MESA_MESA_LAYER_H_
#define MESANET_MODEL_MIXERS_MESA_MESA_LAYER_H_

#include "model/mixers/mesa/mesa_ops.h"
#include "model/mixers/mesa/mesa_params.h"
#include "model/mixers/mixer_layer.h"
#include "model/mixers/mixer_ops.h"
#include "model/mixers/qk_features.h"

namespace mesa::model {

class MesaLayer : public MixerLayer {
 public:
  // `gla`: read out with 0 CG steps whatever the solve asks. `input_gate` false: β ≡ 1 and no λ
  // parameters (mamba2_mesa, the MesaNet paper's "Mamba2": GLA without the input gate).
  MesaLayer(const ModelConfig& config, bool gla, bool input_gate = true)
      : config_(config), gla_(gla), features_(config, /*forget_gate=*/true, input_gate) {}

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
  // The convolution tails, then H and G [batch, H, D, D].
  int64_t CarryElems(int batch) const override {
    return features_.CarryElems(batch) + 2 * StateElems(batch);
  }
  bool CopySolveInputsToHost(Backend& backend, int batch, int seq_len,
                             SolveInputs* out) const override;
  std::vector<int32_t> LastHeadCgSteps() const override {
    return ops_.current() != nullptr ? ops_.current()->LastHeadSteps() : std::vector<int32_t>{};
  }

 private:
  // λ from the layer's parameters, or floor + softplus(0) where it has none.
  void ComputeLambda(const MixerCall& call);
  MesaSolve LayerSolve(const MesaSolve& solve) const { return gla_ ? MesaSolve{0, 0.0f} : solve; }
  // The operator's inputs, with the carried states of a context-parallel call.
  MesaActs OperatorInputs(const MixerCall& call) const;
  int64_t StateElems(int batch) const {
    return int64_t{batch} * config_.n_heads * config_.head_dim * config_.head_dim;
  }

  const ModelConfig config_;
  const bool gla_;
  QkFeatures features_;
  LayerOps<MesaOps> ops_;
  // Kept from the forward for the backward.
  float *lambda_ = nullptr, *q_star_ = nullptr;
  float* d_lambda_ = nullptr;  // backward scratch
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_MIXERS_MESA_MESA_LAYER_H_
