// Generation from a checkpoint directory, as mesa-generate (and a GENERATE job) runs it: reads the
// checkpoint's own model description and tokenizer (model/checkpoint DescribeCheckpoint), loads the
// weights, picks the device, and runs the Generator. Also the JSON form of a completion.
#ifndef MESANET_MODEL_GENERATE_FROM_CHECKPOINT_H_
#define MESANET_MODEL_GENERATE_FROM_CHECKPOINT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/common/limits.h"
#include "model/checkpoint/checkpoint.h"
#include "model/generate/generator.h"
#include "model/tokenizer/tokenizer.h"

namespace mesa::model {

struct CheckpointGenerateOptions {
  std::string checkpoint;  // a checkpoint root or step directory
  std::vector<std::string> prompts;
  GenerateOptions generate;
  // Tolerance mode when cg_tol > 0 (at most cg_max_steps); else the training's fixed steps,
  // cg_max_steps of them.
  float cg_tol = 0.0f;
  int cg_max_steps = kernels::kDefaultCgSteps;
  std::string device = "auto";  // auto | cpu | cuda
  int threads = 0;              // CPU threads, 0 = all cores
  int chunk = 256;              // prefill piece
  // Tokenizer files when not at the paths the checkpoint recorded: GPT-2's (data.tokenizer
  // "gpt2"), the tokenizer.json (data.tokenizer "hf"). Checked against the recorded SHA-256.
  std::string encoder_json, vocab_bpe;
  std::string tokenizer_file;
};

struct CheckpointGenerateResult {
  std::string checkpoint_dir;  // the step directory used
  int64_t step = 0;            // its training step
  std::string device;          // "cpu" | "cuda"
  std::vector<Completion> completions;
  // Newer checkpoints passed over as damaged, each with its reason (OpenCheckpoint's policy).
  std::vector<std::string> skipped_checkpoints;
};

// InvalidArgument / NotFound / FailedPrecondition for the user's mistakes (missing checkpoint,
// a tokenizer the model cannot use, bad options), Unavailable when device "cuda" has no GPU.
absl::StatusOr<CheckpointGenerateResult> GenerateFromCheckpoint(
    const CheckpointGenerateOptions& options);

// The tokenizer `described` records, loaded from the files in `options` (encoder_json,
// vocab_bpe, tokenizer_file) or else the recorded paths, each checked against its recorded SHA-256,
// and checked to fit the checkpoint's model.
absl::StatusOr<std::unique_ptr<Tokenizer>> CheckpointTokenizerFor(
    const CheckpointDescription& described, const CheckpointGenerateOptions& options);

// The backend for decoding on `device_name` (auto | cpu | cuda; `threads` CPU threads, 0 = all
// cores); `device` receives the one chosen ("cpu" | "cuda"). Unavailable when "cuda" has no GPU.
absl::StatusOr<std::unique_ptr<Backend>> DecodingBackend(const std::string& device_name,
                                                         int threads, std::string* device);

// {"prompt", "completion", "tokens", "logprobs", "cg_steps_mean", "cg_steps",
//  "cg_steps_by_layer_head" ([token][Mesa layer][head]), "finish_reason"}.
std::string CompletionJson(const Completion& completion);

}  // namespace mesa::model

#endif  // MESANET_MODEL_GENERATE_FROM_CHECKPOINT_H_
