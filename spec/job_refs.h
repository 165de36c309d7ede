// Pipelines (docs/coordinator.md "Pipelines"): JobSpec.depends_on and the "job:<id>" references
// that stand for another job's latest checkpoint in the fields CheckpointReads names
// (checkpoint.init_from, eval.checkpoint, generate.checkpoint). A reference is not a path: path
// checks skip it, and the coordinator replaces it when the job is released, then checks the path.
#ifndef MESANET_SPEC_JOB_REFS_H_
#define MESANET_SPEC_JOB_REFS_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "mesa/v1/job.pb.h"

namespace mesa::spec {

// The most jobs one job may depend on.
inline constexpr int kMaxDependencies = 16;
inline constexpr absl::string_view kJobRefPrefix = "job:";

// "job:<id>" → "<id>"; nullopt for anything else (a path, or empty).
std::optional<std::string> JobRefTarget(absl::string_view value);
inline bool IsJobRef(absl::string_view value) { return JobRefTarget(value).has_value(); }

// The condition of a dependency, UNSPECIFIED read as SUCCESS.
mesa::v1::DependencyCondition ConditionOf(const mesa::v1::Dependency& dependency);
// "success" or "end".
absl::string_view ConditionName(mesa::v1::DependencyCondition condition);

struct JobRef {
  std::string field;   // e.g. "eval.checkpoint"
  std::string job_id;  // the job it names
};
// The references in `spec`, in the order of the fields above.
std::vector<JobRef> JobRefs(const mesa::v1::JobSpec& spec);

// Problems of depends_on and of the references, each "<field>: <message>" without the "spec."
// prefix: too many dependencies, an empty or repeated job id, an unknown condition, a reference
// to a job that depends_on does not name, dependencies on an array job (not supported).
std::vector<std::string> DependencyProblems(const mesa::v1::JobSpec& spec);

// `spec` with every reference replaced by checkpoint_of(job_id); the first error is returned
// prefixed with the field ("eval.checkpoint: ...").
absl::StatusOr<mesa::v1::JobSpec> ResolveJobRefs(
    const mesa::v1::JobSpec& spec,
    const std::function<absl::StatusOr<std::string>(const std::string& job_id)>& checkpoint_of);

}  // namespace mesa::spec

#endif  // MESANET_SPEC_JOB_REFS_H_
