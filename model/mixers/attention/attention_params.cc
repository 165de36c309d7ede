#include "model/mixers/attention/attention_params.h"

namespace mesa::model {

MixerWeights DeclareAttentionParams(const ModelConfig& config, const std::string& prefix,
                                    ParamBuilder& builder) {
  return DeclareQkParams(config, prefix, {}, builder);
}

}  // namespace mesa::model
