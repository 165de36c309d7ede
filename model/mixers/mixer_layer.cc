#include "model/mixers/mixer_layer.h"

#include <array>
#include <iterator>

#include "spec/mixers.h"

namespace mesa::model {

void MixerScratch::Plan(BufferPlan& plan, int64_t bt, const ModelConfig& config) {
  const int64_t hd = config.qk_dim(), h = config.n_heads;
  plan.acts.insert(plan.acts.end(), {{&d_q, bt * hd},
                                     {&d_k, bt * hd},
                                     {&d_v, bt * hd},
                                     {&d_conv, bt * hd},
                                     {&d_pre, bt * hd},
                                     {&d_a_pre, bt * h},
                                     {&d_b_pre, bt * h}});
  plan.floats.insert(plan.floats.end(),
                     {{&d_log_gamma, bt * h}, {&d_beta, bt * h}, {&d_lambda, hd}});
}

namespace {

std::array<MixerLayerFactory, std::size(spec::kMixers)>& Factories() {
  static std::array<MixerLayerFactory, std::size(spec::kMixers)> factories{};
  return factories;
}

}  // namespace

bool RegisterMixerLayer(MixerKind kind, MixerLayerFactory factory) {
  Factories()[static_cast<size_t>(kind)] = factory;
  return true;
}

std::unique_ptr<MixerLayer> MakeMixerLayer(MixerKind kind, const ModelConfig& config) {
  const MixerLayerFactory factory = Factories()[static_cast<size_t>(kind)];
  return factory != nullptr ? factory(config) : nullptr;
}

}  // namespace mesa::model
