// The model card of an export (README.md in the Hugging Face directory, docs/export.md): what the
// model is, how to load it, the recipe it was trained with (the spec the checkpoint recorded) and
// the evaluation results given to mesa-export (EVAL jobs as `mesactl get JOB --json` prints them).
#ifndef MESANET_MODEL_EXPORT_MODEL_CARD_H_
#define MESANET_MODEL_EXPORT_MODEL_CARD_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/checkpoint/checkpoint.h"
#include "model/config/job_config.h"

namespace mesa::model {

struct ModelCardInputs {
  const CheckpointDescription* checkpoint = nullptr;
  const ModelConfig* model = nullptr;
  std::string format;  // "fla" or "remote_code"
  std::string format_reason;
  // Paths of mesa.v1.Job JSON files; each must be an EVAL job with a result.
  std::vector<std::string> eval_results;
};

// README.md's text. InvalidArgument naming the file for an evaluation file that is not a finished
// EVAL job's JSON.
absl::StatusOr<std::string> ModelCard(const ModelCardInputs& in);

}  // namespace mesa::model

#endif  // MESANET_MODEL_EXPORT_MODEL_CARD_H_
