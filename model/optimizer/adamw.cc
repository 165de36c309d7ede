#include "model/optimizer/adamw.h"

#include <algorithm>
#include <cmath>

namespace mesa::model {

float LearningRate(const OptimizerSettings& s, int64_t step, int64_t total_steps) {
  if (s.warmup_steps > 0 && step < s.warmup_steps) {
    return s.lr * static_cast<float>(step + 1) / static_cast<float>(s.warmup_steps);
  }
  const int64_t decay_steps = std::max<int64_t>(1, total_steps - s.warmup_steps);
  const double progress =
      std::clamp(static_cast<double>(step - s.warmup_steps) / decay_steps, 0.0, 1.0);
  const double min_lr = s.lr * s.min_lr_ratio;
  return static_cast<float>(min_lr + 0.5 * (s.lr - min_lr) * (1.0 + std::cos(M_PI * progress)));
}

AdamW::AdamW(const OptimizerSettings& settings, const ParamLayout& layout, Backend* backend,
             int64_t shard_begin, int64_t shard_end)
    : settings_(settings),
      layout_(layout),
      backend_(backend),
      shard_begin_(std::clamp<int64_t>(shard_begin, 0, layout.total())),
      shard_end_(shard_end < 0 ? layout.total()
                               : std::clamp<int64_t>(shard_end, shard_begin_, layout.total())),
      // At least one element: an empty shard (more ranks than parameters) still gets a pointer.
      m_(backend->AllocateFloats(std::max<int64_t>(1, shard_end_ - shard_begin_))),
      v_(backend->AllocateFloats(std::max<int64_t>(1, shard_end_ - shard_begin_))) {
  for (const ParamTensor& t : layout.tensors()) {
    if (!runs_.empty() && runs_.back().weight_decay == t.weight_decay) {
      runs_.back().end = t.offset + t.size;
    } else {
      runs_.push_back({t.offset, t.offset + t.size, t.weight_decay});
    }
  }
}

AdamW::~AdamW() {
  backend_->Free(m_);
  backend_->Free(v_);
}

double AdamW::GradNorm(const float* grads) const {
  return std::sqrt(backend_->SumOfSquares(grads, layout_.total()));
}

double AdamW::ShardSumOfSquares(const float* grads) const {
  if (shard_end_ <= shard_begin_) return 0.0;
  return backend_->SumOfSquares(grads + shard_begin_, shard_end_ - shard_begin_);
}

void AdamW::Update(float* params, float* grads, double grad_norm, float lr, int64_t step) {
  if (settings_.grad_clip > 0 && grad_norm > settings_.grad_clip && shard_end_ > shard_begin_) {
    backend_->Scale(grads + shard_begin_, shard_end_ - shard_begin_,
                    static_cast<float>(settings_.grad_clip / grad_norm));
  }
  const float bc1 = 1.0f - std::pow(settings_.beta1, static_cast<float>(step + 1));
  const float bc2 = 1.0f - std::pow(settings_.beta2, static_cast<float>(step + 1));
  for (const Run& run : runs_) {
    // The part of this run inside the owned range (all of it when unsharded).
    const int64_t begin = std::max(run.begin, shard_begin_);
    const int64_t end = std::min(run.end, shard_end_);
    if (end <= begin) continue;
    const int64_t local = begin - shard_begin_;
    backend_->AdamWUpdate(params + begin, grads + begin, m_ + local, v_ + local, end - begin, lr,
                          settings_.beta1, settings_.beta2, settings_.eps,
                          run.weight_decay ? settings_.weight_decay : 0.0f, bc1, bc2);
  }
}

}  // namespace mesa::model
