// Our MesaNet as FLA's MesaNetForCausalLM sees it (fla/models/mesa_net, docs/export.md): the
// config.json of an export, the model a config.json describes, and the weights' transformation.
//
// FLA's layer has no switch for three parts of our recipe, so they are handled here, once:
//   - tied head + embedding scale: our logits use the embedding E itself and our inputs E·sqrt(C);
//     FLA's are lm_head.weight and model.embeddings.weight, so an export writes lm_head = E and
//     embeddings = E·sqrt(C) (tie_word_embeddings false), which computes the same function.
//     Untied models (model.tie_embeddings false: own lm_head.weight, unscaled lookup) are FLA's
//     function as they are;
//   - the γ cap (γ = σ(a)·(1 − cap·β²)) and the logit soft-cap (s·tanh(z/s)): FLA computes
//     γ = σ(a) and plain logits. Models with either are refused (train with model.gamma_cap: 0
//     and model.logit_softcap: 0 to export);
//   - layers other than Mesa (GLA, DeltaNet, ... hybrids): refused, FLA's model has Mesa only;
//   - state resets at document starts (data.reset_at_bos): refused, FLA's model has none.
// What is refused here, the remote-code export (remote_code.h) computes exactly.
// One difference stays: FLA has one norm_eps for the residual norms and the per-head output norm;
// ours are 1e-6 and 1e-5. The export writes 1e-5, the head norm's: a head's output can be tiny
// (early positions), where the eps matters (1e-6 there moved logits by up to 0.9 in a float64
// check), while the residual stream (embeddings scaled by sqrt(C)) is large enough that its eps
// moved them by 2e-5 (docs/export.md).
#ifndef MESANET_MODEL_EXPORT_FLA_CONFIG_H_
#define MESANET_MODEL_EXPORT_FLA_CONFIG_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/config/job_config.h"
#include "model/net/param_layout.h"
#include "nlohmann/json.hpp"

namespace mesa::model {

// FLA's norm_eps as an export writes it (our per-head output norm's eps, see above).
inline constexpr double kFlaNormEps = 1e-5;
static_assert(static_cast<float>(kFlaNormEps) == kHeadNormEps);

// FailedPrecondition naming every part of `config` FLA's MesaNetForCausalLM cannot express.
absl::Status CheckExportable(const ModelConfig& config);

// config.json of an export (keys of FLA's MesaNetConfig, docs/export.md), with `eos_token_id`
// the document separator (our BOS) too.
nlohmann::json FlaConfigJson(const ModelConfig& config);

// The model a FLA MesaNet config.json describes, with our settings where FLA's fixed ones are
// ours (no γ cap, no soft-cap). FailedPrecondition naming the key for configurations our model
// cannot run (hybrid attention layers, an output gate, no short convolution, another activation).
absl::StatusOr<ModelConfig> ModelConfigFromFla(const nlohmann::json& config,
                                               absl::string_view source);

// The tensors of an export, in our layout's order, then lm_head.weight: our parameters, with the
// embedding scaled and copied to lm_head.weight when tied (see above). Names and shapes are FLA's.
struct ExportTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};
std::vector<ExportTensor> ToFlaTensors(const ModelConfig& config, const ParamLayout& layout,
                                       const float* params);

}  // namespace mesa::model

#endif  // MESANET_MODEL_EXPORT_FLA_CONFIG_H_
