#include "model/export/fla_config.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/json_int.h"
#include "kernels/common/limits.h"

namespace mesa::model {
namespace {

using nlohmann::json;

// FLA's GatedMLP width when intermediate_size is null (fla/modules/mlp.py).
int64_t FlaIntermediateSize(int64_t hidden_size, double hidden_ratio) {
  const int64_t size = static_cast<int64_t>(hidden_size * hidden_ratio * 2 / 3);
  return 256 * ((size + 256 - 1) / 256);
}

// Why FLA's own model of the same name (fla/models at the pinned commit) computes another function
// than our layer: the fields that differ, so that nobody exports one into the other.
const char* FlaCounterpartDiffers(MixerKind mixer) {
  switch (mixer) {
    case MixerKind::kGla:
      return "FLA's GLA layer has a per-channel forget gate from a low-rank gk_proj divided by "
             "gate_logit_normalizer, no input gate and an output gate (g_proj); ours has one "
             "forget gate per head from a_proj with a bias, the input gate b_proj and no output "
             "gate";
    case MixerKind::kDeltaNet:
      return "FLA's DeltaNet convolves v too (v_conv1d, with SiLU) and its b_proj has no bias; "
             "ours convolves q and k only and b_proj has a bias";
    case MixerKind::kGatedDeltaNet:
      return "FLA's GatedDeltaNet takes its forget gate as -exp(A_log)·softplus(a_proj(x) + "
             "dt_bias), convolves v (v_conv1d) and gates its output (g_proj); ours is "
             "sigmoid(a_proj(x)) with a bias, with no v convolution and no output gate";
    case MixerKind::kAttention:
    case MixerKind::kSwa:
      return "FLA's Transformer attention has no short convolutions on q and k (q_conv1d, "
             "k_conv1d) and no per-head output norm (o_norm), which ours has";
    case MixerKind::kMamba2:
      return "its Mamba2ForCausalLM's blocks have no MLP, while ours carry the paper's SwiGLU MLP";
    case MixerKind::kHawk:
      return "FLA has no Hawk (RG-LRU) layer";
    case MixerKind::kMlstm:
      return "FLA has no mLSTM layer";
    case MixerKind::kMamba2Mesa:
      return "FLA has no layer with the paper's \"Mamba2\" parametrisation (GLA without an input "
             "gate, Mesa's features)";
    case MixerKind::kMesa:
      break;
  }
  return "";
}

}  // namespace

absl::Status CheckExportable(const ModelConfig& config) {
  std::vector<std::string> problems;
  for (int l = 0; l < config.n_layers; ++l) {
    const MixerKind mixer = config.LayerMixer(l);
    if (mixer != MixerKind::kMesa) {
      problems.push_back(absl::StrCat("layer ", l, " is ", MixerName(mixer),
                                      " (FLA's MesaNetForCausalLM has Mesa layers only; ",
                                      FlaCounterpartDiffers(mixer), ")"));
      break;
    }
  }
  if (config.gamma_cap != 0.0f) {
    problems.push_back(absl::StrCat("model.gamma_cap is ", config.gamma_cap,
                                    " (FLA computes gamma = sigmoid(a_proj(x)) with no cap and "
                                    "has no switch for one; train with gamma_cap: 0)"));
  }
  if (config.logit_softcap != 0.0f) {
    problems.push_back(absl::StrCat("model.logit_softcap is ", config.logit_softcap,
                                    " (FLA's logits are not soft-capped and it has no switch "
                                    "for it; train with logit_softcap: 0)"));
  }
  if (config.reset_at_bos) {
    problems.push_back(
        "the model was trained with data.reset_at_bos (every BOS starts a fresh state; FLA's "
        "model carries its state across documents; train with data.reset_at_bos: false)");
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "FLA's MesaNet would compute a different function: ", absl::StrJoin(problems, "; ")));
}

json FlaConfigJson(const ModelConfig& c) {
  return json{
      {"architectures", json::array({"MesaNetForCausalLM"})},
      {"model_type", "mesa_net"},
      {"attn_mode", "chunk"},
      {"hidden_size", c.d_model},
      {"use_output_gate", false},
      {"use_short_conv", true},
      {"conv_size", c.conv_width},
      {"num_heads", c.n_heads},
      {"head_dim", c.head_dim},
      {"lambda_lower_bound", c.lambda_floor},
      {"max_position_embeddings", 2048},
      {"hidden_ratio", 4},
      {"intermediate_size", c.mlp_hidden},
      {"hidden_act", "swish"},
      {"num_hidden_layers", c.n_layers},
      {"norm_eps", kFlaNormEps},
      {"attn", nullptr},
      {"use_cache", true},
      {"pad_token_id", nullptr},
      {"bos_token_id", c.bos_token},
      {"eos_token_id", c.bos_token},
      {"tie_word_embeddings", false},
      {"initializer_range", 0.02},
      {"fuse_norm", true},
      {"fuse_swiglu", true},
      {"fuse_cross_entropy", true},
      {"fuse_linear_cross_entropy", false},
      {"use_l2warp", false},
      {"vocab_size", c.vocab_size},
      {"max_cg_step_training", c.cg_steps},
      {"max_cg_step_decoding", c.cg_steps},
      {"attnres_block_size", nullptr},
      {"torch_dtype", "float32"},
  };
}

absl::StatusOr<ModelConfig> ModelConfigFromFla(const json& j, absl::string_view source) {
  auto bad = [&](absl::string_view key, absl::string_view why) {
    return absl::FailedPreconditionError(absl::StrCat(source, ": ", key, ": ", why));
  };
  if (!j.is_object()) return bad("config", "not a JSON object");
  if (j.value("model_type", std::string()) != "mesa_net") {
    return bad("model_type", "must be \"mesa_net\" (FLA's MesaNet)");
  }
  // Settings our model has no counterpart for.
  if (j.contains("attn") && !j["attn"].is_null()) {
    return bad("attn", "hybrid attention layers are not supported");
  }
  if (j.value("use_output_gate", false)) return bad("use_output_gate", "must be false");
  if (!j.value("use_short_conv", true)) return bad("use_short_conv", "must be true");
  if (j.value("hidden_act", std::string("swish")) != "swish") {
    return bad("hidden_act", "must be \"swish\"");
  }
  if (j.contains("attnres_block_size") && !j["attnres_block_size"].is_null()) {
    return bad("attnres_block_size", "must be null");
  }
  ModelConfig c;
  // Whole numbers are range-checked (nlohmann would wrap 2^31 to -2^31 and 2^40 to 0).
  const struct {
    const char* key;
    int fallback;
    int* field;
  } ints[] = {{"vocab_size", 32000, &c.vocab_size},
              {"hidden_size", 2048, &c.d_model},
              {"num_hidden_layers", 24, &c.n_layers},
              {"num_heads", 16, &c.n_heads},
              {"head_dim", 128, &c.head_dim},
              {"conv_size", 4, &c.conv_width},
              {"max_cg_step_training", kernels::kDefaultCgSteps, &c.cg_steps},
              {"max_cg_step_decoding", kernels::kDefaultCgSteps, &c.cg_max_steps}};
  for (const auto& entry : ints) {
    absl::StatusOr<int> value = base::JsonIntOr(j, entry.key, entry.fallback);
    if (!value.ok()) return bad(entry.key, value.status().message());
    *entry.field = *value;
  }
  try {
    c.lambda_floor = j.value("lambda_lower_bound", 0.25f);
    const double ratio = j.contains("hidden_ratio") && !j["hidden_ratio"].is_null()
                             ? j["hidden_ratio"].get<double>()
                             : 4.0;
    absl::StatusOr<int> width = base::JsonIntOr(
        j, "intermediate_size", static_cast<int>(FlaIntermediateSize(c.d_model, ratio)));
    if (!width.ok()) return bad("intermediate_size", width.status().message());
    c.mlp_hidden = *width;
    c.bos_token = 1;
    if (j.contains("bos_token_id") && j["bos_token_id"].is_number_integer()) {
      absl::StatusOr<int> bos = base::JsonToInt(j["bos_token_id"], "bos_token_id");
      if (!bos.ok()) return bad("bos_token_id", bos.status().message());
      c.bos_token = *bos;
    }
  } catch (const json::exception& e) {
    return bad("config", e.what());
  }
  c.mixer = MixerKind::kMesa;
  c.gamma_cap = 0.0f;      // FLA: gamma = sigmoid(a)
  c.logit_softcap = 0.0f;  // FLA: plain logits
  if (absl::Status s = ValidateModelConfig(c); !s.ok()) return bad("config", s.message());
  return c;
}

std::vector<ExportTensor> ToFlaTensors(const ModelConfig& config, const ParamLayout& layout,
                                       const float* params) {
  std::vector<ExportTensor> out;
  const float scale = config.EmbeddingScale();  // as the forward scales
  for (const ParamTensor& t : layout.tensors()) {
    ExportTensor tensor{t.name, t.shape, {params + t.offset, params + t.offset + t.size}};
    // Untied models are FLA's function as they are (lm_head.weight already last).
    if (config.tie_embeddings && t.offset == layout.embeddings()) {
      out.push_back({"lm_head.weight", t.shape, tensor.values});
      for (float& v : tensor.values) v *= scale;
    }
    out.push_back(std::move(tensor));
  }
  // lm_head.weight last, as FLA's state dict lists it.
  if (!config.tie_embeddings) return out;
  auto head = std::find_if(out.begin(), out.end(),
                           [](const ExportTensor& t) { return t.name == "lm_head.weight"; });
  std::rotate(head, head + 1, out.end());
  return out;
}

}  // namespace mesa::model
