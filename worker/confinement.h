// Confined paths at use (issue 14; docs/worker.md): before an attempt starts its trainer, the
// worker resolves the spec's paths on its own file system, symbolic links included, and checks
// them against the roots the coordinator sent with the assignment (Assignment.data_roots and
// checkpoint_root). The coordinator checked the same paths lexically at submit, but cannot see
// this file system: a link below a root may point anywhere.
#ifndef MESANET_WORKER_CONFINEMENT_H_
#define MESANET_WORKER_CONFINEMENT_H_

#include <string>

#include "absl/status/status.h"
#include "mesa/v1/worker_service.pb.h"

namespace mesa::worker {

// spec::CheckResolvedPaths with the assignment's roots and job id; `checkpoint_dir` is the job's,
// as the worker will use it (empty for evaluations, which write none).
absl::Status CheckConfinedPaths(const mesa::v1::Assignment& assignment,
                                const std::string& checkpoint_dir);

}  // namespace mesa::worker

#endif  // MESANET_WORKER_CONFINEMENT_H_
