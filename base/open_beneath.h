// Opening paths below a directory without a check-to-use race (confined paths at use).
//
// Resolving a path, checking the result and opening the path later leaves a window: whoever may
// write a directory on the path can swap a component for a symbolic link between the check and
// the open. These calls resolve and open in one step, relative to a directory already open (the
// root): with openat2(2) RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS (Linux 5.6 and later) the kernel
// follows symbolic links only while they stay below the root, and refuses ".." above it, for
// every component at the moment of the open. Where openat2 is missing (ENOSYS, or EPERM from a
// seccomp filter that does not know it), the path is walked one component at a time with
// O_NOFOLLOW: below the root no symbolic link is followed at all (stricter, never looser).
//
// What these calls do not do: name what the opened file is (use FdPath for that), or keep a file
// opened later by path, in another process, from being swapped.
#ifndef MESANET_BASE_OPEN_BENEATH_H_
#define MESANET_BASE_OPEN_BENEATH_H_

#include <sys/types.h>

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/unique_fd.h"

namespace mesa::base {

// Opens `relative` (components separated by '/', none of them ".."; "" or "." is the root
// itself) below the directory `root_fd` with open(2) `flags` (O_CLOEXEC is added) and `mode`.
// PERMISSION_DENIED when resolving it would leave the root (a symbolic link pointing outside, an
// absolute link, a ".." above the root; with the fallback, any symbolic link); other errors
// follow errno (ENOENT: NOT_FOUND, ...). Messages name `relative`, never a link's target.
absl::StatusOr<UniqueFd> OpenBeneath(int root_fd, absl::string_view relative, int flags,
                                     mode_t mode = 0);

// Creates the directories of `relative` that do not exist yet, each one below the one before as
// OpenBeneath resolves it (so never outside `root_fd`), and returns the last one opened
// O_DIRECTORY. `check` (may be null) is called with every directory opened on the way, the root
// excluded, before anything is created inside it; an error from it stops the walk and is
// returned.
absl::StatusOr<UniqueFd> MakeDirsBeneath(
    int root_fd, absl::string_view relative, mode_t mode,
    const std::function<absl::Status(int dir_fd)>& check = nullptr);

// Where an open file is, as the kernel sees it now (readlink of /proc/self/fd/N): an absolute
// path without symbolic links.
absl::StatusOr<std::string> FdPath(int fd);

// For tests: use the component walk even where openat2 exists.
void ForceOpenBeneathFallbackForTest(bool force);

}  // namespace mesa::base

#endif  // MESANET_BASE_OPEN_BENEATH_H_
