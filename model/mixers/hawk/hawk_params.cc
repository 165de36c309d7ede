#include "model/mixers/hawk/hawk_params.h"

#include <cmath>

namespace mesa::model {

MixerWeights DeclareHawkParams(const ModelConfig& config, const std::string& prefix,
                               ParamBuilder& b) {
  const int64_t c = config.d_model, r = config.rnn_width, blocks = config.n_heads,
                block = config.rnn_width / config.n_heads, w = config.conv_width;
  // The output projection writes to the residual stream: variance scaled by 2/N, as o_proj's.
  const float out_scale = std::sqrt(2.0f / config.n_layers);
  const std::string p = prefix + "attn.";
  MixerWeights m;
  m[kHawkXWeight] = b.Add(p + "linear_x.weight", {r, c}, true, InitKind::kFanIn, c);
  m[kHawkXBias] = b.Add(p + "linear_x.bias", {r}, false, InitKind::kZeros);
  m[kHawkYWeight] = b.Add(p + "linear_y.weight", {r, c}, true, InitKind::kFanIn, c);
  m[kHawkYBias] = b.Add(p + "linear_y.bias", {r}, false, InitKind::kZeros);
  // N(0, 0.01 / W): std 0.05 at W = 4 (recurrentgemma's).
  m[kHawkConvWeight] = b.Add(p + "conv_1d.weight", {r, 1, w}, true, InitKind::kFanIn, w, 0.1f);
  m[kHawkConvBias] = b.Add(p + "conv_1d.bias", {r}, false, InitKind::kZeros);
  m[kHawkAGateWeight] =
      b.Add(p + "rg_lru.a_gate.weight", {blocks, block, block}, true, InitKind::kFanIn, block);
  m[kHawkAGateBias] = b.Add(p + "rg_lru.a_gate.bias", {r}, false, InitKind::kZeros);
  m[kHawkInputGateWeight] =
      b.Add(p + "rg_lru.input_gate.weight", {blocks, block, block}, true, InitKind::kFanIn, block);
  m[kHawkInputGateBias] = b.Add(p + "rg_lru.input_gate.bias", {r}, false, InitKind::kZeros);
  m[kHawkDecay] =
      b.Add(p + "rg_lru.a_param", {r}, false,
            config.hawk_paper_init ? InitKind::kRgLruDecayPaper : InitKind::kRgLruDecay);
  m[kHawkOutWeight] = b.Add(p + "linear_out.weight", {c, r}, true, InitKind::kFanIn, r, out_scale);
  m[kHawkOutBias] = b.Add(p + "linear_out.bias", {c}, false, InitKind::kZeros);
  return m;
}

}  // namespace mesa::model
