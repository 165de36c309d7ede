#include "base/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"

namespace mesa::base {
namespace {

// The directory holding `path` ("." for a bare name).
std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

absl::Status TooLarge(const std::string& path, size_t max_bytes) {
  return absl::ResourceExhaustedError(
      absl::StrCat("cannot read ", path, ": larger than the limit of ", max_bytes, " bytes"));
}

const char* FileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a plain file";
}

// Reads until end of file: the size from fstat() is only a hint (/proc files say 0, and a file
// may grow while it is read).
template <typename Bytes>
absl::StatusOr<Bytes> ReadWholeFile(const std::string& path, size_t max_bytes, FileKinds kinds) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below like any other
  // file that is not a regular one (a device such as /dev/zero would never end).
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", path));
  struct stat info;
  if (fstat(fd, &info) != 0) {
    const int error = errno;
    close(fd);
    return absl::ErrnoToStatus(error, absl::StrCat("cannot stat ", path));
  }
  const bool stream = S_ISFIFO(info.st_mode) || S_ISCHR(info.st_mode);
  if (!S_ISREG(info.st_mode) && !(stream && kinds == FileKinds::kRegularOrStream)) {
    close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("cannot read ", path, ": not a regular file (", FileKind(info.st_mode),
                     "); give the path of a file"));
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  const size_t expected = S_ISREG(info.st_mode) ? static_cast<size_t>(info.st_size) : 0;
  if (expected > max_bytes) {
    close(fd);
    return TooLarge(path, max_bytes);
  }
  Bytes bytes(expected, typename Bytes::value_type{});
  size_t used = 0;
  auto fail = [&](absl::Status status) {
    close(fd);
    return status;
  };
  while (true) {
    char* data = reinterpret_cast<char*>(bytes.data());
    ssize_t n;
    if (used < bytes.size()) {
      n = read(fd, data + used, bytes.size() - used);
    } else {
      // Full: look for more in a small buffer before growing (usually this is the end).
      char chunk[4096];
      n = read(fd, chunk, sizeof(chunk));
      if (n > 0) {
        if (static_cast<size_t>(n) > max_bytes - used) return fail(TooLarge(path, max_bytes));
        bytes.resize(std::min(max_bytes, std::max(2 * used, used + n)));
        std::memcpy(reinterpret_cast<char*>(bytes.data()) + used, chunk, n);
      }
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail(absl::ErrnoToStatus(errno, absl::StrCat("cannot read ", path)));
    if (n == 0) break;
    used += static_cast<size_t>(n);
  }
  close(fd);
  bytes.resize(used);
  return bytes;
}

}  // namespace

absl::Status SyncDirectory(const std::string& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot open directory ", dir));
  int rc;
  do {
    rc = fsync(fd);
  } while (rc != 0 && errno == EINTR);
  const int error = errno;
  close(fd);
  if (rc != 0 && error != EINVAL && error != ENOTSUP) {
    return absl::ErrnoToStatus(error, absl::StrCat("cannot fsync directory ", dir));
  }
  return absl::OkStatus();
}

absl::StatusOr<AtomicFileWriter> AtomicFileWriter::Open(const std::string& path,
                                                        const AtomicWriteOptions& options) {
  std::random_device random;
  // O_EXCL: a name another writer picked at the same moment is never shared; try another.
  for (int attempt = 0;; ++attempt) {
    std::string temp_path = absl::StrCat(path, options.temp_infix, ".", getpid(), ".", random());
    const int fd = open(temp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, options.mode);
    if (fd >= 0) return AtomicFileWriter(path, std::move(temp_path), fd);
    if (errno == EINTR || (errno == EEXIST && attempt < 8)) continue;
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot create ", temp_path));
  }
}

AtomicFileWriter::AtomicFileWriter(std::string path, std::string temp_path, int fd)
    : path_(std::move(path)), temp_path_(std::move(temp_path)), fd_(fd) {}

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& other) noexcept
    : path_(std::move(other.path_)),
      temp_path_(std::move(other.temp_path_)),
      fd_(std::exchange(other.fd_, -1)),
      done_(std::exchange(other.done_, true)),
      error_(std::move(other.error_)) {}

AtomicFileWriter& AtomicFileWriter::operator=(AtomicFileWriter&& other) noexcept {
  if (this != &other) {
    Abandon();
    path_ = std::move(other.path_);
    temp_path_ = std::move(other.temp_path_);
    fd_ = std::exchange(other.fd_, -1);
    done_ = std::exchange(other.done_, true);
    error_ = std::move(other.error_);
  }
  return *this;
}

AtomicFileWriter::~AtomicFileWriter() { Abandon(); }

void AtomicFileWriter::Abandon() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  if (!done_) unlink(temp_path_.c_str());
  done_ = true;
}

absl::Status AtomicFileWriter::Append(absl::string_view bytes) {
  return Append(bytes.data(), bytes.size());
}

absl::Status AtomicFileWriter::Append(const void* data, size_t size) {
  if (!error_.ok()) return error_;
  if (done_) return absl::FailedPreconditionError(absl::StrCat(path_, ": already committed"));
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = write(fd_, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      error_ = absl::ErrnoToStatus(errno, absl::StrCat("cannot write ", temp_path_));
      return error_;
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status AtomicFileWriter::Commit() {
  if (!error_.ok()) {
    Abandon();
    return error_;
  }
  if (done_) return absl::FailedPreconditionError(absl::StrCat(path_, ": already committed"));
  int rc;
  do {
    rc = fsync(fd_);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    error_ = absl::ErrnoToStatus(errno, absl::StrCat("cannot fsync ", temp_path_));
    Abandon();
    return error_;
  }
  rc = close(fd_);
  fd_ = -1;
  if (rc != 0 && errno != EINTR) {  // EINTR: the descriptor is closed all the same (Linux).
    error_ = absl::ErrnoToStatus(errno, absl::StrCat("cannot close ", temp_path_));
    Abandon();
    return error_;
  }
  if (rename(temp_path_.c_str(), path_.c_str()) != 0) {
    error_ = absl::ErrnoToStatus(errno, absl::StrCat("cannot rename ", temp_path_, " to ", path_));
    Abandon();
    return error_;
  }
  done_ = true;
  return SyncDirectory(DirectoryOf(path_));
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view bytes,
                                 const AtomicWriteOptions& options) {
  absl::StatusOr<AtomicFileWriter> writer = AtomicFileWriter::Open(path, options);
  if (!writer.ok()) return writer.status();
  if (absl::Status status = writer->Append(bytes); !status.ok()) return status;
  return writer->Commit();
}

absl::Status WriteFileAtomically(const std::string& path, std::span<const std::byte> bytes,
                                 const AtomicWriteOptions& options) {
  return WriteFileAtomically(
      path, absl::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), options);
}

absl::StatusOr<std::string> ReadFile(const std::string& path, size_t max_bytes, FileKinds kinds) {
  return ReadWholeFile<std::string>(path, max_bytes, kinds);
}

absl::StatusOr<std::vector<std::byte>> ReadFileBytes(const std::string& path, size_t max_bytes) {
  return ReadWholeFile<std::vector<std::byte>>(path, max_bytes, FileKinds::kRegularOnly);
}

}  // namespace mesa::base
