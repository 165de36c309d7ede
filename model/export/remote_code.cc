#include "model/export/remote_code.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/json_int.h"
#include "model/checkpoint/checkpoint.h"
#include "spec/mixers.h"

namespace mesa::model {

using nlohmann::json;

json RemoteCodeConfigJson(const ModelConfig& c) {
  std::vector<std::string> mixers;
  std::vector<int> windows;
  for (int l = 0; l < c.n_layers; ++l) {
    const MixerKind kind = c.LayerMixer(l);
    mixers.push_back(MixerName(kind));
    windows.push_back(c.AttentionWindow(kind));
  }
  return json{
      {"architectures", json::array({"MesaLMForCausalLM"})},
      {"model_type", std::string(kRemoteCodeModelType)},
      {"auto_map",
       {{"AutoConfig", "configuration_mesa_lm.MesaLMConfig"},
        {"AutoModelForCausalLM", "modeling_mesa_lm.MesaLMForCausalLM"}}},
      {"vocab_size", c.vocab_size},
      {"hidden_size", c.d_model},
      {"num_hidden_layers", c.n_layers},
      {"num_heads", c.n_heads},
      {"head_dim", c.head_dim},
      {"intermediate_size", c.mlp_hidden},
      {"conv_size", c.conv_width},
      {"layer_mixers", mixers},
      {"attention_windows", windows},
      {"rotary_base", 10000.0},
      // The fixed CG steps the model was trained with (mesa-logits' setting); cg_tol > 0 switches
      // to tolerance mode with cg_steps as the bound (docs/math.md §2.3).
      {"cg_steps", c.cg_steps},
      {"cg_tol", 0.0},
      {"lambda_floor", c.lambda_floor},
      {"gamma_cap", c.gamma_cap},
      {"logit_softcap", c.logit_softcap},
      {"reset_at_bos", c.reset_at_bos},
      {"mesa_tie_embeddings", c.tie_embeddings},
      {"rnn_width", c.rnn_width},
      {"ssm_inner", c.ssm_inner},
      {"ssm_head_dim", c.ssm_head_dim},
      {"ssm_state", c.ssm_state},
      {"bos_token_id", c.bos_token},
      {"eos_token_id", c.bos_token},
      {"pad_token_id", nullptr},
      // Our tied head is the embedding itself with a scaled lookup, which the modeling code
      // computes; transformers must not tie or create an lm_head of its own.
      {"tie_word_embeddings", false},
      // The modeling code keeps no cache: generate recomputes the prefix (docs/export.md).
      {"use_cache", false},
      {"torch_dtype", "float32"},
      {"mesa_model", json::parse(ModelConfigJson(c))},
  };
}

absl::StatusOr<ModelConfig> ModelConfigFromRemoteCode(const json& config,
                                                      absl::string_view source) {
  auto bad = [&](absl::string_view key, absl::string_view why) {
    return absl::FailedPreconditionError(absl::StrCat(source, ": ", key, ": ", why));
  };
  if (!config.is_object() || !config.contains("mesa_model") || !config["mesa_model"].is_object()) {
    return bad("mesa_model", "missing (not a mesa-export remote-code config.json)");
  }
  absl::StatusOr<ModelConfig> model = ModelConfigFromJson(config["mesa_model"]);
  if (!model.ok()) return bad("mesa_model", model.status().message());
  absl::StatusOr<int> steps = base::JsonIntOr(config, "cg_steps", model->cg_steps);
  if (!steps.ok()) return bad("cg_steps", steps.status().message());
  if (model->MesaLayers() > 0) model->cg_steps = *steps;
  if (config.contains("reset_at_bos")) {
    if (!config["reset_at_bos"].is_boolean()) return bad("reset_at_bos", "not true or false");
    model->reset_at_bos = config["reset_at_bos"].get<bool>();
  }
  if (absl::Status s = ValidateModelConfig(*model); !s.ok()) return bad("config", s.message());
  return model;
}

}  // namespace mesa::model
