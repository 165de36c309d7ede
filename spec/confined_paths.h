// Confined paths: the directories a job may read (data roots) and write (the
// checkpoint root), and the two checks that keep a spec inside them.
//
// - Lexical, at submit (coordinator, mesactl, through spec::ValidateJobSpec): a path is
//   normalised (absolute, '//' and '.' collapsed) and refused if it has a '..' component or a
//   glob component that could match '..' (".*"); it must then lie inside a root. The submitter's
//   file system is not the workers', so no symlink is followed here.
// - Resolved, at use (the worker, before it starts the trainer): every path and shard the
//   pattern matches is resolved with realpath(3) (components that do not exist yet are taken as
//   written; a dangling symbolic link is refused), and the result must still lie inside the
//   resolved roots.
//
// Checkpoint directories: the coordinator gives a job without checkpoint.dir its own
// <checkpoint_root>/<job_id>. Those per-job directories are reserved: a checkpoint.dir a spec
// names must lie strictly inside the root and its first component below the root must not start
// with "job-" (job ids are job-<n>); e.g. <checkpoint_root>/users/<user>/<name>, where the
// owner rule (coordinator/owner_paths.h) lets a user write.
#ifndef MESANET_SPEC_CONFINED_PATHS_H_
#define MESANET_SPEC_CONFINED_PATHS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "mesa/v1/job.pb.h"
#include "spec/path_list.h"  // ExpandPatternItem, PathListItems

namespace mesa::spec {

// First components below the checkpoint root that start with this are per-job directories.
inline constexpr char kPerJobDirPrefix[] = "job-";

// `path` absolute, with '/' runs and '.' components collapsed and no trailing '/'.
// INVALID_ARGUMENT (message without the field) for a relative path, a '..' component, or a
// component that starts with '.' and has a glob character (glob(3) could match '..' with it).
absl::StatusOr<std::string> NormalizeConfinedPath(absl::string_view path);

// Whether normalised `path` is `root` or below it (both normalised).
bool IsInsideRoot(absl::string_view path, absl::string_view root);

// The first root of `roots` that holds `path`, or nullptr.
const std::string* RootHolding(absl::string_view path, const std::vector<std::string>& roots);

// With owners (docs/security.md, Owner-scoped checkpoints): a user's named checkpoint
// directories live under <checkpoint_root>/users/<user>/.
inline constexpr char kUsersDir[] = "users";

// Which part of the checkpoint root normalised `path` (inside normalised `root`) is in:
// the root itself, a per-job directory <root>/job-<n>/... (`name` = the job id), a user's
// directory <root>/users/<name>/... (the bare <root>/users is kOther), or anything else.
struct CheckpointArea {
  enum class Kind { kRoot, kJob, kUser, kOther } kind = Kind::kOther;
  std::string name;
};
CheckpointArea AreaOf(absl::string_view path, absl::string_view root);

// Whether `user` can have a directory <root>/users/<user>: one path component, not "." or "..".
bool IsPathComponent(absl::string_view user);

// For a checkpoint directory inside normalised `root`: "" when it is allowed for job `job_id`
// (empty at submit, when the job has no id yet), else why not (strictly inside the root, not in
// another job's <root>/job-... directory).
std::string CheckpointDirProblem(absl::string_view dir, absl::string_view root,
                                 absl::string_view job_id);

// The path with every symbolic link resolved through the file system: realpath(3) of the longest
// prefix that exists, then the rest as written (it does not exist yet). PERMISSION_DENIED when a
// component exists but cannot be resolved (a dangling or looping symbolic link, no access).
absl::StatusOr<std::string> ResolveExistingPrefix(absl::string_view path);

struct ConfinementRoots {
  std::vector<std::string> data_roots;  // read
  std::string checkpoint_root;          // write (and read)
};

// The check at use, on this file system: OK when `roots` are empty, or when every path resolves
// inside them: data.train_path / data.val_path (each item, and every file a pattern matches)
// inside a data root; checkpoint.init_from and eval.checkpoint inside a data root or the
// checkpoint root; `checkpoint_dir` (ignored when empty) strictly inside the checkpoint root and
// not in a <root>/job-... directory other than `job_id`'s. PERMISSION_DENIED naming the field
// otherwise, without the resolved target (it may name what the submitter cannot read); also when
// a root cannot be resolved.
absl::Status CheckResolvedPaths(const mesa::v1::JobSpec& spec, const ConfinementRoots& roots,
                                absl::string_view job_id, const std::string& checkpoint_dir);

// A path field of a spec: its dotted name below `spec.` and its value.
struct SpecPath {
  std::string field;
  std::string value;
};
// The shard patterns a spec reads (data.train_path, data.val_path, eval.datasets[i].val_path),
// each a glob or a comma-separated list; empty values included.
std::vector<SpecPath> ShardPatterns(const mesa::v1::JobSpec& spec);
// The data files a spec reads besides its shard patterns (tokenizer files, generate.encoder_json
// and vocab_bpe, eval.tasks[i].path): inside a data root.
std::vector<SpecPath> DataFileReads(const mesa::v1::JobSpec& spec);
// The checkpoints a spec reads (checkpoint.init_from, eval.checkpoint, generate.checkpoint):
// inside a data root or the checkpoint root, and in no other user's directory. The one list the
// validator, the coordinator's owner check and the worker's checks at use read. job:<id>
// references (spec/job_refs.h) are left out: they are checked once resolved.
std::vector<SpecPath> CheckpointReads(const mesa::v1::JobSpec& spec);

}  // namespace mesa::spec

#endif  // MESANET_SPEC_CONFINED_PATHS_H_
