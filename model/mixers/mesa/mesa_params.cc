#include "model/mixers/mesa/mesa_params.h"

#include <cmath>

namespace mesa::model {

MixerWeights DeclareMesaParams(const ModelConfig& config, const std::string& prefix,
                               ParamBuilder& builder) {
  MixerWeights m = DeclareQkParams(config, prefix, {.forget = true, .input = true}, builder);
  // λ = floor + softplus(p) = 1 at init.
  const double target = 1.0 - config.lambda_floor;
  const float p = target > 0 ? static_cast<float>(std::log(std::expm1(target))) : 0.0f;
  m[kLambdaParams] =
      builder.AddConstant(prefix + "attn.lambda_params", {config.qk_dim()}, false, p);
  return m;
}

MixerWeights DeclareMamba2MesaParams(const ModelConfig& config, const std::string& prefix,
                                     ParamBuilder& builder) {
  return DeclareQkParams(config, prefix, {.forget = true, .input = false}, builder);
}

}  // namespace mesa::model
