#include "model/mixers/mlstm/mlstm_params.h"

namespace mesa::model {

MixerWeights DeclareMlstmParams(const ModelConfig& config, const std::string& prefix,
                                ParamBuilder& b) {
  // q, k, v and the convolutions as every mixer here; the gates declared here, in the order of
  // spec/mixers.h's list (a_proj, then b_proj), with xLSTM's initialisation.
  MixerWeights m = DeclareQkParams(config, prefix, {.forget = false, .input = false}, b);
  const int64_t c = config.d_model, h = config.n_heads;
  m[kAWeight] = b.Add(prefix + "attn.a_proj.weight", {h, c}, true, InitKind::kZeros);
  m[kABias] = b.AddLinspace(prefix + "attn.a_proj.bias", {h}, false, 3.0f, 6.0f);
  m[kBWeight] = b.Add(prefix + "attn.b_proj.weight", {h, c}, true, InitKind::kZeros);
  m[kBBias] = b.Add(prefix + "attn.b_proj.bias", {h}, false, InitKind::kFanIn, 1, 0.1f);
  return m;
}

}  // namespace mesa::model
