// The parameters of a Mesa or GLA layer: the q/k/v features with both gates (qk_params.h) and
// λ = lambda_floor + softplus(lambda_params) per channel (docs/math.md §2).
#ifndef MESANET_MODEL_MIXERS_MESA_MESA_PARAMS_H_
#define MESANET_MODEL_MIXERS_MESA_MESA_PARAMS_H_

#include <string>

#include "model/mixers/qk_params.h"

namespace mesa::model {

enum MesaSlot : int { kLambdaParams = kNumQkSlots };

MixerWeights DeclareMesaParams(const ModelConfig& config, const std::string& prefix,
                               ParamBuilder& builder);
// mamba2_mesa (the MesaNet paper's "Mamba2", GLA with β ≡ 1): the q/k/v features and the forget
// gate only; no b_proj, no λ.
MixerWeights DeclareMamba2MesaParams(const ModelConfig& config, const std::string& prefix,
                                     ParamBuilder& builder);

}  // namespace mesa::model

#endif  // MESANET_MODEL_MIXERS_MESA_MESA_PARAMS_H_
