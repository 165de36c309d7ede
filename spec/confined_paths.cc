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
#include "mesa/v1/job.pb.h"
#include "spec/job_refs.h"

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
                        "directory); name one of your own below ",
                        root == "/" ? "" : root, "/", kUsersDir,
                        "/USER/ (USER: your user name; a cluster with tokens allows no "
                        "other place), or leave checkpoint.dir empty");
  }
  return "";
}

CheckpointArea AreaOf(absl::string_view path, absl::string_view root) {
  CheckpointArea area;
  if (path == root) {
    area.kind = CheckpointArea::Kind::kRoot;
    return area;
  }
  absl::string_view below = path.substr(root == "/" ? 1 : root.size() + 1);
  const size_t slash = below.find('/');
  absl::string_view first = below.substr(0, slash);
  if (absl::StartsWith(first, kPerJobDirPrefix)) {
    area.kind = CheckpointArea::Kind::kJob;
    area.name = std::string(first);
  } else if (first == kUsersDir && slash != absl::string_view::npos) {
    absl::string_view rest = below.substr(slash + 1);
    area.kind = CheckpointArea::Kind::kUser;
    area.name = std::string(rest.substr(0, rest.find('/')));
  }
  return area;
}

bool IsPathComponent(absl::string_view user) {
  return !user.empty() && user != "." && user != ".." &&
         user.find('/') == absl::string_view::npos && user.find('\0') == absl::string_view::npos;
}

// Resolutions of a path that exists but whose parents realpath just failed to find: another
// process is creating them (each retry sees more of them made).
constexpr int kCreationRaceRetries = 8;

absl::StatusOr<std::string> ResolveExistingPrefix(absl::string_view path) {
  absl::StatusOr<std::string> normal = NormalizeConfinedPath(path);
  if (!normal.ok()) return normal.status();
  std::string prefix = *normal;
  std::string rest;  // components that do not exist, with leading '/'
  while (true) {
    char resolved[PATH_MAX];
    // A path another process creates between realpath's ENOENT and the lstat below exists by
    // then (a second worker of the same job making the job's checkpoint directories hits that
    // window): unless it is a symbolic link, whose ENOENT means dangling, resolve it again, a few
    // times, before giving up.
    bool resolved_ok = realpath(prefix.c_str(), resolved) != nullptr;
    int error = errno;
    struct stat info;
    for (int retry = 0; !resolved_ok && error == ENOENT && retry < kCreationRaceRetries &&
                        lstat(prefix.c_str(), &info) == 0 && !S_ISLNK(info.st_mode);
         ++retry) {
      resolved_ok = realpath(prefix.c_str(), resolved) != nullptr;
      error = errno;
    }
    if (resolved_ok) {
      std::string out = resolved;
      if (out == "/" && !rest.empty()) return rest;
      return out + rest;
    }
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

namespace {

// The roots as this file system resolves them (a root may itself be a link, e.g. to a mount).
std::vector<std::string> ResolveRoots(const std::vector<std::string>& roots) {
  std::vector<std::string> out;
  for (const std::string& root : roots) {
    absl::StatusOr<std::string> resolved = ResolveExistingPrefix(root);
    if (resolved.ok()) out.push_back(*resolved);
  }
  return out;
}

absl::Status Denied(absl::string_view field, absl::string_view item, absl::string_view why) {
  return absl::PermissionDeniedError(
      absl::StrCat("spec.", field, ": \"", item.substr(0, 256), "\" ", why));
}

// `item` resolved, which must lie inside one of `roots`; `what` names them in the message.
absl::StatusOr<std::string> ResolveWithin(absl::string_view field, const std::string& item,
                                          const std::vector<std::string>& roots,
                                          absl::string_view what) {
  absl::StatusOr<std::string> resolved = ResolveExistingPrefix(item);
  if (!resolved.ok()) return Denied(field, item, resolved.status().message());
  if (RootHolding(*resolved, roots) == nullptr) {
    return Denied(field, item,
                  absl::StrCat("resolves (symbolic links followed) to a path outside ", what, " (",
                               absl::StrJoin(roots, ", "), ")"));
  }
  return resolved;
}

absl::Status CheckResolved(absl::string_view field, const std::string& item,
                           const std::vector<std::string>& roots, absl::string_view what) {
  return ResolveWithin(field, item, roots, what).status();
}

}  // namespace

std::vector<SpecPath> ShardPatterns(const mesa::v1::JobSpec& spec) {
  std::vector<SpecPath> out = {{"data.train_path", spec.data().train_path()},
                               {"data.val_path", spec.data().val_path()}};
  for (int i = 0; i < spec.eval().datasets_size(); ++i) {
    out.push_back(
        {absl::StrCat("eval.datasets[", i, "].val_path"), spec.eval().datasets(i).val_path()});
  }
  return out;
}

std::vector<SpecPath> DataFileReads(const mesa::v1::JobSpec& spec) {
  std::vector<SpecPath> out = {{"data.tokenizer_file", spec.data().tokenizer_file()},
                               {"generate.encoder_json", spec.generate().encoder_json()},
                               {"generate.vocab_bpe", spec.generate().vocab_bpe()},
                               {"generate.tokenizer_file", spec.generate().tokenizer_file()}};
  for (int i = 0; i < spec.eval().tasks_size(); ++i) {
    out.push_back({absl::StrCat("eval.tasks[", i, "].path"), spec.eval().tasks(i).path()});
    out.push_back({absl::StrCat("eval.tasks[", i, "].niah.haystack_path"),
                   spec.eval().tasks(i).niah().haystack_path()});
    out.push_back(
        {absl::StrCat("eval.tasks[", i, "].fewshot_path"), spec.eval().tasks(i).fewshot_path()});
  }
  return out;
}

std::vector<SpecPath> CheckpointReads(const mesa::v1::JobSpec& spec) {
  std::vector<SpecPath> out;
  for (SpecPath read : {SpecPath{"checkpoint.init_from", spec.checkpoint().init_from()},
                        SpecPath{"eval.checkpoint", spec.eval().checkpoint()},
                        SpecPath{"generate.checkpoint", spec.generate().checkpoint()}}) {
    // A job:<id> reference is not a path yet (spec/job_refs.h): checked once resolved.
    if (!IsJobRef(read.value)) out.push_back(std::move(read));
  }
  return out;
}

absl::Status CheckResolvedPaths(const mesa::v1::JobSpec& spec, const ConfinementRoots& roots,
                                absl::string_view job_id, const std::string& checkpoint_dir) {
  const std::vector<std::string> data_roots = ResolveRoots(roots.data_roots);
  const std::vector<std::string> checkpoint_roots = roots.checkpoint_root.empty()
                                                        ? std::vector<std::string>{}
                                                        : ResolveRoots({roots.checkpoint_root});
  if (!roots.data_roots.empty()) {
    if (data_roots.empty()) {
      return absl::PermissionDeniedError("no data root can be resolved here");
    }
    for (const auto& [field, list] : ShardPatterns(spec)) {
      for (const std::string& item : PathListItems(list)) {
        // The pattern's own prefix, and each file it matches on this file system.
        if (absl::Status s = CheckResolved(field, item, data_roots, "the data roots"); !s.ok()) {
          return s;
        }
        for (const std::string& file : ExpandPatternItem(item)) {
          if (absl::Status s = CheckResolved(field, file, data_roots, "the data roots"); !s.ok()) {
            return Denied(field, item,
                          absl::StrCat("matches ", file.substr(0, 256),
                                       ", which resolves (symbolic links followed) to a path "
                                       "outside the data roots"));
          }
        }
      }
    }
    std::vector<std::string> readable = data_roots;
    readable.insert(readable.end(), checkpoint_roots.begin(), checkpoint_roots.end());
    for (const auto& [field, path] : DataFileReads(spec)) {
      if (path.empty()) continue;
      if (absl::Status s = CheckResolved(field, path, data_roots, "the data roots"); !s.ok()) {
        return s;
      }
    }
    for (const auto& [field, path] : CheckpointReads(spec)) {
      if (path.empty()) continue;
      if (absl::Status s =
              CheckResolved(field, path, readable, "the data roots and the checkpoint root");
          !s.ok()) {
        return s;
      }
    }
  }
  if (!roots.checkpoint_root.empty() && !checkpoint_dir.empty()) {
    if (checkpoint_roots.empty()) {
      return absl::PermissionDeniedError(absl::StrCat("the checkpoint root ",
                                                      roots.checkpoint_root.substr(0, 256),
                                                      " cannot be resolved here"));
    }
    // Resolved once: a second resolution could see another worker's directories half made.
    const absl::StatusOr<std::string> resolved =
        ResolveWithin("checkpoint.dir", checkpoint_dir, checkpoint_roots, "the checkpoint root");
    if (!resolved.ok()) return resolved.status();
    const std::string problem = CheckpointDirProblem(*resolved, checkpoint_roots[0], job_id);
    if (!problem.empty()) {
      return Denied("checkpoint.dir", checkpoint_dir,
                    absl::StrCat("resolves into another job's directory or the root itself: ",
                                 "it ", problem));
    }
  }
  return absl::OkStatus();
}

}  // namespace mesa::spec
