#include "model/data/byte_stream.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace mesa::model {
namespace {

constexpr size_t kChunkBytes = 1 << 20;

// The raw bytes of a file, read with read(2).
class FileStream : public ByteStream {
 public:
  FileStream(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~FileStream() override { close(fd_); }
  FileStream(const FileStream&) = delete;
  FileStream& operator=(const FileStream&) = delete;

  static absl::StatusOr<std::unique_ptr<FileStream>> Open(const std::string& path) {
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", path));
    }
    return std::make_unique<FileStream>(path, fd);
  }

  absl::StatusOr<size_t> Read(char* buffer, size_t size) override {
    while (true) {
      const ssize_t n = read(fd_, buffer, size);
      if (n >= 0) return static_cast<size_t>(n);
      if (errno == EINTR) continue;
      return absl::ErrnoToStatus(errno, absl::StrCat("cannot read ", path_));
    }
  }

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_;
};

// Compressed input from a FileStream, one chunk at a time; `eof` once the file is exhausted.
struct InputChunks {
  explicit InputChunks(std::unique_ptr<FileStream> file)
      : file(std::move(file)), chunk(kChunkBytes) {}
  // Reads the next chunk when the previous one is used up; returns its size (0 at the end).
  absl::StatusOr<size_t> Refill() {
    absl::StatusOr<size_t> n = file->Read(chunk.data(), chunk.size());
    if (!n.ok()) return n.status();
    if (*n == 0) eof = true;
    any |= *n > 0;
    return n;
  }
  absl::Status Truncated(absl::string_view format) const {
    return absl::DataLossError(
        absl::StrCat(file->path(), ": ", any ? "truncated " : "empty, not ", format,
                     any ? " data (the file ends inside a compressed stream)" : " data"));
  }
  absl::Status Corrupt(absl::string_view format, absl::string_view why) const {
    return absl::DataLossError(
        absl::StrCat(file->path(), ": corrupt ", format, " data (", why, ")"));
  }

  std::unique_ptr<FileStream> file;
  std::vector<char> chunk;
  bool eof = false;
  bool any = false;
};

class GzipStream : public ByteStream {
 public:
  explicit GzipStream(std::unique_ptr<FileStream> file) : input_(std::move(file)) {
    std::memset(&z_, 0, sizeof(z_));
  }
  ~GzipStream() override {
    if (initialised_) inflateEnd(&z_);
  }
  GzipStream(const GzipStream&) = delete;
  GzipStream& operator=(const GzipStream&) = delete;

  absl::Status Init() {
    // 15 + 16: a window of up to 32 KiB, gzip header and trailer (CRC32 and size are checked).
    if (inflateInit2(&z_, 15 + 16) != Z_OK) {
      return absl::ResourceExhaustedError(
          absl::StrCat(input_.file->path(), ": cannot start zlib's inflate"));
    }
    initialised_ = true;
    return absl::OkStatus();
  }

  absl::StatusOr<size_t> Read(char* buffer, size_t size) override {
    if (size == 0) return 0;
    z_.next_out = reinterpret_cast<Bytef*>(buffer);
    z_.avail_out = static_cast<uInt>(std::min<size_t>(size, 1u << 30));
    const uInt room = z_.avail_out;
    while (true) {
      if (z_.avail_in == 0 && !input_.eof) {
        absl::StatusOr<size_t> n = input_.Refill();
        if (!n.ok()) return n.status();
        z_.next_in = reinterpret_cast<Bytef*>(input_.chunk.data());
        z_.avail_in = static_cast<uInt>(*n);
      }
      if (!in_member_) {
        if (z_.avail_in == 0 && input_.eof) {
          if (members_ == 0) return input_.Truncated("gzip");
          return 0;
        }
        inflateReset(&z_);  // keeps next_in: the next member follows the previous one
        in_member_ = true;
      }
      const int ret = inflate(&z_, Z_NO_FLUSH);
      if (ret == Z_STREAM_END) {
        in_member_ = false;
        ++members_;
      } else if (ret == Z_MEM_ERROR) {
        return absl::ResourceExhaustedError(
            absl::StrCat(input_.file->path(), ": out of memory in zlib's inflate"));
      } else if (ret != Z_OK && ret != Z_BUF_ERROR) {
        return input_.Corrupt("gzip", z_.msg != nullptr ? z_.msg : "inflate failed");
      }
      const size_t produced = room - z_.avail_out;
      if (produced > 0) return produced;
      if (in_member_ && z_.avail_in == 0 && input_.eof) return input_.Truncated("gzip");
    }
  }

 private:
  InputChunks input_;
  z_stream z_;
  bool initialised_ = false;
  bool in_member_ = false;
  int64_t members_ = 0;
};

class ZstdStream : public ByteStream {
 public:
  explicit ZstdStream(std::unique_ptr<FileStream> file)
      : input_(std::move(file)), stream_(ZSTD_createDStream()) {}
  ~ZstdStream() override { ZSTD_freeDStream(stream_); }
  ZstdStream(const ZstdStream&) = delete;
  ZstdStream& operator=(const ZstdStream&) = delete;

  absl::Status Init() {
    if (stream_ == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat(input_.file->path(), ": cannot create a zstd decompression stream"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<size_t> Read(char* buffer, size_t size) override {
    if (size == 0) return 0;
    ZSTD_outBuffer out = {buffer, size, 0};
    while (true) {
      if (in_.pos == in_.size && !input_.eof) {
        absl::StatusOr<size_t> n = input_.Refill();
        if (!n.ok()) return n.status();
        in_ = {input_.chunk.data(), *n, 0};
      }
      if (in_.pos == in_.size && input_.eof) {
        if (!input_.any) return input_.Truncated("zstd");
        if (frame_done_) return 0;
      }
      // With no input left this still flushes what the decoder holds; a frame that then has
      // produced nothing and is not complete was cut short.
      const size_t ret = ZSTD_decompressStream(stream_, &out, &in_);
      if (ZSTD_isError(ret)) return input_.Corrupt("zstd", ZSTD_getErrorName(ret));
      frame_done_ = ret == 0;
      if (out.pos > 0) return out.pos;
      if (in_.pos == in_.size && input_.eof && !frame_done_) return input_.Truncated("zstd");
    }
  }

 private:
  InputChunks input_;
  ZSTD_DStream* stream_;
  ZSTD_inBuffer in_ = {nullptr, 0, 0};
  bool frame_done_ = true;
};

}  // namespace

Compression CompressionOf(absl::string_view path) {
  if (absl::EndsWith(path, ".gz")) return Compression::kGzip;
  if (absl::EndsWith(path, ".zst")) return Compression::kZstd;
  return Compression::kNone;
}

absl::string_view StripCompressionExtension(absl::string_view path) {
  switch (CompressionOf(path)) {
    case Compression::kGzip:
      return path.substr(0, path.size() - 3);
    case Compression::kZstd:
      return path.substr(0, path.size() - 4);
    case Compression::kNone:
      break;
  }
  return path;
}

absl::StatusOr<std::unique_ptr<ByteStream>> OpenByteStream(const std::string& path) {
  absl::StatusOr<std::unique_ptr<FileStream>> file = FileStream::Open(path);
  if (!file.ok()) return file.status();
  switch (CompressionOf(path)) {
    case Compression::kGzip: {
      auto gzip = std::make_unique<GzipStream>(*std::move(file));
      if (absl::Status status = gzip->Init(); !status.ok()) return status;
      return gzip;
    }
    case Compression::kZstd: {
      auto zstd = std::make_unique<ZstdStream>(*std::move(file));
      if (absl::Status status = zstd->Init(); !status.ok()) return status;
      return zstd;
    }
    case Compression::kNone:
      break;
  }
  return *std::move(file);
}

}  // namespace mesa::model
