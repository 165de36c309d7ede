// Whole-file helpers on plain POSIX calls: crash-safe replacement of a file's content, and
// reading a whole file.
//
// WriteFileAtomically() (or AtomicFileWriter, to stream the content) writes a temporary file in
// the target's directory, fsyncs it, renames it over the target and fsyncs the directory: readers
// see the old content or the new one, never a mix or a truncated file, and a crash or power loss
// at any point leaves one of the two. On failure the temporary file is removed and the target is
// untouched.
//
// Errors carry the path and strerror; their codes follow errno (ENOENT: NotFound, EACCES:
// PermissionDenied, ENOSPC: ResourceExhausted, ...).
#ifndef MESANET_BASE_FILE_UTIL_H_
#define MESANET_BASE_FILE_UTIL_H_

#include <sys/types.h>

#include <cstddef>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mesa::base {

struct AtomicWriteOptions {
  // The temporary file is `path` + temp_infix + ".<pid>.<random>". Pick an infix that readers
  // listing the directory skip (the rendezvous directory uses "+tmp": '+' is no key character).
  std::string temp_infix = ".tmp";
  // Permission bits of a new file (before the umask).
  mode_t mode = 0644;
};

// Streams a file's new content into a temporary file; Commit() puts it in place. Destroying the
// writer without a successful Commit() removes the temporary file and leaves `path` untouched.
class AtomicFileWriter {
 public:
  // Creates the temporary file (fails if the directory is missing or not writable).
  static absl::StatusOr<AtomicFileWriter> Open(const std::string& path,
                                               const AtomicWriteOptions& options = {});

  AtomicFileWriter(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  ~AtomicFileWriter();

  // Writes all of `bytes` (retrying short writes). After a failure every later call, Commit()
  // included, returns that failure.
  absl::Status Append(absl::string_view bytes);
  absl::Status Append(const void* data, size_t size);

  // fsync, close, rename over the target, fsync of the directory. Call at most once.
  absl::Status Commit();

  // Removes the temporary file now (the destructor does the same).
  void Abandon();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }

 private:
  AtomicFileWriter(std::string path, std::string temp_path, int fd);

  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  bool done_ = false;  // committed or abandoned
  absl::Status error_;
};

// Persists renames in `dir` (fsync of the directory). Filesystems that cannot sync a directory
// (EINVAL, ENOTSUP) are not an error.
absl::Status SyncDirectory(const std::string& dir);

// The whole of `bytes` as the new content of `path`, atomically and durably (see the top).
absl::Status WriteFileAtomically(const std::string& path, absl::string_view bytes,
                                 const AtomicWriteOptions& options = {});
absl::Status WriteFileAtomically(const std::string& path, std::span<const std::byte> bytes,
                                 const AtomicWriteOptions& options = {});

inline constexpr size_t kNoSizeLimit = std::numeric_limits<size_t>::max();

// The whole content of the regular file at `path` (a link is followed). Errors: "cannot open PATH:
// <strerror>" (NotFound for a missing file, PermissionDenied, ...), FailedPrecondition "cannot
// read PATH: not a regular file (a FIFO)" for a directory, FIFO, device or socket (never waiting
// on one), ResourceExhausted when the file holds more than `max_bytes`.
// kRegularOrStream also reads a pipe or character device to its end (bounded by max_bytes), for
// files a person may hand over as `<(command)` or /dev/stdin (job files, token files).
enum class FileKinds { kRegularOnly, kRegularOrStream };
absl::StatusOr<std::string> ReadFile(const std::string& path, size_t max_bytes = kNoSizeLimit,
                                     FileKinds kinds = FileKinds::kRegularOnly);
// The same as bytes (for safetensors files, which are parsed in place).
absl::StatusOr<std::vector<std::byte>> ReadFileBytes(const std::string& path,
                                                     size_t max_bytes = kNoSizeLimit);

}  // namespace mesa::base

#endif  // MESANET_BASE_FILE_UTIL_H_
