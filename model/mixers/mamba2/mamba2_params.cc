#include "model/mixers/mamba2/mamba2_params.h"

#include <cmath>

namespace mesa::model {

MixerWeights DeclareMamba2Params(const ModelConfig& config, const std::string& prefix,
                                 ParamBuilder& b) {
  const int64_t c = config.d_model, inner = config.ssm_inner, heads = config.ssm_heads(),
                conv = config.ssm_conv_channels(), w = config.conv_width;
  const int64_t in_rows = 2 * inner + 2 * config.ssm_state + heads;
  // The output projection writes to the residual stream: variance scaled by 2/N, as o_proj's.
  const float out_scale = std::sqrt(2.0f / config.n_layers);
  const std::string p = prefix + "attn.";
  MixerWeights m;
  m[kSsmInProj] = b.Add(p + "in_proj.weight", {in_rows, c}, true, InitKind::kFanIn, c);
  // The project's fan-in rule (the public block uses PyTorch's default U(±1/sqrt(W))).
  m[kSsmConvWeight] = b.Add(p + "conv1d.weight", {conv, 1, w}, true, InitKind::kFanIn, w);
  m[kSsmConvBias] = b.Add(p + "conv1d.bias", {conv}, false, InitKind::kZeros);
  // dt_bias, A_log and D are not decayed (as the public implementations mark them).
  m[kSsmDtBias] = b.Add(p + "dt_bias", {heads}, false, InitKind::kSsmDtBias);
  m[kSsmALog] = b.Add(p + "A_log", {heads}, false, InitKind::kSsmALog);
  m[kSsmSkip] = b.Add(p + "D", {heads}, false, InitKind::kOnes);
  m[kSsmNormWeight] = b.Add(p + "norm.weight", {inner}, false, InitKind::kOnes);
  m[kSsmOutProj] =
      b.Add(p + "out_proj.weight", {c, inner}, true, InitKind::kFanIn, inner, out_scale);
  return m;
}

}  // namespace mesa::model
