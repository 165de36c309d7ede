// Checkpoints (docs/formats.md): one directory per step under a root,
//   ROOT/step_00000100/model.safetensors      weights, stable Hugging Face MesaNet names
//   ROOT/step_00000100/optimizer.safetensors  AdamW moments (exp_avg.NAME, exp_avg_sq.NAME)
//   ROOT/step_00000100/state.json             step, data position, RNG, config, CRC32 checksums
//   ROOT/latest                               "step_00000100\n", replaced atomically, last
// A step directory is written under a temporary name, every file fsynced, then renamed; the
// `latest` pointer is updated only after that. Loading verifies checksums, names and shapes; a
// corrupt or truncated checkpoint is skipped (with a reason) in favour of the previous one.
#ifndef MESANET_MODEL_CHECKPOINT_CHECKPOINT_H_
#define MESANET_MODEL_CHECKPOINT_CHECKPOINT_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/config/job_config.h"
#include "model/data/data_loader.h"
#include "model/net/param_layout.h"
#include "nlohmann/json.hpp"

namespace mesa::model {

struct TrainState {
  int64_t step = 0;   // optimizer steps completed
  DataPosition data;  // where the next step reads
  uint64_t seed = 0;
  uint64_t rng_counter = 0;   // draws taken from the seed's stream (none during training today)
  int64_t skipped_steps = 0;  // non-finite steps skipped so far
  int64_t tokens_seen = 0;
  std::string spec_json;  // the job spec as JSON (protobuf JSON mapping)
  // The run that wrote it: the service's job id (MESA_JOB_ID), the same for every attempt of a
  // job; empty for runs by hand and for checkpoints written before it was recorded.
  std::string run_id;
  // The tokenizer the model was trained with, as a JSON object (spec::TokenizerRecordJson):
  // state.json's "tokenizer" and the weights' metadata "mesa.tokenizer". Empty in checkpoints
  // written before it was recorded.
  std::string tokenizer_json;
  // data.reset_at_bos of the run (state.json "reset_at_bos"); nullopt in checkpoints written
  // before it was recorded.
  std::optional<bool> reset_at_bos;
};

struct CheckpointData {
  std::string dir;  // the step directory loaded
  TrainState state;
  std::vector<float> params;
  std::vector<float> exp_avg, exp_avg_sq;  // empty when has_optimizer is false
  bool has_optimizer = false;
  // Checkpoints that were skipped as corrupt, with the reason (newest first).
  std::vector<std::string> skipped;
};

// Writes ROOT/step_XXXXXXXX atomically and then points ROOT/latest at it; prunes to keep_last
// step directories. Returns the step directory.
absl::StatusOr<std::string> SaveCheckpoint(const std::string& root, const ModelConfig& config,
                                           const ParamLayout& layout, const float* params,
                                           const float* exp_avg, const float* exp_avg_sq,
                                           const TrainState& state, int keep_last);

// `path` is a step directory or a root (then `latest`, falling back to older steps). Verifies
// checksums and that every tensor of `layout` is present with its shape. NotFound when there is
// no checkpoint; DataLoss when every candidate is corrupt; FailedPrecondition when the checkpoint
// belongs to a different architecture.
absl::StatusOr<CheckpointData> LoadCheckpoint(const std::string& path, const ModelConfig& config,
                                              const ParamLayout& layout, bool want_optimizer);

// What a checkpoint says about itself (its state.json, not the weights), for tools that load one
// without a job spec (mesa-generate): the step directory LoadCheckpoint(path, ...) tries first
// whose state.json reads, the model it holds (CG settings at their defaults) and the job spec
// (JSON) that trained it. NotFound / DataLoss as LoadCheckpoint.
struct CheckpointDescription {
  std::string dir;
  int64_t step = 0;
  ModelConfig model;
  std::string spec_json;
  std::string tokenizer_json;  // as TrainState::tokenizer_json
};
absl::StatusOr<CheckpointDescription> DescribeCheckpoint(const std::string& path);

// What every tool that loads a checkpoint without a job spec opens (mesa-generate, mesa-logits,
// mesa-export, GENERATE jobs), under the one policy LoadCheckpoint follows: the candidates of
// `path` in order (a step directory alone; else `latest`, then every step directory, newest
// first), the first whose state.json reads and whose weights verify against `model_for`'s model
// (default: the recorded one). A candidate that is damaged in either way is skipped, its reason
// kept in data.skipped (newest first) for the caller to warn about; a step directory given
// explicitly is never skipped. NotFound when there is no checkpoint, DataLoss when every
// candidate is damaged, FailedPrecondition (from model_for or the weights) is returned at once.
struct OpenedCheckpoint {
  CheckpointDescription description;
  ModelConfig model;
  CheckpointData data;
};
using CheckpointModelFor =
    std::function<absl::StatusOr<ModelConfig>(const CheckpointDescription& described)>;
absl::StatusOr<OpenedCheckpoint> OpenCheckpoint(const std::string& path,
                                                const CheckpointModelFor& model_for = nullptr);

// One line on stderr per skipped checkpoint: "PROGRAM: warning: skipped a damaged checkpoint: WHY".
void WarnSkippedCheckpoints(const char* program, const std::vector<std::string>& skipped);

// The state.json of the checkpoint LoadCheckpoint(root) would try first (`latest`, then the
// newest step directory) whose state.json reads, without reading or verifying the weights.
// NotFound when there is none.
absl::StatusOr<TrainState> PeekCheckpointState(const std::string& root);

// A JSON description of the architecture (recorded in metadata and state.json).
std::string ModelConfigJson(const ModelConfig& config);
// The inverse of ModelConfigJson (its JSON, parsed): DataLoss naming what is wrong otherwise.
absl::StatusOr<ModelConfig> ModelConfigFromJson(const nlohmann::json& config);

}  // namespace mesa::model

#endif  // MESANET_MODEL_CHECKPOINT_CHECKPOINT_H_
