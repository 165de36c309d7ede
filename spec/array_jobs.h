// Array jobs (JobSpec.array; docs/evaluation.md "Array jobs"): one submission that expands into
// child EVAL jobs, the cross product of checkpoints x CG settings x shards. The expansion is here,
// shared by the validator (every child is validated as a plain EVAL job), the coordinator (which
// creates the children) and mesactl.
#ifndef MESANET_SPEC_ARRAY_JOBS_H_
#define MESANET_SPEC_ARRAY_JOBS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "mesa/v1/job.pb.h"

namespace mesa::spec {

inline constexpr int kMaxArrayChildren = 1024;
inline constexpr int kMaxArrayShards = 256;
// Labels of every child: the parent's id, and the child's place in the product (0-based).
inline constexpr char kArrayLabel[] = "mesa.array";
inline constexpr char kArrayIndexLabel[] = "mesa.array.index";

struct ArrayChildSpec {
  mesa::v1::JobSpec spec;  // the parent's without `array`, named and set for this child
  int checkpoint_index = 0;
  int cg_index = 0;
  int shard = 0;
};

// The children of `parent` (JobSpec.array set) in order: checkpoints outermost, then CG settings,
// then shards. Child n is named `<parent name>-c<i>-s<j>` (plus `-k<shard>` with shards), the
// parent part shortened to keep the 63-character rule; its eval.checkpoint, model CG setting and
// eval.shard are set from its place. INVALID_ARGUMENT (naming the array field) for a product of
// more than kMaxArrayChildren children, an unknown CG mode, or counts out of range.
absl::StatusOr<std::vector<ArrayChildSpec>> ExpandArray(const mesa::v1::JobSpec& parent);

// array.checkpoint_steps: fills array.checkpoints with the step directories of the root (a
// checkpoint root, docs/formats.md "Checkpoints") whose step is a multiple of `every`, oldest
// first, and clears checkpoint_steps. Reads the file system: mesactl runs it where the root is
// mounted. InvalidArgument naming the field when both are set, `every` < 1, or no step matches.
absl::Status ExpandCheckpointSteps(mesa::v1::JobSpec& spec);

// How an array row names a CG setting: "fixed 30", "tolerance 0.0001 max 30", or "model" (the
// spec's own, when the array has no CG axis).
std::string CgSettingName(const mesa::v1::ArraySpec& array, int cg_index);

}  // namespace mesa::spec

#endif  // MESANET_SPEC_ARRAY_JOBS_H_
