// Our model as a self-contained Hugging Face remote-code export (docs/export.md, "Remote code"):
// config.json for MesaLMForCausalLM and the Python files that compute it
// (model/export/remote_code/*.py, embedded at build time), for every model the trainer makes,
// including those FLA's MesaNetForCausalLM cannot express (γ cap, soft-cap, resets at document
// starts, other mixers and mixes). Tensors keep the checkpoint's names and values.
#ifndef MESANET_MODEL_EXPORT_REMOTE_CODE_H_
#define MESANET_MODEL_EXPORT_REMOTE_CODE_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/config/job_config.h"
#include "nlohmann/json.hpp"

namespace mesa::model {

// model_type of the export's config.json.
inline constexpr absl::string_view kRemoteCodeModelType = "mesa_lm";

// config.json: transformers' keys (architectures, auto_map, vocab_size, hidden_size, ...), every
// setting the forward reads (layer_mixers, attention_windows, gamma_cap, ...) and, under
// "mesa_model", our ModelConfigJson for mesa-import.
nlohmann::json RemoteCodeConfigJson(const ModelConfig& config);

// The model a remote-code config.json describes: its "mesa_model" with the fixed CG steps of its
// "cg_steps" and its "reset_at_bos". FailedPrecondition naming `source` and the key otherwise.
absl::StatusOr<ModelConfig> ModelConfigFromRemoteCode(const nlohmann::json& config,
                                                      absl::string_view source);

// The Python files of an export, name -> text (configuration_mesa_lm.py, modeling_mesa_lm.py and
// mesa_lm_core.py, the pure-PyTorch forward).
const std::vector<std::pair<std::string, std::string>>& RemoteCodeFiles();

}  // namespace mesa::model

#endif  // MESANET_MODEL_EXPORT_REMOTE_CODE_H_
