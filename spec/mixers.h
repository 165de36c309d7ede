// The sequence mixers a layer can use and what each one needs: the one table that the job-spec
// validator, the trainer's configuration (model/config), the parameter layout (model/net) and the
// layer factory (model/mixers) read. Adding a mixer: a MixerKind value and a row here, its operator
// (kernels/<mixer>/) and its folder model/mixers/<mixer>/ (layer, operator interface, CPU and CUDA
// implementations registered by backend name); docs/design.md §7 "Mixers".
#ifndef MESANET_SPEC_MIXERS_H_
#define MESANET_SPEC_MIXERS_H_

#include <cstdint>
#include <string>

#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace mesa::spec {

enum class MixerKind { kMesa, kGla, kDeltaNet, kGatedDeltaNet, kAttention, kSwa };

struct MixerTraits {
  MixerKind kind;
  const char* name;      // as written in model.mixer / model.layer_mixers
  bool solves_with_cg;   // the CG options (cg_steps, cg_tol, cg_max_steps) apply
  bool has_forget_gate;  // γ: per-layer a_proj weight and bias
  bool has_lambda;       // λ: per-layer lambda_params
  bool has_input_gate;   // β: per-layer b_proj weight and bias
  // Softmax attention (model/mixers/attention/): rotary q and k, a KV cache when decoding, the
  // window model.attention_window (see AttentionWindowOf).
  bool is_attention;
};

// Row i describes MixerKind value i. GLA is the Mesa operator with 0 CG steps; DeltaNet and Gated
// DeltaNet use the delta rule (kernels/deltanet/); "attention" and "swa" are softmax attention
// (kernels/attention/), "swa" the spelling for a layer that must have a window.
inline constexpr MixerTraits kMixers[] = {
    {MixerKind::kMesa, "mesa", true, true, true, true, false},
    {MixerKind::kGla, "gla", false, true, true, true, false},
    {MixerKind::kDeltaNet, "deltanet", false, false, false, true, false},
    {MixerKind::kGatedDeltaNet, "gated_deltanet", false, true, false, true, false},
    {MixerKind::kAttention, "attention", false, false, false, false, true},
    {MixerKind::kSwa, "swa", false, false, false, false, true},
};

constexpr bool MixerTableIsIndexedByKind() {
  for (int i = 0; i < static_cast<int>(std::size(kMixers)); ++i) {
    if (static_cast<int>(kMixers[i].kind) != i) return false;
  }
  return true;
}
static_assert(MixerTableIsIndexedByKind(), "kMixers rows must follow MixerKind's order");

inline constexpr const MixerTraits& TraitsOf(MixerKind kind) {
  return kMixers[static_cast<int>(kind)];
}

// The row named `name`, or nullptr.
inline const MixerTraits* FindMixer(absl::string_view name) {
  for (const MixerTraits& m : kMixers) {
    if (name == m.name) return &m;
  }
  return nullptr;
}

// Rotary position embeddings of attention layers (docs/math.md §8.3): rotate-half
// pairs (i, i + D/2) turned by the angle position * kRotaryBase^(-2i/D), as Llama and GPT-NeoX.
inline constexpr double kRotaryBase = 10000.0;

// Parameters of a layer of `mixer` beyond those every layer has (norms, q/k/v/o projections, the
// q/k convolutions, the output norm, the MLP): the gates β and γ and λ where it has them. An
// attention layer has none of them (the MesaNet paper's "same parameters as multi-head attention").
inline int64_t MixerOwnParameters(const MixerTraits& mixer, int64_t d_model, int64_t heads,
                                  int64_t qk_dim) {
  const int64_t gate = heads * d_model + heads;  // a projection to one value per head, with bias
  return (mixer.has_input_gate ? gate : 0) + (mixer.has_forget_gate ? gate : 0) +
         (mixer.has_lambda ? qk_dim : 0);
}

// What the parameter count depends on, with the spec's defaults already applied.
struct ModelShape {
  int64_t vocab_size = 0;
  int64_t d_model = 0;
  int64_t n_heads = 0;
  int64_t head_dim = 0;
  int64_t mlp_hidden = 0;  // SwiGLU hidden width
  int64_t conv_width = 0;
  bool tie_embeddings = true;
};

// Number of float parameters of a model of `shape` whose layer l uses `layer_mixers[l]` (tied
// embedding counted once). The one formula: spec::ModelParameters (job specs) and
// model::ModelConfig::NumParameters (the trainer's configuration) both call it. A null entry (a
// mixer name the validator reports) counts only what every layer has.
inline int64_t ModelParameterCount(const ModelShape& shape,
                                   absl::Span<const MixerTraits* const> layer_mixers) {
  const int64_t c = shape.d_model, h = shape.n_heads, hd = h * shape.head_dim;
  const int64_t per_layer = 2 * c                        // attention and MLP norms
                            + 3 * hd * c                 // q, k, v
                            + 2 * hd * shape.conv_width  // q/k convolutions
                            + shape.head_dim             // output norm
                            + c * hd                     // output projection
                            + 3 * c * shape.mlp_hidden;  // SwiGLU gate, up, down
  int64_t mixer_specific = 0;  // b_proj (β), a_proj (γ) and lambda, where the mixer has them
  for (const MixerTraits* mixer : layer_mixers) {
    if (mixer != nullptr) mixer_specific += MixerOwnParameters(*mixer, c, h, hd);
  }
  const int64_t vocab_tables = shape.tie_embeddings ? 1 : 2;  // embedding, and lm_head if untied
  const int64_t n_layers = static_cast<int64_t>(layer_mixers.size());
  return vocab_tables * shape.vocab_size * c + n_layers * per_layer + mixer_specific + c;
}

// The window of an attention layer of `kind` in a model whose layers include `pattern_has_swa`
// "swa" layers: "swa" layers always use model.attention_window (which must then be > 0); an
// "attention" layer uses it too (0 = global), except next to "swa" layers, where it is global
// (a pattern like [swa, swa, swa, attention] mixes local and global layers). 0 for other mixers.
inline int AttentionWindowOf(MixerKind kind, bool pattern_has_swa, int attention_window) {
  if (kind == MixerKind::kSwa) return attention_window;
  if (kind == MixerKind::kAttention) return pattern_has_swa ? 0 : attention_window;
  return 0;
}

// "mesa, gla, deltanet, gated_deltanet, attention, swa".
inline std::string MixerNameList() {
  return absl::StrJoin(kMixers, ", ",
                       [](std::string* out, const MixerTraits& m) { out->append(m.name); });
}

}  // namespace mesa::spec

#endif  // MESANET_SPEC_MIXERS_H_
