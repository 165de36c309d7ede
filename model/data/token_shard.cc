#include "model/data/token_shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace mesa::model {
namespace {

absl::Status WriteAll(int fd, const void* data, size_t bytes, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = write(fd, p, bytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(absl::StrCat("writing ", path, ": ", std::strerror(errno)));
    }
    p += n;
    bytes -= n;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteTokenShard(const std::string& path, const std::vector<uint32_t>& tokens) {
  if (tokens.size() > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError("a shard holds at most 2^31-1 tokens");
  }
  bool fits_u16 = true;
  for (uint32_t t : tokens) fits_u16 &= t <= 0xFFFF;
  int32_t header[kShardHeaderInts] = {};
  header[0] = kShardMagic;
  header[1] = fits_u16 ? kShardVersionU16 : kShardVersionU32;
  header[2] = static_cast<int32_t>(tokens.size());
  const std::string tmp = path + ".tmp";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return absl::InternalError(absl::StrCat("creating ", tmp, ": ", std::strerror(errno)));
  absl::Status status = WriteAll(fd, header, sizeof(header), tmp);
  if (status.ok()) {
    if (fits_u16) {
      std::vector<uint16_t> narrow(tokens.begin(), tokens.end());
      status = WriteAll(fd, narrow.data(), narrow.size() * 2, tmp);
    } else {
      status = WriteAll(fd, tokens.data(), tokens.size() * 4, tmp);
    }
  }
  if (status.ok() && fsync(fd) != 0) status = absl::InternalError("fsync " + tmp);
  close(fd);
  if (status.ok() && rename(tmp.c_str(), path.c_str()) != 0) {
    status = absl::InternalError(absl::StrCat("renaming ", tmp, ": ", std::strerror(errno)));
  }
  if (!status.ok()) unlink(tmp.c_str());
  return status;
}

absl::StatusOr<std::unique_ptr<TokenShard>> TokenShard::Open(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat("token shard ", path, ": ", std::strerror(errno)));
  }
  struct stat info;
  fstat(fd, &info);
  const size_t bytes = info.st_size;
  auto corrupt = [&](const std::string& why) {
    close(fd);
    return absl::DataLossError(absl::StrCat("token shard ", path, " is corrupt: ", why));
  };
  if (bytes < kShardHeaderInts * sizeof(int32_t)) {
    return corrupt(absl::StrCat("only ", bytes, " bytes, shorter than the 1024-byte header"));
  }
  int32_t header[kShardHeaderInts];
  if (pread(fd, header, sizeof(header), 0) != sizeof(header)) return corrupt("unreadable header");
  if (header[0] != kShardMagic) {
    return corrupt(absl::StrCat("bad magic ", header[0], " (expected ", kShardMagic, ")"));
  }
  if (header[1] != kShardVersionU16 && header[1] != kShardVersionU32) {
    return corrupt(absl::StrCat("unknown version ", header[1], " (1 = uint16, 2 = uint32)"));
  }
  const int64_t count = header[2];
  const size_t width = header[1] == kShardVersionU16 ? 2 : 4;
  const size_t expected = sizeof(header) + count * width;
  if (count < 0 || bytes != expected) {
    return corrupt(absl::StrCat("header says ", count, " tokens (", expected, " bytes) but the file has ",
                                bytes, " bytes (truncated?)"));
  }
  std::unique_ptr<TokenShard> shard(new TokenShard());
  shard->path_ = path;
  shard->count_ = count;
  shard->version_ = header[1];
  shard->map_bytes_ = bytes;
  shard->map_ = mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (shard->map_ == MAP_FAILED) {
    shard->map_ = nullptr;
    return absl::InternalError(absl::StrCat("mmap ", path, ": ", std::strerror(errno)));
  }
  shard->data_ = static_cast<const char*>(shard->map_) + sizeof(header);
  return shard;
}

TokenShard::~TokenShard() {
  if (map_ != nullptr) munmap(map_, map_bytes_);
}

}  // namespace mesa::model
