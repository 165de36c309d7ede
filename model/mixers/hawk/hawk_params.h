// The parameters of a Hawk layer (Griffin's recurrent block, docs/math.md §8.8): the two input
// branches (x: recurrent, y: GeLU), the depthwise convolution with its bias, the block-diagonal
// recurrence and input gates with their biases, the RG-LRU decay p and the output projection.
#ifndef MESANET_MODEL_MIXERS_HAWK_HAWK_PARAMS_H_
#define MESANET_MODEL_MIXERS_HAWK_HAWK_PARAMS_H_

#include <string>

#include "model/config/job_config.h"
#include "model/params/param_builder.h"

namespace mesa::model {

enum HawkSlot : int {
  kHawkXWeight,
  kHawkXBias,
  kHawkYWeight,
  kHawkYBias,
  kHawkConvWeight,
  kHawkConvBias,
  kHawkAGateWeight,
  kHawkAGateBias,
  kHawkInputGateWeight,
  kHawkInputGateBias,
  kHawkDecay,
  kHawkOutWeight,
  kHawkOutBias,
};

MixerWeights DeclareHawkParams(const ModelConfig& config, const std::string& prefix,
                               ParamBuilder& builder);

}  // namespace mesa::model

#endif  // MESANET_MODEL_MIXERS_HAWK_HAWK_PARAMS_H_
