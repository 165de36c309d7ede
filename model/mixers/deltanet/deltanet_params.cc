#include "model/mixers/deltanet/deltanet_params.h"

namespace mesa::model {

MixerWeights DeclareDeltaNetParams(const ModelConfig& config, const std::string& prefix,
                                   ParamBuilder& builder) {
  return DeclareQkParams(config, prefix, {.forget = false, .input = true}, builder);
}

MixerWeights DeclareGatedDeltaNetParams(const ModelConfig& config, const std::string& prefix,
                                        ParamBuilder& builder) {
  return DeclareQkParams(config, prefix, {.forget = true, .input = true}, builder);
}

}  // namespace mesa::model
