// The parameters of a Mamba-2 layer (docs/math.md §8.10), in the order of spec/mixers.h's list:
// the in-projection [z | x | B | C | dt], the convolution over x, B, C with its bias, dt_bias,
// A_log, the skip D, the gated RMSNorm's weight and the output projection.
#ifndef MESANET_MODEL_MIXERS_MAMBA2_MAMBA2_PARAMS_H_
#define MESANET_MODEL_MIXERS_MAMBA2_MAMBA2_PARAMS_H_

#include <string>

#include "model/config/job_config.h"
#include "model/params/param_builder.h"

namespace mesa::model {

enum Mamba2Slot : int {
  kSsmInProj,
  kSsmConvWeight,
  kSsmConvBias,
  kSsmDtBias,
  kSsmALog,
  kSsmSkip,
  kSsmNormWeight,
  kSsmOutProj,
};

MixerWeights DeclareMamba2Params(const ModelConfig& config, const std::string& prefix,
                                 ParamBuilder& builder);

}  // namespace mesa::model

#endif  // MESANET_MODEL_MIXERS_MAMBA2_MAMBA2_PARAMS_H_
