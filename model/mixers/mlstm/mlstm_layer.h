// The mLSTM mixer (docs/math.md §8.9): the Mesa layer's q, k, v projections and short
// convolutions on q and k without SiLU or L2 normalisation, k scaled by 1/sqrt(D), per-head
// gates from the layer's input (forget f̃: a_proj, exponential input ĩ: b_proj), then the
// stabilised matrix memory through MlstmOps; the block's head norm and o_proj follow.
#ifndef MESANET_MODEL_MIXERS_MLSTM_MLSTM_LAYER_H_
#define MESANET_MODEL_MIXERS_MLSTM_MLSTM_LAYER_H_

#include <cstdint>
#include <memory>

#include "model/mixers/mixer_layer.h"
#include "model/mixers/mixer_ops.h"
#include "model/mixers/mlstm/mlstm_ops.h"
#include "model/mixers/qk_features.h"

namespace mesa::model {

class MlstmLayer : public MixerLayer {
 public:
  explicit MlstmLayer(const ModelConfig& config)
      : config_(config),
        features_(config, /*forget_gate=*/true, /*input_gate=*/true, /*normalise=*/false) {}

  void Plan(BufferPlan& plan, int64_t bt) override { features_.Plan(plan, bt); }
  void PlanScratch(BufferPlan& plan, int64_t bt) override { features_.PlanScratch(plan, bt); }
  absl::StatusOr<double> Forward(const MixerCall& call, Act ln, Act o,
                                 const MesaSolve& solve) override;
  absl::StatusOr<double> Backward(const MixerCall& call, Act ln, Act d_o, Act d_ln,
                                  const MesaSolve& solve) override;
  absl::StatusOr<std::unique_ptr<MixerState>> NewState(Backend& backend, int rows) override;
  absl::StatusOr<double> ForwardFrom(const MixerCall& call, Act ln, Act o, const MesaSolve& solve,
                                     MixerState& state, int first_row) override;
  double SolveFlopsPerToken(int cg_steps) const override;
  // The convolution tails, then C' [B,H,D,D], n' [B,H,D] and m [B,H].
  int64_t CarryElems(int batch) const override {
    return features_.CarryElems(batch) + StateElems(batch);
  }

 private:
  int64_t StateElems(int batch) const {
    const int64_t d = config_.head_dim;
    return int64_t{batch} * config_.n_heads * (d * d + d + 1);
  }
  MlstmActs OperatorInputs(const MixerCall& call) const;

  const ModelConfig config_;
  QkFeatures features_;
  LayerOps<MlstmOps> ops_;
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_MIXERS_MLSTM_MLSTM_LAYER_H_
