// Owner-scoped checkpoint paths (docs/security.md, "Owner-scoped checkpoints"): with owners, a
// user's spec may write a named checkpoint directory only under <checkpoint_root>/users/<user>/,
// and read checkpoints under the root (checkpoint.init_from, eval.checkpoint) only from its own
// directory there or from the per-job directories <root>/job-<n> of its own jobs.
#ifndef MESANET_COORDINATOR_OWNER_PATHS_H_
#define MESANET_COORDINATOR_OWNER_PATHS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "mesa/v1/job.pb.h"

namespace mesa::coordinator {

// A per-job directory a spec reads from: the submitter must own job `job_id`.
struct JobDirRead {
  std::string field;  // "checkpoint.init_from", "eval.checkpoint"
  std::string path;   // as the spec wrote it
  std::string job_id;
};

// The path part of the rule, for `owner`'s spec and the normalised checkpoint root (non-empty):
// PERMISSION_DENIED naming the field for a named checkpoint.dir outside <root>/users/<owner>/
// or a read from the root, the users area of another user, or anything else under the root that
// is neither; otherwise the per-job directories it reads, whose owners the caller checks. Paths
// are taken as written, and also with symbolic links resolved where this file system holds the
// root.
absl::StatusOr<std::vector<JobDirRead>> CheckOwnerPaths(const mesa::v1::JobSpec& spec,
                                                        const std::string& owner,
                                                        const std::string& checkpoint_root);

// PERMISSION_DENIED for a read of job `read.job_id`'s directory when the job is not `owner`'s
// (`job_owner` empty and `exists` false: no such job).
absl::Status JobDirReadDenied(const JobDirRead& read, const std::string& owner, bool exists,
                              const std::string& job_owner);

}  // namespace mesa::coordinator

#endif  // MESANET_COORDINATOR_OWNER_PATHS_H_
