// The softmax attention mixer, global or sliding-window (docs/math.md §8.3): the q, k, v
// projections and the short causal convolutions on q and k that every mixer here has, then
// rotary position embeddings on q and k (no SiLU, no L2 normalisation: softmax attention keeps
// the scale of its scores), then causal softmax attention with scale 1/sqrt(D) through
// AttentionOps (attention_ops.h). No gates and no λ, so a layer has the parameters of multi-head
// attention plus the convolutions and the output norm that every layer has.
//
// Decoding keeps, per layer and sequence, a KV cache (rotated keys, values) and the convolution
// tails: W slots per sequence for a window W (a ring buffer, constant memory); for global
// attention it grows with the context (2 * H * D floats per token and sequence).
#ifndef MESANET_MODEL_MIXERS_ATTENTION_ATTENTION_LAYER_H_
#define MESANET_MODEL_MIXERS_ATTENTION_ATTENTION_LAYER_H_

#include <cstdint>
#include <memory>

#include "model/mixers/attention/attention_ops.h"
#include "model/mixers/mixer_layer.h"
#include "model/mixers/mixer_ops.h"
#include "model/mixers/qk_features.h"
#include "model/mixers/qk_params.h"

namespace mesa::model {

class AttentionLayer : public MixerLayer {
 public:
  // `window`: 0 = global causal, W = each token sees itself and the W - 1 before it.
  AttentionLayer(const ModelConfig& config, int window) : config_(config), window_(window) {}

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
  // The cache's lengths are kept on the host (positions, ring slots, growth).
  bool StepRecordable() const override { return false; }

  // The cache slots per sequence a new decoding state starts with for global attention (it
  // doubles when a sequence outgrows it).
  static constexpr int64_t kInitialGlobalCapacity = 256;

 private:
  AttnShape Shape(int batch, int seq_len) const;
  // q_pre, k_pre, v by the projections; q, k by the convolutions, continued from (and advancing)
  // rows [first_row, ...) of `tails` when decoding, from zero inputs when `tails` is null.
  absl::Status Project(const MixerCall& call, Act ln, ConvTails* tails, int first_row);

  const ModelConfig config_;
  const int window_;
  LayerOps<AttentionOps> ops_;
  // Kept from the forward for the backward. o_ is the model's buffer the forward wrote (kept by
  // the model for its output norm until the backward).
  Act q_pre_, k_pre_, q_, k_, v_, o_;
  // Backward scratch: the gradients w.r.t. q, k, v (after rotation) and the projections' outputs.
  struct Scratch {
    Act d_q, d_k, d_v, d_pre;
  } scratch_;
  int64_t last_seq_len_ = 0;  // for the FLOP estimate
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_MIXERS_ATTENTION_ATTENTION_LAYER_H_
