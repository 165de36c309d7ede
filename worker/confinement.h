// Confined paths at use (docs/worker.md): before an attempt starts its trainer, the
// worker resolves the spec's paths on its own file system, symbolic links included, and checks
// them against the roots the coordinator sent with the assignment (Assignment.data_roots and
// checkpoint_root). The coordinator checked the same paths lexically at submit, but cannot see
// this file system: a link below a root may point anywhere. The checkpoint directory is then
// created below its root without a check-to-use race (CreateCheckpointDir); what the trainer
// opens later by path is not (docs/security.md, "Not protected").
#ifndef MESANET_WORKER_CONFINEMENT_H_
#define MESANET_WORKER_CONFINEMENT_H_

#include <string>

#include "absl/status/status.h"
#include "mesa/v1/worker_service.pb.h"

namespace mesa::worker {

// spec::CheckResolvedPaths with the assignment's roots and job id, then CheckOwnerPathsAtUse;
// `checkpoint_dir` is the job's, as the worker will use it (empty for evaluations, which write
// none).
absl::Status CheckConfinedPaths(const mesa::v1::Assignment& assignment,
                                const std::string& checkpoint_dir);

// Owner-scoped checkpoint paths at use (docs/security.md): for an assignment with an owner that
// is not an admin and a checkpoint root, `checkpoint_dir`, checkpoint.init_from and
// eval.checkpoint must not resolve (symbolic links followed) into another user's
// <checkpoint_root>/users/<user>/; PERMISSION_DENIED naming the field otherwise. The worker does
// not know who owns each <root>/job-<n>: those reads are checked by the coordinator at submit.
absl::Status CheckOwnerPathsAtUse(const mesa::v1::Assignment& assignment,
                                  const std::string& checkpoint_dir);

// Creates the job's checkpoint directory at use. With a checkpoint root in the assignment, the
// directories of `checkpoint_dir` (which must lie lexically inside the root) are created and
// opened one by one below the root (base::MakeDirsBeneath: openat2 RESOLVE_BENEATH, or no symbolic
// link at all where openat2 is missing), and each one opened is checked where it really is before
// anything is made inside it: not in another job's <root>/job-<n>, not in another user's
// <root>/users/<user>/ (owner-scoped jobs), and the last one not the root itself. So a component
// swapped for a symbolic link after CheckConfinedPaths cannot make the worker create directories
// outside the root or in another job's or user's. PERMISSION_DENIED naming spec.checkpoint.dir
// (a user error) for those; other failures keep their errno's code. Without a checkpoint root:
// std::filesystem::create_directories (INTERNAL on failure).
absl::Status CreateCheckpointDir(const mesa::v1::Assignment& assignment,
                                 const std::string& checkpoint_dir);

}  // namespace mesa::worker

#endif  // MESANET_WORKER_CONFINEMENT_H_
