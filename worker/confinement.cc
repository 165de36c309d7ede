#include "worker/confinement.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "spec/confined_paths.h"

namespace mesa::worker {
namespace {

// The roots as this file system resolves them (a root may itself be a link, e.g. to a mount).
std::vector<std::string> ResolveRoots(const std::vector<std::string>& roots) {
  std::vector<std::string> out;
  for (const std::string& root : roots) {
    absl::StatusOr<std::string> resolved = spec::ResolveExistingPrefix(root);
    if (resolved.ok()) out.push_back(*resolved);
  }
  return out;
}

absl::Status Denied(absl::string_view field, absl::string_view item, absl::string_view why) {
  return absl::PermissionDeniedError(
      absl::StrCat("spec.", field, ": \"", item.substr(0, 256), "\" ", why));
}

// The resolved `item` inside one of `roots`; `what` names them in the message.
absl::Status CheckResolved(absl::string_view field, const std::string& item,
                           const std::vector<std::string>& roots, absl::string_view what) {
  absl::StatusOr<std::string> resolved = spec::ResolveExistingPrefix(item);
  if (!resolved.ok()) return Denied(field, item, resolved.status().message());
  if (spec::RootHolding(*resolved, roots) == nullptr) {
    return Denied(field, item,
                  absl::StrCat("resolves (through a symbolic link) to a path outside ", what, " (",
                               absl::StrJoin(roots, ", "), ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckConfinedPaths(const mesa::v1::Assignment& assignment,
                                const std::string& checkpoint_dir) {
  const mesa::v1::JobSpec& spec = assignment.spec();
  const std::vector<std::string> data_roots = ResolveRoots(
      std::vector<std::string>(assignment.data_roots().begin(), assignment.data_roots().end()));
  const std::vector<std::string> checkpoint_roots =
      assignment.checkpoint_root().empty() ? std::vector<std::string>{}
                                           : ResolveRoots({assignment.checkpoint_root()});
  if (!assignment.data_roots().empty()) {
    if (data_roots.empty()) {
      return absl::PermissionDeniedError("no data root exists on this worker");
    }
    for (auto [field, list] : {std::pair{"data.train_path", spec.data().train_path()},
                               std::pair{"data.val_path", spec.data().val_path()}}) {
      for (const std::string& item : spec::PathListItems(list)) {
        // The pattern's own prefix, and each file it matches on this file system.
        if (absl::Status s = CheckResolved(field, item, data_roots, "the data roots"); !s.ok()) {
          return s;
        }
        for (const std::string& file : spec::ExpandPatternItem(item)) {
          if (absl::Status s = CheckResolved(field, file, data_roots, "the data roots"); !s.ok()) {
            return Denied(field, item,
                          absl::StrCat("matches ", file.substr(0, 256),
                                       ", which resolves (through a symbolic link) to a path "
                                       "outside the data roots"));
          }
        }
      }
    }
    std::vector<std::string> readable = data_roots;
    readable.insert(readable.end(), checkpoint_roots.begin(), checkpoint_roots.end());
    for (auto [field, path] : {std::pair{"checkpoint.init_from", spec.checkpoint().init_from()},
                               std::pair{"eval.checkpoint", spec.eval().checkpoint()}}) {
      if (path.empty()) continue;
      if (absl::Status s =
              CheckResolved(field, path, readable, "the data roots and the checkpoint root");
          !s.ok()) {
        return s;
      }
    }
  }
  if (!assignment.checkpoint_root().empty() && !checkpoint_dir.empty()) {
    if (checkpoint_roots.empty()) {
      return absl::PermissionDeniedError(absl::StrCat("the checkpoint root ",
                                                      assignment.checkpoint_root().substr(0, 256),
                                                      " cannot be resolved on this worker"));
    }
    if (absl::Status s = CheckResolved("checkpoint.dir", checkpoint_dir, checkpoint_roots,
                                       "the checkpoint root");
        !s.ok()) {
      return s;
    }
    const std::string resolved = *spec::ResolveExistingPrefix(checkpoint_dir);
    const std::string problem =
        spec::CheckpointDirProblem(resolved, checkpoint_roots[0], assignment.job_id());
    if (!problem.empty()) {
      return Denied("checkpoint.dir", checkpoint_dir,
                    absl::StrCat("resolves into another job's directory or the root itself: ",
                                 "it ", problem));
    }
  }
  return absl::OkStatus();
}

}  // namespace mesa::worker
