// AdamW over the contiguous parameter buffer, with the learning-rate schedule and global
// grad-norm clipping (MATH.md §5). Moments live in two buffers laid out like the parameters.
// Weight decay applies to projection matrices only (not the embedding, λ, gate biases, norms).
#ifndef MESANET_MODEL_OPTIMIZER_ADAMW_H_
#define MESANET_MODEL_OPTIMIZER_ADAMW_H_

#include <cstdint>

#include "model/backend/backend.h"
#include "model/config/job_config.h"
#include "model/model/param_layout.h"

namespace mesa::model {

// Linear warmup from lr/warmup to lr over `warmup_steps`, then cosine decay to min_lr_ratio * lr
// at `total_steps`. `step` is 0-based.
float LearningRate(const OptimizerSettings& settings, int64_t step, int64_t total_steps);

class AdamW {
 public:
  AdamW(const OptimizerSettings& settings, const ParamLayout& layout, Backend* backend);
  ~AdamW();
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;

  // Global L2 norm of the gradients.
  double GradNorm(const float* grads) const;
  // Clips (to settings.grad_clip, given the norm) and applies one update with `lr`.
  // `step` is the 0-based number of updates done before this one (bias correction).
  void Update(float* params, float* grads, double grad_norm, float lr, int64_t step);

  float* m() { return m_; }
  float* v() { return v_; }
  int64_t size() const { return layout_.total(); }

 private:
  OptimizerSettings settings_;
  const ParamLayout& layout_;
  Backend* backend_;
  float* m_;
  float* v_;
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_OPTIMIZER_ADAMW_H_
