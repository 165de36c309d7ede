#include "model/mixers/qk_params.h"

namespace mesa::model {

MixerWeights DeclareQkParams(const ModelConfig& config, const std::string& prefix, QkGates gates,
                             ParamBuilder& builder) {
  const int64_t c = config.d_model, hd = config.qk_dim(), h = config.n_heads, w = config.conv_width;
  MixerWeights m;
  m[kQProj] = builder.Add(prefix + "attn.q_proj.weight", {hd, c}, true, InitKind::kFanIn, c);
  m[kKProj] = builder.Add(prefix + "attn.k_proj.weight", {hd, c}, true, InitKind::kFanIn, c);
  m[kVProj] = builder.Add(prefix + "attn.v_proj.weight", {hd, c}, true, InitKind::kFanIn, c);
  m[kQConv] = builder.Add(prefix + "attn.q_conv1d.weight", {hd, 1, w}, true, InitKind::kFanIn, w);
  m[kKConv] = builder.Add(prefix + "attn.k_conv1d.weight", {hd, 1, w}, true, InitKind::kFanIn, w);
  if (gates.forget) {
    m[kAWeight] = builder.Add(prefix + "attn.a_proj.weight", {h, c}, true, InitKind::kFanIn, c);
    m[kABias] = builder.Add(prefix + "attn.a_proj.bias", {h}, false, InitKind::kGammaBias);
  }
  if (gates.input) {
    m[kBWeight] = builder.Add(prefix + "attn.b_proj.weight", {h, c}, true, InitKind::kFanIn, c);
    m[kBBias] = builder.Add(prefix + "attn.b_proj.bias", {h}, false, InitKind::kZeros);
  }
  return m;
}

}  // namespace mesa::model
