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

AdamW::AdamW(const OptimizerSettings& settings, const ParamLayout& layout, Backend* backend)
    : settings_(settings), layout_(layout), backend_(backend),
      m_(backend->AllocateFloats(layout.total())), v_(backend->AllocateFloats(layout.total())) {}

AdamW::~AdamW() {
  backend_->Free(m_);
  backend_->Free(v_);
}

double AdamW::GradNorm(const float* grads) const {
  return std::sqrt(backend_->SumOfSquares(grads, layout_.total()));
}

void AdamW::Update(float* params, float* grads, double grad_norm, float lr, int64_t step) {
  if (settings_.grad_clip > 0 && grad_norm > settings_.grad_clip) {
    backend_->Scale(grads, layout_.total(), static_cast<float>(settings_.grad_clip / grad_norm));
  }
  const float bc1 = 1.0f - std::pow(settings_.beta1, static_cast<float>(step + 1));
  const float bc2 = 1.0f - std::pow(settings_.beta2, static_cast<float>(step + 1));
  for (const ParamTensor& t : layout_.tensors()) {
    backend_->AdamWUpdate(params + t.offset, grads + t.offset, m_ + t.offset, v_ + t.offset, t.size,
                          lr, settings_.beta1, settings_.beta2, settings_.eps,
                          t.weight_decay ? settings_.weight_decay : 0.0f, bc1, bc2);
  }
}

}  // namespace mesa::model
