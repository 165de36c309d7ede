#include "base/open_beneath.h"

#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace mesa::base {
namespace {

std::atomic<bool> force_fallback{false};

absl::Status OpenError(int error, absl::string_view relative) {
  if (error == EXDEV || error == ELOOP) {
    // EXDEV: openat2 refused to leave the root; ELOOP: a link that may not be followed.
    return absl::PermissionDeniedError(
        absl::StrCat("\"", relative,
                     "\" cannot be opened below its root directory: resolving it leaves the root "
                     "or follows a symbolic link that may not be followed (",
                     std::strerror(error), ")"));
  }
  return absl::Status(absl::ErrnoToStatusCode(error),
                      absl::StrCat("\"", relative, "\": ", std::strerror(error)));
}

absl::StatusOr<std::vector<std::string>> Components(absl::string_view relative) {
  std::vector<std::string> out;
  for (absl::string_view c : absl::StrSplit(relative, '/', absl::SkipEmpty())) {
    if (c == ".") continue;
    if (c == "..") {
      return absl::InvalidArgumentError(absl::StrCat("\"", relative, "\" has a \"..\" component"));
    }
    out.emplace_back(c);
  }
  return out;
}

// openat2 below `root_fd`; -1 with errno. EAGAIN (a rename or mount raced the lookup) is retried.
int Openat2Beneath(int root_fd, const char* path, int flags, mode_t mode) {
  open_how how = {};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC);
  how.mode = (flags & (O_CREAT | O_TMPFILE)) != 0 ? mode : 0;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  int fd = -1;
  for (int tries = 0; tries < 16; ++tries) {
    fd = static_cast<int>(syscall(SYS_openat2, root_fd, path, &how, sizeof(how)));
    if (fd >= 0 || errno != EAGAIN) break;
  }
  return fd;
}

// openat of one component in `dir` that never follows a link: -1 with errno ELOOP for a link
// (O_NOFOLLOW with O_DIRECTORY says ENOTDIR, with O_PATH it opens the link itself).
int OpenComponentNoFollow(int dir, const std::string& name, int flags, mode_t mode) {
  const int fd = openat(dir, name.c_str(), flags | O_NOFOLLOW | O_CLOEXEC, mode);
  struct stat info;
  if (fd < 0) {
    const int error = errno;
    const bool link =
        fstatat(dir, name.c_str(), &info, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(info.st_mode);
    errno = link ? ELOOP : error;
    return -1;
  }
  if ((flags & O_PATH) != 0 && fstat(fd, &info) == 0 && S_ISLNK(info.st_mode)) {
    close(fd);
    errno = ELOOP;
    return -1;
  }
  return fd;
}

// The fallback: one component at a time, never following a symbolic link.
absl::StatusOr<UniqueFd> WalkNoFollow(int root_fd, absl::string_view relative,
                                      const std::vector<std::string>& components, int flags,
                                      mode_t mode) {
  if (components.empty()) {
    UniqueFd self(openat(root_fd, ".", flags | O_CLOEXEC, mode));
    if (!self.valid()) return OpenError(errno, relative);
    return self;
  }
  UniqueFd dir(openat(root_fd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) return OpenError(errno, relative);
  for (size_t i = 0; i + 1 < components.size(); ++i) {
    UniqueFd next(OpenComponentNoFollow(dir.get(), components[i], O_PATH | O_DIRECTORY, 0));
    if (!next.valid()) return OpenError(errno, relative);
    dir = std::move(next);
  }
  UniqueFd last(OpenComponentNoFollow(dir.get(), components.back(), flags, mode));
  if (!last.valid()) return OpenError(errno, relative);
  return last;
}

}  // namespace

void ForceOpenBeneathFallbackForTest(bool force) { force_fallback = force; }

absl::StatusOr<UniqueFd> OpenBeneath(int root_fd, absl::string_view relative, int flags,
                                     mode_t mode) {
  absl::StatusOr<std::vector<std::string>> components = Components(relative);
  if (!components.ok()) return components.status();
  if (!force_fallback) {
    const std::string path = components->empty() ? "." : absl::StrJoin(*components, "/");
    const int fd = Openat2Beneath(root_fd, path.c_str(), flags, mode);
    if (fd >= 0) return UniqueFd(fd);
    if (errno != ENOSYS && errno != EPERM) return OpenError(errno, relative);
    // No openat2 here (or a seccomp filter refusing it): the stricter walk below.
  }
  return WalkNoFollow(root_fd, relative, *components, flags, mode);
}

absl::StatusOr<UniqueFd> MakeDirsBeneath(int root_fd, absl::string_view relative, mode_t mode,
                                         const std::function<absl::Status(int dir_fd)>& check) {
  absl::StatusOr<std::vector<std::string>> components = Components(relative);
  if (!components.ok()) return components.status();
  absl::StatusOr<UniqueFd> dir = OpenBeneath(root_fd, "", O_PATH | O_DIRECTORY);
  if (!dir.ok()) return dir.status();
  std::string prefix;
  for (const std::string& component : *components) {
    // mkdirat never follows a link in the name it creates: an existing link is EEXIST, and the
    // open below resolves it (below the root) like any other component.
    if (mkdirat(dir->get(), component.c_str(), mode) != 0 && errno != EEXIST) {
      return OpenError(errno, prefix.empty() ? component : absl::StrCat(prefix, "/", component));
    }
    prefix = prefix.empty() ? component : absl::StrCat(prefix, "/", component);
    absl::StatusOr<UniqueFd> next = OpenBeneath(root_fd, prefix, O_PATH | O_DIRECTORY);
    if (!next.ok()) return next.status();
    if (check) {
      if (absl::Status s = check(next->get()); !s.ok()) return s;
    }
    dir = std::move(next);
  }
  return dir;
}

absl::StatusOr<std::string> FdPath(int fd) {
  char buffer[PATH_MAX];
  const std::string link = absl::StrCat("/proc/self/fd/", fd);
  const ssize_t n = readlink(link.c_str(), buffer, sizeof(buffer) - 1);
  if (n <= 0) {
    return absl::Status(
        absl::ErrnoToStatusCode(errno),
        absl::StrCat("cannot tell where file descriptor ", fd, " is: ", std::strerror(errno)));
  }
  std::string path(buffer, static_cast<size_t>(n));
  if (path.empty() || path[0] != '/' || absl::EndsWith(path, " (deleted)")) {
    return absl::NotFoundError(
        absl::StrCat("file descriptor ", fd, " is not at a path (", path, ")"));
  }
  return path;
}

}  // namespace mesa::base
