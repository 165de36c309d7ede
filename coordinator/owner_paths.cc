#include "coordinator/owner_paths.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "spec/confined_paths.h"

namespace mesa::coordinator {
namespace {

using spec::CheckpointArea;

absl::Status Denied(const std::string& field, const std::string& path, const std::string& why) {
  return absl::PermissionDeniedError(absl::StrCat("spec.", field, ": \"", path, "\" ", why));
}

std::string UserDir(const std::string& root, const std::string& owner) {
  return absl::StrCat(root == "/" ? "" : root, "/", spec::kUsersDir, "/", owner);
}

// One path of the spec, normalised, against one (normalised or resolved) root. `write`:
// checkpoint.dir. Adds a per-job directory read to `reads`.
absl::Status CheckOne(const std::string& field, const std::string& path, const std::string& normal,
                      const std::string& root, const std::string& owner, bool write,
                      const std::string& shown_root, std::vector<JobDirRead>* reads) {
  if (!spec::IsInsideRoot(normal, root)) return absl::OkStatus();  // other roots' business
  const CheckpointArea area = spec::AreaOf(normal, root);
  const bool own = spec::IsPathComponent(owner);
  const std::string mine = UserDir(shown_root, owner);
  if (area.kind == CheckpointArea::Kind::kUser && own && area.name == owner) {
    return absl::OkStatus();
  }
  if (write) {
    return Denied(field, path,
                  absl::StrCat(own ? absl::StrCat("is not below ", mine, "/, the directory of ")
                                   : "cannot be named by ",
                               "user ", owner,
                               ": with owners, a named checkpoint directory must lie in the "
                               "submitter's directory (or leave checkpoint.dir empty)"));
  }
  if (area.kind == CheckpointArea::Kind::kJob) {
    reads->push_back({field, path, area.name});
    return absl::OkStatus();
  }
  return Denied(field, path,
                absl::StrCat("is not a checkpoint of user ", owner,
                             ": under the checkpoint root a user reads only its own jobs' "
                             "directories (",
                             shown_root == "/" ? "" : shown_root, "/job-<n>)",
                             own ? absl::StrCat(" and ", mine, "/") : ""));
}

}  // namespace

absl::StatusOr<std::vector<JobDirRead>> CheckOwnerPaths(const mesa::v1::JobSpec& spec,
                                                        const std::string& owner,
                                                        const std::string& checkpoint_root) {
  std::vector<JobDirRead> reads;
  struct Field {
    std::string name;
    std::string path;
    bool write;
  };
  std::vector<Field> fields = {{"checkpoint.dir", spec.checkpoint().dir(), true}};
  for (const spec::SpecPath& read : spec::CheckpointReads(spec)) {
    fields.push_back({read.field, read.value, false});
  }
  std::error_code error;
  const bool here = std::filesystem::is_directory(checkpoint_root, error);
  absl::StatusOr<std::string> resolved_root =
      here ? spec::ResolveExistingPrefix(checkpoint_root) : checkpoint_root;
  for (const Field& f : fields) {
    if (f.path.empty()) continue;
    absl::StatusOr<std::string> normal = spec::NormalizeConfinedPath(f.path);
    if (!normal.ok()) continue;  // the validator already refused it with its message
    if (absl::Status s = CheckOne(f.name, f.path, *normal, checkpoint_root, owner, f.write,
                                  checkpoint_root, &reads);
        !s.ok()) {
      return s;
    }
    if (!here || !resolved_root.ok()) continue;
    // Symbolic links: the resolved path must satisfy the rule too (its target is not echoed).
    absl::StatusOr<std::string> resolved = spec::ResolveExistingPrefix(*normal);
    if (!resolved.ok()) {
      return Denied(f.name, f.path, "cannot be resolved (a dangling symbolic link or no access)");
    }
    std::vector<JobDirRead> resolved_reads;
    if (absl::Status s = CheckOne(f.name, f.path, *resolved, *resolved_root, owner, f.write,
                                  checkpoint_root, &resolved_reads);
        !s.ok()) {
      return absl::PermissionDeniedError(absl::StrCat(s.message(), " (symbolic links followed)"));
    }
    reads.insert(reads.end(), resolved_reads.begin(), resolved_reads.end());
  }
  return reads;
}

absl::Status JobDirReadDenied(const JobDirRead& read, const std::string& owner, bool exists,
                              const std::string& job_owner) {
  if (exists && job_owner == owner) return absl::OkStatus();
  return Denied(read.field, read.path,
                absl::StrCat("is in the directory of ", read.job_id, ", ",
                             exists ? "a job of another user" : "which is no job of yours",
                             ": a user reads only its own jobs' checkpoints"));
}

}  // namespace mesa::coordinator
