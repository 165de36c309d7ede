#include "worker/confinement.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "spec/confined_paths.h"

namespace mesa::worker {

absl::Status CheckOwnerPathsAtUse(const mesa::v1::Assignment& assignment,
                                  const std::string& checkpoint_dir) {
  const std::string& owner = assignment.owner();
  if (owner.empty() || assignment.owner_is_admin() || assignment.checkpoint_root().empty()) {
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> normal_root =
      spec::NormalizeConfinedPath(assignment.checkpoint_root());
  if (!normal_root.ok()) return absl::OkStatus();  // CheckResolvedPaths refuses such a root
  absl::StatusOr<std::string> root = spec::ResolveExistingPrefix(*normal_root);
  if (!root.ok()) {
    return absl::PermissionDeniedError(
        "the checkpoint root cannot be resolved on this worker (owner-scoped paths)");
  }
  std::vector<spec::SpecPath> fields = {{"checkpoint.dir", checkpoint_dir}};
  for (spec::SpecPath& read : spec::CheckpointReads(assignment.spec())) {
    fields.push_back(std::move(read));
  }
  for (const spec::SpecPath& f : fields) {
    if (f.value.empty()) continue;
    absl::StatusOr<std::string> normal = spec::NormalizeConfinedPath(f.value);
    if (!normal.ok()) continue;  // refused by the validator and CheckResolvedPaths
    absl::StatusOr<std::string> resolved = spec::ResolveExistingPrefix(*normal);
    if (!resolved.ok()) {
      return absl::PermissionDeniedError(
          absl::StrCat("spec.", f.field, ": \"", f.value,
                       "\" cannot be resolved (a dangling symbolic link or no access)"));
    }
    const spec::CheckpointArea area = spec::AreaOf(*resolved, *root);
    if (area.kind == spec::CheckpointArea::Kind::kUser && area.name != owner) {
      // The target is not echoed: it names what the owner may not read.
      return absl::PermissionDeniedError(
          absl::StrCat("spec.", f.field, ": \"", f.value,
                       "\" resolves (symbolic links followed) into the "
                       "directory of another user below ",
                       assignment.checkpoint_root(), "/", spec::kUsersDir, "/: a job of user ",
                       owner, " may use only its own checkpoints"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckConfinedPaths(const mesa::v1::Assignment& assignment,
                                const std::string& checkpoint_dir) {
  spec::ConfinementRoots roots;
  roots.data_roots.assign(assignment.data_roots().begin(), assignment.data_roots().end());
  roots.checkpoint_root = assignment.checkpoint_root();
  if (absl::Status s =
          spec::CheckResolvedPaths(assignment.spec(), roots, assignment.job_id(), checkpoint_dir);
      !s.ok()) {
    return s;
  }
  return CheckOwnerPathsAtUse(assignment, checkpoint_dir);
}

}  // namespace mesa::worker
