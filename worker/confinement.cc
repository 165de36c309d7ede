#include "worker/confinement.h"

#include <fcntl.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/open_beneath.h"
#include "spec/confined_paths.h"

namespace mesa::worker {
namespace {

// Whether the assignment's checkpoint paths are owner-scoped (docs/security.md).
bool OwnerScoped(const mesa::v1::Assignment& assignment) {
  return !assignment.owner().empty() && !assignment.owner_is_admin() &&
         !assignment.checkpoint_root().empty();
}

// For an owner-scoped assignment: whether `resolved` (inside `root`, both resolved) is in another
// user's <root>/users/<user>/.
bool InAnotherUsersDir(const mesa::v1::Assignment& assignment, const std::string& resolved,
                       const std::string& root) {
  const spec::CheckpointArea area = spec::AreaOf(resolved, root);
  return area.kind == spec::CheckpointArea::Kind::kUser && area.name != assignment.owner();
}

absl::Status AnotherUsersDir(absl::string_view field, absl::string_view path,
                             const mesa::v1::Assignment& assignment) {
  // The target is not echoed: it names what the owner may not read.
  return absl::PermissionDeniedError(absl::StrCat(
      "spec.", field, ": \"", path,
      "\" resolves (symbolic links followed) into the directory of another user below ",
      assignment.checkpoint_root(), "/", spec::kUsersDir, "/: a job of user ", assignment.owner(),
      " may use only its own checkpoints"));
}

}  // namespace

absl::Status CheckOwnerPathsAtUse(const mesa::v1::Assignment& assignment,
                                  const std::string& checkpoint_dir) {
  if (!OwnerScoped(assignment)) return absl::OkStatus();
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
    if (InAnotherUsersDir(assignment, *resolved, *root)) {
      return AnotherUsersDir(f.field, f.value, assignment);
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

absl::Status CreateCheckpointDir(const mesa::v1::Assignment& assignment,
                                 const std::string& checkpoint_dir) {
  std::error_code error;
  if (assignment.checkpoint_root().empty()) {
    std::filesystem::create_directories(checkpoint_dir, error);
    if (error) {
      return absl::InternalError(
          absl::StrCat("cannot create ", checkpoint_dir, ": ", error.message()));
    }
    return absl::OkStatus();
  }
  auto denied = [&](absl::string_view why) {
    return absl::PermissionDeniedError(
        absl::StrCat("spec.checkpoint.dir: \"", checkpoint_dir, "\" ", why));
  };
  absl::StatusOr<std::string> root = spec::NormalizeConfinedPath(assignment.checkpoint_root());
  absl::StatusOr<std::string> dir = spec::NormalizeConfinedPath(checkpoint_dir);
  if (!root.ok() || !dir.ok() || !spec::IsInsideRoot(*dir, *root) || *dir == *root) {
    return denied(absl::StrCat("is not a directory below the checkpoint root ",
                               assignment.checkpoint_root()));
  }
  // The root is the operator's (links in it are trusted); what lies below it is the users'.
  std::filesystem::create_directories(*root, error);
  base::UniqueFd root_fd(open(root->c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root_fd.valid()) {
    return absl::InternalError(
        absl::StrCat("cannot open the checkpoint root ", *root, ": ", std::strerror(errno)));
  }
  absl::StatusOr<std::string> real_root = base::FdPath(root_fd.get());
  if (!real_root.ok()) return real_root.status();
  // Each directory opened on the way, where it really is now (the descriptor cannot be swapped).
  auto check = [&](int dir_fd) -> absl::Status {
    absl::StatusOr<std::string> real = base::FdPath(dir_fd);
    if (!real.ok()) return real.status();
    if (!spec::IsInsideRoot(*real, *real_root)) return denied("leaves the checkpoint root");
    if (*real == *real_root) return absl::OkStatus();  // e.g. through a link to the root
    if (const std::string problem =
            spec::CheckpointDirProblem(*real, *real_root, assignment.job_id());
        !problem.empty()) {
      return denied("resolves into another job's directory (symbolic links followed at use)");
    }
    if (OwnerScoped(assignment) && InAnotherUsersDir(assignment, *real, *real_root)) {
      return AnotherUsersDir("checkpoint.dir", checkpoint_dir, assignment);
    }
    return absl::OkStatus();
  };
  const std::string relative = *root == "/" ? dir->substr(1) : dir->substr(root->size() + 1);
  absl::StatusOr<base::UniqueFd> made = base::MakeDirsBeneath(root_fd.get(), relative, 0755, check);
  if (!made.ok()) {
    if (made.status().code() == absl::StatusCode::kPermissionDenied &&
        !absl::StartsWith(made.status().message(), "spec.")) {
      return denied(
          absl::StrCat("cannot be created below the checkpoint root: ", made.status().message()));
    }
    return made.status();
  }
  absl::StatusOr<std::string> real = base::FdPath(made->get());
  if (!real.ok()) return real.status();
  if (*real == *real_root) return denied("resolves to the checkpoint root itself");
  return absl::OkStatus();
}

}  // namespace mesa::worker
