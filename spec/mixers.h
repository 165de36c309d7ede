// The sequence mixers a layer can use and what each one needs: the one table that the job-spec
// validator, the trainer's configuration (model/config) and the parameter count read, and that
// each mixer's parameter declaration (model/mixers/<mixer>/) is tested against. Adding a mixer:
// docs/design.md §7 "Adding a mixer".
#ifndef MESANET_SPEC_MIXERS_H_
#define MESANET_SPEC_MIXERS_H_

#include <cstdint>
#include <span>
#include <string>

#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace mesa::spec {

enum class MixerKind {
  kMesa,
  kGla,
  kDeltaNet,
  kGatedDeltaNet,
  kAttention,
  kSwa,
  kHawk,
  kMamba2Mesa,
  kMlstm,
  kMamba2
};

// A dimension of a mixer's parameter tensor, in terms of the model's shape (ModelShape).
// Hawk's recurrent width D_rnn is kRnnWidth; its gate matrices are block-diagonal with one block
// per head (kGateBlocks = n_heads blocks of kGateBlockWidth = D_rnn / n_heads).
enum class Dim {
  kOne,
  kModel,
  kHeads,
  kQkDim,
  kConvWidth,
  kRnnWidth,
  kGateBlocks,
  kGateBlockWidth,
  // Mamba-2 (docs/math.md §8.10): the inner width d_in = ssm_expand x d_model, its in-projection's
  // rows 2 d_in + 2N + H_m (z, x, B, C, dt), the convolved channels d_in + 2N (x, B, C) and the
  // SSD heads H_m = d_in / P.
  kSsmInner,
  kSsmInProj,
  kSsmConv,
  kSsmHeads
};

// One of a mixer's own tensors: its name after "model.layers.<i>." and its shape.
struct MixerTensor {
  const char* name;
  std::span<const Dim> shape;
};

namespace mixer_tensors {
inline constexpr Dim kProjShape[] = {Dim::kQkDim, Dim::kModel};
inline constexpr Dim kConvShape[] = {Dim::kQkDim, Dim::kOne, Dim::kConvWidth};
inline constexpr Dim kGateShape[] = {Dim::kHeads, Dim::kModel};
inline constexpr Dim kBiasShape[] = {Dim::kHeads};
inline constexpr Dim kQkShape[] = {Dim::kQkDim};
inline constexpr MixerTensor kQ = {"attn.q_proj.weight", kProjShape};
inline constexpr MixerTensor kK = {"attn.k_proj.weight", kProjShape};
inline constexpr MixerTensor kV = {"attn.v_proj.weight", kProjShape};
inline constexpr MixerTensor kQConv = {"attn.q_conv1d.weight", kConvShape};
inline constexpr MixerTensor kKConv = {"attn.k_conv1d.weight", kConvShape};
inline constexpr MixerTensor kForget = {"attn.a_proj.weight", kGateShape};  // γ
inline constexpr MixerTensor kForgetBias = {"attn.a_proj.bias", kBiasShape};
inline constexpr MixerTensor kInput = {"attn.b_proj.weight", kGateShape};  // β
inline constexpr MixerTensor kInputBias = {"attn.b_proj.bias", kBiasShape};
inline constexpr MixerTensor kLambda = {"attn.lambda_params", kQkShape};  // λ
// Mesa and GLA: the forget gate γ, the input gate β and λ.
inline constexpr MixerTensor kMesa[] = {kQ,      kK,          kV,     kQConv,     kKConv,
                                        kForget, kForgetBias, kInput, kInputBias, kLambda};
inline constexpr MixerTensor kDeltaNet[] = {kQ, kK, kV, kQConv, kKConv, kInput, kInputBias};
inline constexpr MixerTensor kGatedDeltaNet[] = {kQ,      kK,          kV,     kQConv,    kKConv,
                                                 kForget, kForgetBias, kInput, kInputBias};
// The MesaNet paper's "Mamba2" (mamba2_mesa): GLA's layer without the input gate β (β ≡ 1) and
// without λ.
inline constexpr MixerTensor kMamba2Mesa[] = {kQ, kK, kV, kQConv, kKConv, kForget, kForgetBias};
// mLSTM (xLSTM's matrix memory): the forget gate f̃ (a_proj) and the exponential input gate ĩ
// (b_proj), per head from the layer's input; no λ.
inline constexpr MixerTensor kMlstm[] = {kQ,      kK,          kV,     kQConv,    kKConv,
                                         kForget, kForgetBias, kInput, kInputBias};
// The MesaNet paper's "same parameters as multi-head attention": no gates.
inline constexpr MixerTensor kAttention[] = {kQ, kK, kV, kQConv, kKConv};
// Hawk (Griffin's recurrent block, docs/math.md §8.8): its own input branches, convolution, gates,
// RG-LRU decay and output projection; no o_norm or o_proj of the block.
inline constexpr Dim kRnnInShape[] = {Dim::kRnnWidth, Dim::kModel};
inline constexpr Dim kRnnVecShape[] = {Dim::kRnnWidth};
inline constexpr Dim kRnnConvShape[] = {Dim::kRnnWidth, Dim::kOne, Dim::kConvWidth};
inline constexpr Dim kBlockGateShape[] = {Dim::kGateBlocks, Dim::kGateBlockWidth,
                                          Dim::kGateBlockWidth};
inline constexpr Dim kRnnOutShape[] = {Dim::kModel, Dim::kRnnWidth};
inline constexpr Dim kModelVecShape[] = {Dim::kModel};
inline constexpr MixerTensor kHawk[] = {{"attn.linear_x.weight", kRnnInShape},
                                        {"attn.linear_x.bias", kRnnVecShape},
                                        {"attn.linear_y.weight", kRnnInShape},
                                        {"attn.linear_y.bias", kRnnVecShape},
                                        {"attn.conv_1d.weight", kRnnConvShape},
                                        {"attn.conv_1d.bias", kRnnVecShape},
                                        {"attn.rg_lru.a_gate.weight", kBlockGateShape},
                                        {"attn.rg_lru.a_gate.bias", kRnnVecShape},
                                        {"attn.rg_lru.input_gate.weight", kBlockGateShape},
                                        {"attn.rg_lru.input_gate.bias", kRnnVecShape},
                                        {"attn.rg_lru.a_param", kRnnVecShape},
                                        {"attn.linear_out.weight", kRnnOutShape},
                                        {"attn.linear_out.bias", kModelVecShape}};
// Mamba-2's block (the SSD, docs/math.md §8.10), named as the public Mamba2 layers name them: one
// in-projection [z | x | B | C | dt], the convolution over x, B, C with its bias, dt_bias, A_log,
// the skip D, the gated RMSNorm's weight and its own output projection.
inline constexpr Dim kSsmInShape[] = {Dim::kSsmInProj, Dim::kModel};
inline constexpr Dim kSsmConvShape[] = {Dim::kSsmConv, Dim::kOne, Dim::kConvWidth};
inline constexpr Dim kSsmConvBiasShape[] = {Dim::kSsmConv};
inline constexpr Dim kSsmHeadShape[] = {Dim::kSsmHeads};
inline constexpr Dim kSsmInnerShape[] = {Dim::kSsmInner};
inline constexpr Dim kSsmOutShape[] = {Dim::kModel, Dim::kSsmInner};
inline constexpr MixerTensor kMamba2[] = {
    {"attn.in_proj.weight", kSsmInShape},    {"attn.conv1d.weight", kSsmConvShape},
    {"attn.conv1d.bias", kSsmConvBiasShape}, {"attn.dt_bias", kSsmHeadShape},
    {"attn.A_log", kSsmHeadShape},           {"attn.D", kSsmHeadShape},
    {"attn.norm.weight", kSsmInnerShape},    {"attn.out_proj.weight", kSsmOutShape}};
}  // namespace mixer_tensors

struct MixerTraits {
  MixerKind kind;
  const char* name;     // as written in model.mixer / model.layer_mixers
  bool solves_with_cg;  // the CG options (cg_steps, cg_tol, cg_max_steps) apply
  // Softmax attention (model/mixers/attention/): rotary q and k, a KV cache when decoding, the
  // window model.attention_window (see AttentionWindowOf).
  bool is_attention;
  // The mixer's own parameter tensors per layer, in the order it declares them (the block's
  // norms, output projection and MLP are not among them).
  std::span<const MixerTensor> tensors;
  // The mixer projects its own output back to d_model (Hawk): the block has no o_norm and no
  // o_proj for it, and the layer adds its output to the residual stream itself.
  bool owns_projections = false;
};

// Row i describes MixerKind value i. GLA is the Mesa operator with 0 CG steps; DeltaNet and Gated
// DeltaNet use the delta rule (kernels/deltanet/); "attention" and "swa" are softmax attention
// (kernels/attention/), "swa" the spelling for a layer that must have a window; "hawk" is
// Griffin's recurrent block around the RG-LRU (kernels/rglru/); "mamba2_mesa" is the MesaNet
// paper's "Mamba2" baseline, GLA with the input gate fixed at β = 1 (the Mesa operator at 0 CG
// steps); "mlstm" is xLSTM's matrix memory (kernels/mlstm/); "mamba2" is
// Mamba-2's own block around the SSD scan (kernels/ssd/). Every mixer has CPU and CUDA kernels.
inline constexpr MixerTraits kMixers[] = {
    {MixerKind::kMesa, "mesa", true, false, mixer_tensors::kMesa},
    {MixerKind::kGla, "gla", false, false, mixer_tensors::kMesa},
    {MixerKind::kDeltaNet, "deltanet", false, false, mixer_tensors::kDeltaNet},
    {MixerKind::kGatedDeltaNet, "gated_deltanet", false, false, mixer_tensors::kGatedDeltaNet},
    {MixerKind::kAttention, "attention", false, true, mixer_tensors::kAttention},
    {MixerKind::kSwa, "swa", false, true, mixer_tensors::kAttention},
    {MixerKind::kHawk, "hawk", false, false, mixer_tensors::kHawk, /*owns_projections=*/true},
    {MixerKind::kMamba2Mesa, "mamba2_mesa", false, false, mixer_tensors::kMamba2Mesa},
    {MixerKind::kMlstm, "mlstm", false, false, mixer_tensors::kMlstm},
    {MixerKind::kMamba2, "mamba2", false, false, mixer_tensors::kMamba2, /*owns_projections=*/true},
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

// What the parameter count depends on, with the spec's defaults already applied.
struct ModelShape {
  int64_t vocab_size = 0;
  int64_t d_model = 0;
  int64_t n_heads = 0;
  int64_t head_dim = 0;
  int64_t mlp_hidden = 0;  // SwiGLU hidden width
  int64_t conv_width = 0;
  int64_t rnn_width = 0;  // Hawk's D_rnn (RnnWidthOf); 0 without Hawk layers
  // Mamba-2's d_in, P and N (SsmShapeOf); 0 without mamba2 layers.
  int64_t ssm_inner = 0;
  int64_t ssm_head_dim = 0;
  int64_t ssm_state = 0;
  bool tie_embeddings = true;
};

// Hawk's recurrent width: model.rnn_width_mult (0 = the default, the paper's 1.25) times d_model,
// rounded. One definition for the validator and the trainer's configuration.
inline constexpr float kDefaultRnnWidthMult = 1.25f;
inline int64_t RnnWidthOf(int64_t d_model, float rnn_width_mult) {
  const double mult = rnn_width_mult == 0 ? kDefaultRnnWidthMult : rnn_width_mult;
  return static_cast<int64_t>(mult * static_cast<double>(d_model) + 0.5);
}

// Mamba-2's widths from model.ssm_expand, ssm_head_dim and ssm_state_dim (0 = the defaults of
// the public Mamba2 block: 2, 64, 128). One definition for the validator and the trainer.
inline constexpr int kDefaultSsmExpand = 2;
inline constexpr int kDefaultSsmHeadDim = 64;
inline constexpr int kDefaultSsmStateDim = 128;
struct SsmShape {
  int64_t inner = 0, head_dim = 0, state = 0;
  int64_t heads() const { return head_dim > 0 ? inner / head_dim : 0; }
};
inline SsmShape SsmShapeOf(int64_t d_model, int ssm_expand, int ssm_head_dim, int ssm_state_dim) {
  return {.inner = d_model * (ssm_expand == 0 ? kDefaultSsmExpand : ssm_expand),
          .head_dim = ssm_head_dim == 0 ? kDefaultSsmHeadDim : ssm_head_dim,
          .state = ssm_state_dim == 0 ? kDefaultSsmStateDim : ssm_state_dim};
}

inline int64_t DimSize(Dim dim, const ModelShape& shape) {
  switch (dim) {
    case Dim::kOne:
      return 1;
    case Dim::kModel:
      return shape.d_model;
    case Dim::kHeads:
      return shape.n_heads;
    case Dim::kQkDim:
      return shape.n_heads * shape.head_dim;
    case Dim::kConvWidth:
      return shape.conv_width;
    case Dim::kRnnWidth:
      return shape.rnn_width;
    case Dim::kGateBlocks:
      return shape.n_heads;
    case Dim::kGateBlockWidth:
      return shape.n_heads > 0 ? shape.rnn_width / shape.n_heads : 0;
    case Dim::kSsmInner:
      return shape.ssm_inner;
    case Dim::kSsmHeads:
      return shape.ssm_head_dim > 0 ? shape.ssm_inner / shape.ssm_head_dim : 0;
    case Dim::kSsmConv:
      return shape.ssm_inner + 2 * shape.ssm_state;
    case Dim::kSsmInProj:
      return 2 * shape.ssm_inner + 2 * shape.ssm_state +
             (shape.ssm_head_dim > 0 ? shape.ssm_inner / shape.ssm_head_dim : 0);
  }
  return 0;
}

// Entries of one of a mixer's tensors in a model of `shape`.
inline int64_t TensorElements(const MixerTensor& tensor, const ModelShape& shape) {
  int64_t n = 1;
  for (Dim d : tensor.shape) n *= DimSize(d, shape);
  return n;
}

// Parameters of one layer's mixer: the sum over its tensor list.
inline int64_t MixerParameterCount(const MixerTraits& mixer, const ModelShape& shape) {
  int64_t n = 0;
  for (const MixerTensor& t : mixer.tensors) n += TensorElements(t, shape);
  return n;
}

// Number of float parameters of a model of `shape` whose layer l uses `layer_mixers[l]` (tied
// embedding counted once). The one formula: spec::ModelParameters (job specs) and
// model::ModelConfig::NumParameters (the trainer's configuration) both call it. A null entry (a
// mixer name the validator reports) counts only the block's own tensors.
inline int64_t ModelParameterCount(const ModelShape& shape,
                                   absl::Span<const MixerTraits* const> layer_mixers) {
  const int64_t c = shape.d_model, hd = shape.n_heads * shape.head_dim;
  const int64_t per_block = 2 * c                        // attention and MLP norms
                            + 3 * c * shape.mlp_hidden;  // SwiGLU gate, up, down
  const int64_t output_path = shape.head_dim             // the block's output norm
                              + c * hd;                  // and output projection
  int64_t mixers = 0;
  for (const MixerTraits* mixer : layer_mixers) {
    if (mixer == nullptr) continue;
    mixers += MixerParameterCount(*mixer, shape);
    if (!mixer->owns_projections) mixers += output_path;
  }
  const int64_t vocab_tables = shape.tie_embeddings ? 1 : 2;  // embedding, and lm_head if untied
  const int64_t n_layers = static_cast<int64_t>(layer_mixers.size());
  return vocab_tables * shape.vocab_size * c + n_layers * per_block + mixers + c;
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

// "mesa, gla, deltanet, gated_deltanet, attention, swa, hawk, mamba2_mesa, mlstm, mamba2".
inline std::string MixerNameList() {
  return absl::StrJoin(kMixers, ", ",
                       [](std::string* out, const MixerTraits& m) { out->append(m.name); });
}

}  // namespace mesa::spec

#endif  // MESANET_SPEC_MIXERS_H_
