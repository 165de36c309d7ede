// mesa-export: a checkpoint as a Hugging Face directory for FLA's MesaNetForCausalLM
// (docs/export.md): config.json, model.safetensors, generation_config.json and the tokenizer
// (tokenizer.json + tokenizer_config.json + special_tokens_map.json; vocab.json + merges.txt for
// GPT-2). The directory is written under a temporary name beside `out_dir` and renamed into place
// once complete; an existing `out_dir` is never touched.
#ifndef MESANET_MODEL_EXPORT_HF_EXPORT_H_
#define MESANET_MODEL_EXPORT_HF_EXPORT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/checkpoint/checkpoint.h"
#include "model/config/job_config.h"

namespace mesa::model {

struct ExportOptions {
  std::string checkpoint;  // a checkpoint root or step directory
  std::string out_dir;
  std::string dtype = "float32";  // float32 (exact) or bfloat16
  // The tokenizer's files when not at the paths the checkpoint recorded (checked against the
  // recorded SHA-256): tokenizer.json (hf), or encoder.json and vocab.bpe (gpt2).
  std::vector<std::string> tokenizer_files;
};

struct ExportResult {
  std::string checkpoint_dir;      // the step directory exported
  std::vector<std::string> files;  // written into out_dir, sorted
  // Newer checkpoints passed over as damaged, each with its reason (OpenCheckpoint's policy).
  std::vector<std::string> skipped_checkpoints;
};

// The model a checkpoint holds with the fixed CG steps it was trained with (its recorded spec's
// model.cg_steps with the trainer's default applied, TrainingCgSteps). DataLoss when the recorded
// spec is not a JobSpec in protobuf's JSON mapping.
absl::StatusOr<ModelConfig> TrainedModel(const CheckpointDescription& described);

// FailedPrecondition for models FLA cannot express (fla_config.h) and tokenizer files that are
// not the recorded ones; AlreadyExists when out_dir exists; InvalidArgument for bad options.
absl::StatusOr<ExportResult> ExportToHf(const ExportOptions& options);

}  // namespace mesa::model

#endif  // MESANET_MODEL_EXPORT_HF_EXPORT_H_
