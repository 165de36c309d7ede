#include "model/mixers/mixer_layer.h"

#include <array>
#include <iterator>

#include "spec/mixers.h"

namespace mesa::model {

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
