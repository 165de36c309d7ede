#include "model/data/token_shard.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/file_util.h"

namespace mesa::model {
absl::Status WriteTokenShard(const std::string& path, const std::vector<uint32_t>& tokens,
                             bool wide) {
  if (tokens.size() > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError("a shard holds at most 2^31-1 tokens");
  }
  bool fits_u16 = !wide;
  for (uint32_t t : tokens) fits_u16 &= t <= 0xFFFF;
  int32_t header[kShardHeaderInts] = {};
  header[0] = kShardMagic;
  header[1] = fits_u16 ? kShardVersionU16 : kShardVersionU32;
  header[2] = static_cast<int32_t>(tokens.size());
  absl::StatusOr<base::AtomicFileWriter> file = base::AtomicFileWriter::Open(path);
  if (!file.ok()) return file.status();
  if (absl::Status status = file->Append(header, sizeof(header)); !status.ok()) return status;
  if (fits_u16) {
    std::vector<uint16_t> narrow(tokens.begin(), tokens.end());
    if (absl::Status status = file->Append(narrow.data(), narrow.size() * 2); !status.ok()) {
      return status;
    }
  } else if (absl::Status status = file->Append(tokens.data(), tokens.size() * 4); !status.ok()) {
    return status;
  }
  return file->Commit();
}

absl::StatusOr<std::unique_ptr<TokenShard>> TokenShard::Open(const std::string& path) {
  // Job failure reasons are shown to users and the path may name any file the trainer can read:
  // a missing file, an unreadable one and one that is not a shard (too short, no magic) get the
  // very same error, which reveals neither the file's existence nor its size nor its bytes.
  // Only a file that starts like a shard gets the detailed DataLoss errors below.
  const absl::Status not_a_shard = absl::NotFoundError(
      absl::StrCat("token shard ", path,
                   ": missing, unreadable or not a token shard (shards written by "
                   "mesa-data start with the magic ",
                   kShardMagic, ")"));
  const int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return not_a_shard;
  struct stat info;
  if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    close(fd);
    return not_a_shard;
  }
  const size_t bytes = info.st_size;
  auto corrupt = [&](const std::string& why) {
    close(fd);
    return absl::DataLossError(absl::StrCat("token shard ", path, " is corrupt: ", why));
  };
  int32_t header[kShardHeaderInts];
  if (bytes < sizeof(header) || pread(fd, header, sizeof(header), 0) != sizeof(header) ||
      header[0] != kShardMagic) {
    close(fd);
    return not_a_shard;
  }
  if (header[1] != kShardVersionU16 && header[1] != kShardVersionU32) {
    return corrupt(absl::StrCat("unknown version ", header[1], " (1 = uint16, 2 = uint32)"));
  }
  const int64_t count = header[2];
  const size_t width = header[1] == kShardVersionU16 ? 2 : 4;
  const size_t expected = sizeof(header) + count * width;
  if (count < 0 || bytes != expected) {
    return corrupt(absl::StrCat("header says ", count, " tokens (", expected,
                                " bytes) but the file has ", bytes, " bytes (truncated?)"));
  }
  std::unique_ptr<TokenShard> shard(new TokenShard());
  shard->path_ = path;
  shard->count_ = count;
  shard->version_ = header[1];
  shard->fd_ = fd;
  return shard;
}

absl::Status TokenShard::Read(int64_t begin, int64_t count, std::vector<uint32_t>* out) const {
  if (begin < 0 || count < 0 || begin + count > count_) {
    return absl::OutOfRangeError(absl::StrCat("token shard ", path_, ": tokens [", begin, ", ",
                                              begin + count, ") are outside its ", count_));
  }
  const size_t width = version_ == kShardVersionU16 ? 2 : 4;
  std::vector<char> bytes(count * width);
  const off_t offset = kShardHeaderInts * sizeof(int32_t) + begin * width;
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = pread(fd_, bytes.data() + done, bytes.size() - done, offset + done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return absl::DataLossError(absl::StrCat(
          "token shard ", path_, " changed while in use: ", bytes.size(), " bytes at offset ",
          offset, " could not be read (", n < 0 ? std::strerror(errno) : "end of file",
          "); was it truncated or rewritten in place?"));
    }
    done += n;
  }
  out->resize(count);
  for (int64_t i = 0; i < count; ++i) {
    if (width == 2) {
      uint16_t v;
      std::memcpy(&v, bytes.data() + i * 2, 2);
      (*out)[i] = v;
    } else {
      std::memcpy(&(*out)[i], bytes.data() + i * 4, 4);
    }
  }
  return absl::OkStatus();
}

TokenShard::~TokenShard() {
  if (fd_ >= 0) close(fd_);
}

}  // namespace mesa::model
