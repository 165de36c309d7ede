// AdamW over the contiguous parameter buffer, with the learning-rate schedule and global
// grad-norm clipping (docs/math.md §5). Moments live in two buffers laid out like the parameters.
// Weight decay applies to projection matrices only (not the embedding, λ, gate biases, norms).
//
// ZeRO-1: an instance may own only [shard_begin, shard_end) of the flat buffer (its rank's shard,
// model/comm/communicator.h ShardLayout); then the moments hold just that range (m()[0] is element
// shard_begin), and Update/ShardSumOfSquares touch only that range of the full-size params and
// grads buffers. Element by element the update is the same as the unsharded one.
#ifndef MESANET_MODEL_OPTIMIZER_ADAMW_H_
#define MESANET_MODEL_OPTIMIZER_ADAMW_H_

#include <cstdint>
#include <vector>

#include "model/backend/backend.h"
#include "model/config/job_config.h"
#include "model/net/param_layout.h"

namespace mesa::model {

// Linear warmup from lr/warmup to lr over `warmup_steps`, then cosine decay to min_lr_ratio * lr
// at `total_steps`. `step` is 0-based.
float LearningRate(const OptimizerSettings& settings, int64_t step, int64_t total_steps);

class AdamW {
 public:
  // shard_end < 0: the whole buffer (no sharding).
  AdamW(const OptimizerSettings& settings, const ParamLayout& layout, Backend* backend,
        int64_t shard_begin = 0, int64_t shard_end = -1);
  ~AdamW();
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;

  // Global L2 norm of the gradients (the whole buffer).
  double GradNorm(const float* grads) const;
  // Sum of squares of grads[shard_begin, shard_end): summed over ranks, the squared global norm.
  double ShardSumOfSquares(const float* grads) const;
  // Clips (to settings.grad_clip, given the global norm) and applies one update with `lr` to the
  // owned range. `step` is the 0-based number of updates done before this one (bias correction).
  void Update(float* params, float* grads, double grad_norm, float lr, int64_t step);

  float* m() { return m_; }
  float* v() { return v_; }
  // Elements of m() and v(): the owned range.
  int64_t size() const { return shard_end_ - shard_begin_; }
  int64_t shard_begin() const { return shard_begin_; }
  int64_t shard_end() const { return shard_end_; }

 private:
  // A run of consecutive tensors with the same weight decay, gaps between them included: one
  // AdamW launch each instead of one per tensor (the gaps' zeros stay zero).
  struct Run {
    int64_t begin, end;
    bool weight_decay;
  };

  OptimizerSettings settings_;
  const ParamLayout& layout_;
  Backend* backend_;
  int64_t shard_begin_, shard_end_;
  float* m_;
  float* v_;
  std::vector<Run> runs_;
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_OPTIMIZER_ADAMW_H_
