#include "model/export/remote_code.h"

#include <string>
#include <vector>

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

}  // namespace mesa::model
