// mesa-import: a Hugging Face directory of FLA's MesaNetForCausalLM (config.json +
// model.safetensors; our own exports included) as a checkpoint root that checkpoint.init_from
// fine-tunes (docs/export.md). The model is FLA's function: no γ cap, no soft-cap. Our model ties
// its head to the embedding and scales the lookup by sqrt(hidden_size), so only checkpoints with
// model.embeddings.weight = lm_head.weight · sqrt(hidden_size) can be imported (what mesa-export
// writes; a bf16 file to within bf16 rounding); others are refused with the deviation found.
#ifndef MESANET_MODEL_EXPORT_HF_IMPORT_H_
#define MESANET_MODEL_EXPORT_HF_IMPORT_H_

#include <string>

#include "absl/status/statusor.h"

namespace mesa::model {

struct ImportOptions {
  std::string hf_dir;
  std::string out;  // a new checkpoint root
};

struct ImportResult {
  std::string checkpoint_dir;  // the step directory written (step 0)
  std::string model_json;      // the model, as checkpoints record it (ModelConfigJson)
  bool has_tokenizer = false;  // a tokenizer was recorded (from the export or tokenizer.json)
};

// FailedPrecondition for models our trainer cannot run or express; InvalidArgument for a
// malformed directory; AlreadyExists when `out` exists and is not empty.
absl::StatusOr<ImportResult> ImportFromHf(const ImportOptions& options);

}  // namespace mesa::model

#endif  // MESANET_MODEL_EXPORT_HF_IMPORT_H_
