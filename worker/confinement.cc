#include "worker/confinement.h"

#include <vector>

#include "spec/confined_paths.h"

namespace mesa::worker {

absl::Status CheckConfinedPaths(const mesa::v1::Assignment& assignment,
                                const std::string& checkpoint_dir) {
  spec::ConfinementRoots roots;
  roots.data_roots.assign(assignment.data_roots().begin(), assignment.data_roots().end());
  roots.checkpoint_root = assignment.checkpoint_root();
  return spec::CheckResolvedPaths(assignment.spec(), roots, assignment.job_id(), checkpoint_dir);
}

}  // namespace mesa::worker
