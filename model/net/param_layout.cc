#include "model/net/param_layout.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace mesa::model {
namespace {

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Uniform in (0, 1), from 53 random bits.
double Uniform(uint64_t& state) {
  return (static_cast<double>(SplitMix64(state) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

}  // namespace

int64_t ParamLayout::Add(std::string name, std::vector<int64_t> shape, bool decay, InitKind init,
                         int64_t fan_in, float scale) {
  ParamTensor t;
  t.name = std::move(name);
  t.shape = std::move(shape);
  t.size = 1;
  for (int64_t d : t.shape) t.size *= d;
  // Every tensor starts 256-byte aligned (64 floats), so bf16 copies of the weights (128-byte
  // aligned then) and the float32 weights both meet cuBLASLt's 16-byte alignment for its fast
  // kernels. The gaps are zero and belong to no tensor: never read, decayed or saved.
  total_ = (total_ + kTensorAlign - 1) / kTensorAlign * kTensorAlign;
  t.offset = total_;
  t.weight_decay = decay;
  t.init = init;
  t.fan_in = fan_in;
  t.init_scale = scale;
  total_ += t.size;
  values_ += t.size;
  tensors_.push_back(std::move(t));
  return tensors_.back().offset;
}

ParamLayout::ParamLayout(const ModelConfig& config) : config_(config) {
  const int64_t c = config.d_model, hd = config.qk_dim(), h = config.n_heads, d = config.head_dim,
                f = config.mlp_hidden, w = config.conv_width;
  // Residual-stream output projections get variance scaled by 2/N (docs/math.md §4).
  const float out_scale = std::sqrt(2.0f / config.n_layers);
  embeddings_ = Add("model.embeddings.weight", {config.vocab_size, c}, false, InitKind::kFanIn, c);
  padded_vocab_ = PaddedVocab(config.vocab_size);
  total_ += (padded_vocab_ - config.vocab_size) * c;  // the zero rows after the embedding
  for (int i = 0; i < config.n_layers; ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    LayerOffsets l;
    l.attn_norm = Add(p + "attn_norm.weight", {c}, false, InitKind::kOnes);
    l.q_proj = Add(p + "attn.q_proj.weight", {hd, c}, true, InitKind::kFanIn, c);
    l.k_proj = Add(p + "attn.k_proj.weight", {hd, c}, true, InitKind::kFanIn, c);
    l.v_proj = Add(p + "attn.v_proj.weight", {hd, c}, true, InitKind::kFanIn, c);
    l.q_conv = Add(p + "attn.q_conv1d.weight", {hd, 1, w}, true, InitKind::kFanIn, w);
    l.k_conv = Add(p + "attn.k_conv1d.weight", {hd, 1, w}, true, InitKind::kFanIn, w);
    // The gates β and γ and λ exist where the layer's mixer has them (spec/mixers.h); absent
    // tensors have offset -1.
    const spec::MixerTraits& mixer = spec::TraitsOf(config.LayerMixer(i));
    if (mixer.has_forget_gate) {
      l.a_weight = Add(p + "attn.a_proj.weight", {h, c}, true, InitKind::kFanIn, c);
      l.a_bias = Add(p + "attn.a_proj.bias", {h}, false, InitKind::kGammaBias);
    }
    if (mixer.has_input_gate) {
      l.b_weight = Add(p + "attn.b_proj.weight", {h, c}, true, InitKind::kFanIn, c);
      l.b_bias = Add(p + "attn.b_proj.bias", {h}, false, InitKind::kZeros);
    }
    if (mixer.has_lambda) {
      l.lambda = Add(p + "attn.lambda_params", {hd}, false, InitKind::kLambda);
    }
    l.o_norm = Add(p + "attn.o_norm.weight", {d}, false, InitKind::kOnes);
    l.o_proj = Add(p + "attn.o_proj.weight", {c, hd}, true, InitKind::kFanIn, hd, out_scale);
    l.mlp_norm = Add(p + "mlp_norm.weight", {c}, false, InitKind::kOnes);
    l.gate_proj = Add(p + "mlp.gate_proj.weight", {f, c}, true, InitKind::kFanIn, c);
    l.up_proj = Add(p + "mlp.up_proj.weight", {f, c}, true, InitKind::kFanIn, c);
    l.down_proj = Add(p + "mlp.down_proj.weight", {c, f}, true, InitKind::kFanIn, f, out_scale);
    layers_.push_back(l);
  }
  final_norm_ = Add("model.norm.weight", {c}, false, InitKind::kOnes);
}

void ParamLayout::Initialize(uint64_t seed, float* params) const {
  for (size_t index = 0; index < tensors_.size(); ++index) {
    const ParamTensor& t = tensors_[index];
    float* out = params + t.offset;
    // Each tensor has its own stream, so adding a tensor does not reshuffle the others.
    uint64_t state = seed * 0x100000001b3ULL + index * 0x9e3779b97f4a7c15ULL + 12345;
    switch (t.init) {
      case InitKind::kOnes:
        for (int64_t i = 0; i < t.size; ++i) out[i] = 1.0f;
        break;
      case InitKind::kZeros:
        for (int64_t i = 0; i < t.size; ++i) out[i] = 0.0f;
        break;
      case InitKind::kFanIn: {
        const double std = t.init_scale / std::sqrt(static_cast<double>(t.fan_in));
        for (int64_t i = 0; i < t.size;
             ++i) {  // Box-Muller: portable, unlike std::normal_distribution.
          const double u1 = Uniform(state), u2 = Uniform(state);
          out[i] =
              static_cast<float>(std * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
        }
        break;
      }
      case InitKind::kLambda: {
        const double target = 1.0 - config_.lambda_floor;  // λ = floor + softplus(p) = 1.
        const float p = target > 0 ? static_cast<float>(std::log(std::expm1(target))) : 0.0f;
        for (int64_t i = 0; i < t.size; ++i) out[i] = p;
        break;
      }
      case InitKind::kGammaBias:
        for (int64_t i = 0; i < t.size; ++i) {
          const double s = t.size == 1 ? 0.95 : 0.9 + 0.09 * i / (t.size - 1);
          out[i] = static_cast<float>(std::log(s / (1.0 - s)));
        }
        break;
    }
  }
}

}  // namespace mesa::model
