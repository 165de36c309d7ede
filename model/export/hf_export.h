// mesa-export: a checkpoint as a Hugging Face directory (docs/export.md) in one of two formats:
// FLA's MesaNetForCausalLM (fla_config.h) where FLA computes our model's function, else a
// self-contained remote-code model (remote_code.h) that computes it for every model. Either has
// config.json, the weights (model.safetensors, or shards with model.safetensors.index.json),
// generation_config.json, the tokenizer (tokenizer.json + tokenizer_config.json +
// special_tokens_map.json; vocab.json + merges.txt for GPT-2) and a model card (README.md). The
// directory is written under a temporary name beside `out_dir` and renamed into place once
// complete; an existing `out_dir` is never touched.
#ifndef MESANET_MODEL_EXPORT_HF_EXPORT_H_
#define MESANET_MODEL_EXPORT_HF_EXPORT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
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
  // "fla", "remote_code", or "auto": FLA's format where it is exact, else remote code.
  std::string format = "auto";
  // Weights go into shards of at most this many bytes (a larger tensor gets a shard alone).
  int64_t max_shard_bytes = int64_t{5} * 1000 * 1000 * 1000;
  // Evaluation results for the model card: files of `mesactl get JOB --json` (mesa.v1.Job).
  std::vector<std::string> eval_results;
};

struct ExportResult {
  std::string checkpoint_dir;      // the step directory exported
  std::string format;              // "fla" or "remote_code"
  std::string format_reason;       // why auto chose remote code (empty otherwise)
  std::vector<std::string> files;  // written into out_dir, sorted
  // Newer checkpoints passed over as damaged, each with its reason (OpenCheckpoint's policy).
  std::vector<std::string> skipped_checkpoints;
};

// Bytes of a shard size as transformers writes it: "5GB", "200MB", "64KB" (powers of 1000) or
// plain bytes; InvalidArgument for anything else, or below 1KB, or above 1000GB.
absl::StatusOr<int64_t> ParseShardSize(absl::string_view text);

// The model a checkpoint holds with the fixed CG steps it was trained with (its recorded spec's
// model.cg_steps with the trainer's default applied, TrainingCgSteps). DataLoss when the recorded
// spec is not a JobSpec in protobuf's JSON mapping.
absl::StatusOr<ModelConfig> TrainedModel(const CheckpointDescription& described);

// FailedPrecondition for format "fla" and a model FLA cannot express (fla_config.h) and for
// tokenizer files that are not the recorded ones; AlreadyExists when out_dir exists;
// InvalidArgument for bad options.
absl::StatusOr<ExportResult> ExportToHf(const ExportOptions& options);

}  // namespace mesa::model

#endif  // MESANET_MODEL_EXPORT_HF_EXPORT_H_
