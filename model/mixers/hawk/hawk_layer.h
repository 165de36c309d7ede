// The Hawk mixer (Griffin's recurrent block, docs/math.md §8.8): from the block's normalised input
// x, a GeLU branch y = gelu_tanh(W_y x + b_y) and a recurrent branch u = conv(W_x x + b_x) + b_c;
// block-diagonal gates ρ = W_a u + b_a, ι = W_i u + b_i; the RG-LRU h (kernels/rglru/); and the
// output W_out (h ⊙ y) + b_out, which the layer adds to the residual stream itself (its traits
// say it owns its projections: the block has no o_norm or o_proj for it).
#ifndef MESANET_MODEL_MIXERS_HAWK_HAWK_LAYER_H_
#define MESANET_MODEL_MIXERS_HAWK_HAWK_LAYER_H_

#include <cstdint>
#include <memory>

#include "model/mixers/hawk/rglru_ops.h"
#include "model/mixers/mixer_layer.h"
#include "model/mixers/mixer_ops.h"

namespace mesa::model {

class HawkLayer : public MixerLayer {
 public:
  explicit HawkLayer(const ModelConfig& config) : config_(config) {}

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
  // The convolution tail [batch, W-1, D_rnn], then h [batch, D_rnn], then the started flags
  // [batch] (float 0/1).
  int64_t CarryElems(int batch) const override {
    return int64_t{batch} * (TailElems() + config_.rnn_width + 1);
  }

 private:
  int64_t TailElems() const { return int64_t{config_.conv_width - 1} * config_.rnn_width; }
  // The projections, convolution (continued from `tail` when given) and gates of call's tokens.
  absl::Status Branches(const MixerCall& call, Act ln, float* tail);
  // h ⊙ gelu(y) through W_out, added to the residual stream `o`.
  void Output(const MixerCall& call, Act o);

  const ModelConfig config_;
  LayerOps<RgLruOps> ops_;
  // Kept for the backward: the branch pre-activations, the conv output u, the gate
  // pre-activations, the recurrence h and the gated output g = gelu(y) ⊙ h.
  Act x_pre_, y_pre_, u_, rho_, iota_, h_, g_;
  // Backward scratch.
  Act d_g_, d_h_, d_y_, d_u_, d_rho_, d_iota_, d_x_;
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_MIXERS_HAWK_HAWK_LAYER_H_
