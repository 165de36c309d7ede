#include "spec/confined_paths.h"

#include <glob.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace mesa::spec {

absl::StatusOr<std::string> NormalizeConfinedPath(absl::string_view path) {
  if (path.empty() || path[0] != '/') {
    return absl::InvalidArgumentError("must be an absolute path");
  }
  std::vector<absl::string_view> kept;
  for (absl::string_view part : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    if (part == ".") continue;
    if (part == "..") return absl::InvalidArgumentError("must not have a \"..\" component");
    if (part[0] == '.' && part.find_first_of("*?[") != absl::string_view::npos) {
      return absl::InvalidArgumentError(
          "must not have a component that starts with \".\" and has a wildcard (it could match "
          "\"..\")");
    }
    kept.push_back(part);
  }
  return absl::StrCat("/", absl::StrJoin(kept, "/"));
}

bool IsInsideRoot(absl::string_view path, absl::string_view root) {
  if (root == "/") return absl::StartsWith(path, "/");
  return path == root ||
         (absl::StartsWith(path, root) && path.size() > root.size() && path[root.size()] == '/');
}

const std::string* RootHolding(absl::string_view path, const std::vector<std::string>& roots) {
  for (const std::string& root : roots) {
    if (IsInsideRoot(path, root)) return &root;
  }
  return nullptr;
}

std::string CheckpointDirProblem(absl::string_view dir, absl::string_view root,
                                 absl::string_view job_id) {
  if (dir == root) {
    return absl::StrCat("must be a directory below the checkpoint root ", root,
                        ", not the root itself");
  }
  absl::string_view below = dir.substr(root == "/" ? 1 : root.size() + 1);
  absl::string_view first = below.substr(0, below.find('/'));
  if (absl::StartsWith(first, kPerJobDirPrefix) && first != job_id) {
    return absl::StrCat("is inside ", root, "/", first, ", a per-job checkpoint directory (",
                        kPerJobDirPrefix,
                        "* below the root is reserved for the jobs the coordinator gives their own "
                        "directory); name one of your own, e.g. ",
                        root == "/" ? "" : root, "/named/NAME, or leave checkpoint.dir empty");
  }
  return "";
}

absl::StatusOr<std::string> ResolveExistingPrefix(absl::string_view path) {
  absl::StatusOr<std::string> normal = NormalizeConfinedPath(path);
  if (!normal.ok()) return normal.status();
  std::string prefix = *normal;
  std::string rest;  // components that do not exist, with leading '/'
  while (true) {
    char resolved[PATH_MAX];
    if (realpath(prefix.c_str(), resolved) != nullptr) {
      std::string out = resolved;
      if (out == "/" && !rest.empty()) return rest;
      return out + rest;
    }
    const int error = errno;
    struct stat info;
    if (error != ENOENT || lstat(prefix.c_str(), &info) == 0) {
      // Exists but cannot be resolved: a dangling or looping link, or a directory we may not
      // search. Creating below it could follow the link anywhere.
      return absl::PermissionDeniedError(absl::StrCat(
          "cannot be resolved (", std::strerror(error == ENOENT ? ELOOP : error), ")"));
    }
    const size_t slash = prefix.rfind('/');
    rest = absl::StrCat(prefix.substr(slash), rest);
    prefix = slash == 0 ? "/" : prefix.substr(0, slash);
  }
}

std::vector<std::string> ExpandPatternItem(const std::string& item) {
  if (item.find_first_of("*?[") == std::string::npos) return {item};
  std::vector<std::string> files;
  glob_t matches;
  if (glob(item.c_str(), 0, nullptr, &matches) == 0) {
    for (size_t i = 0; i < matches.gl_pathc; ++i) files.push_back(matches.gl_pathv[i]);
  }
  globfree(&matches);
  return files;
}

std::vector<std::string> PathListItems(absl::string_view list) {
  std::vector<std::string> items;
  for (absl::string_view piece : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    absl::string_view item = absl::StripAsciiWhitespace(piece);
    if (!item.empty()) items.emplace_back(item);
  }
  return items;
}

}  // namespace mesa::spec
