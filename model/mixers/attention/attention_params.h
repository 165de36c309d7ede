// The parameters of a softmax attention layer: the q, k, v projections and the q/k convolutions,
// no gates (the MesaNet paper's "same parameters as multi-head attention").
#ifndef MESANET_MODEL_MIXERS_ATTENTION_ATTENTION_PARAMS_H_
#define MESANET_MODEL_MIXERS_ATTENTION_ATTENTION_PARAMS_H_

#include <string>

#include "model/mixers/qk_params.h"

namespace mesa::model {

MixerWeights DeclareAttentionParams(const ModelConfig& config, const std::string& prefix,
                                    ParamBuilder& builder);

}  // namespace mesa::model

#endif  // MESANET_MODEL_MIXERS_ATTENTION_ATTENTION_PARAMS_H_
