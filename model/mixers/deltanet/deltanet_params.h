// The parameters of a DeltaNet layer (the q/k/v features with the input gate β) and of a Gated
// DeltaNet layer (with the forget gate γ too); docs/math.md §8.
#ifndef MESANET_MODEL_MIXERS_DELTANET_DELTANET_PARAMS_H_
#define MESANET_MODEL_MIXERS_DELTANET_DELTANET_PARAMS_H_

#include <string>

#include "model/mixers/qk_params.h"

namespace mesa::model {

MixerWeights DeclareDeltaNetParams(const ModelConfig& config, const std::string& prefix,
                                   ParamBuilder& builder);
MixerWeights DeclareGatedDeltaNetParams(const ModelConfig& config, const std::string& prefix,
                                        ParamBuilder& builder);

}  // namespace mesa::model

#endif  // MESANET_MODEL_MIXERS_DELTANET_DELTANET_PARAMS_H_
