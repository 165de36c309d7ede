#include "model/net/param_layout.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "model/mixers/mixer_params.h"
#include "model/params/initialize.h"

namespace mesa::model {

ParamLayout::ParamLayout(const ModelConfig& config) {
  const int64_t c = config.d_model, hd = config.qk_dim(), d = config.head_dim,
                f = config.mlp_hidden;
  ParamBuilder& b = params_;
  // Residual-stream output projections get variance scaled by 2/N (docs/math.md §4).
  const float out_scale = std::sqrt(2.0f / config.n_layers);
  padded_vocab_ = PaddedVocab(config.vocab_size);
  const int64_t head_padding = (padded_vocab_ - config.vocab_size) * c;
  // Tied, the lookup is scaled by sqrt(C), so entries of std 1/sqrt(C) give the residual stream
  // std 1; untied, the lookup is unscaled (FLA's), so the table starts at std 1 for the same
  // stream, and the separate head takes the tied table's std 1/sqrt(C).
  embeddings_ = b.Add("model.embeddings.weight", {config.vocab_size, c}, false, InitKind::kFanIn,
                      config.tie_embeddings ? c : 1);
  if (config.tie_embeddings) {
    head_ = embeddings_;
    b.AddUnowned(head_padding);  // the zero rows after the embedding
  }
  for (int i = 0; i < config.n_layers; ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    LayerOffsets l;
    l.attn_norm = b.Add(p + "attn_norm.weight", {c}, false, InitKind::kOnes);
    l.mixer = DeclareMixerParams(config.LayerMixer(i), config, p, b);
    // A mixer that owns its projections (Hawk) projects back itself: no head norm, no o_proj.
    if (!spec::TraitsOf(config.LayerMixer(i)).owns_projections) {
      l.o_norm = b.Add(p + "attn.o_norm.weight", {d}, false, InitKind::kOnes);
      l.o_proj = b.Add(p + "attn.o_proj.weight", {c, hd}, true, InitKind::kFanIn, hd, out_scale);
    }
    l.mlp_norm = b.Add(p + "mlp_norm.weight", {c}, false, InitKind::kOnes);
    l.gate_proj = b.Add(p + "mlp.gate_proj.weight", {f, c}, true, InitKind::kFanIn, c);
    l.up_proj = b.Add(p + "mlp.up_proj.weight", {f, c}, true, InitKind::kFanIn, c);
    l.down_proj = b.Add(p + "mlp.down_proj.weight", {c, f}, true, InitKind::kFanIn, f, out_scale);
    layers_.push_back(l);
  }
  final_norm_ = b.Add("model.norm.weight", {c}, false, InitKind::kOnes);
  if (!config.tie_embeddings) {
    // Last, so that its gradient (the backward's first) is ready with the final norm's.
    head_ = b.Add("lm_head.weight", {config.vocab_size, c}, true, InitKind::kFanIn, c);
    b.AddUnowned(head_padding);
  }
}

int64_t ParamLayout::OffsetOf(absl::string_view name) const {
  for (const ParamTensor& t : tensors()) {
    if (t.name == name) return t.offset;
  }
  return -1;
}

void ParamLayout::Initialize(uint64_t seed, float* params) const {
  InitializeParams(params_.tensors(), seed, params);
}

}  // namespace mesa::model
