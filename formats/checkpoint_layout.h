// The on-disk layout of a checkpoint root, in one place (docs/formats.md, "Checkpoints"): step
// directories `step_XXXXXXXX` holding `state.json` and the safetensors files, `latest` naming the
// newest, and `step_XXXXXXXX.tmp.PID` while one is being written. The trainer's checkpoints
// (model/checkpoint) and the spec's tokenizer checks (spec/tokenizer_record) both read roots
// through it. No model code, no gRPC: a format room.
#ifndef MESANET_FORMATS_CHECKPOINT_LAYOUT_H_
#define MESANET_FORMATS_CHECKPOINT_LAYOUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mesa::formats {

inline constexpr char kCheckpointStateFile[] = "state.json";
inline constexpr char kCheckpointModelFile[] = "model.safetensors";
inline constexpr char kCheckpointOptimizerFile[] = "optimizer.safetensors";
inline constexpr char kCheckpointLatestFile[] = "latest";

// "step_00000100" for step 100.
std::string StepDirName(int64_t step);
// The directory a step is written into before it is renamed to StepDirName(step).
std::string TempStepDirName(int64_t step, int pid);
// A finished step directory's name (not a temporary one).
bool IsStepDirName(absl::string_view name);
// A temporary step directory's name, left behind by a writer that died.
bool IsTempStepDirName(absl::string_view name);

// Finished step directories under `root`, newest first (names sort by step).
std::vector<std::string> ListStepDirs(const std::string& root);

// The step directories a checkpoint path stands for, in the order to try them: the path itself when
// it holds a state.json (a step directory named explicitly), else the one `latest` names and then
// every step directory, newest first. NotFound when the path does not exist or holds none.
absl::StatusOr<std::vector<std::string>> CheckpointCandidates(const std::string& path);

}  // namespace mesa::formats

#endif  // MESANET_FORMATS_CHECKPOINT_LAYOUT_H_
