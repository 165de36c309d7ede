// Streaming reads of corpus files, decompressed by extension: `.gz` (zlib; concatenated gzip
// members are read one after another, as gzip -d does) and `.zst` (libzstd; likewise for several
// frames); any other name is read as it is. Memory stays bounded by the chunk size whatever the
// file's size. A corrupt or truncated compressed file is a DataLoss error naming the file.
#ifndef MESANET_MODEL_DATA_BYTE_STREAM_H_
#define MESANET_MODEL_DATA_BYTE_STREAM_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mesa::model {

enum class Compression { kNone, kGzip, kZstd };

// By the name's last extension: ".gz", ".zst", else none.
Compression CompressionOf(absl::string_view path);

// `path` without a compression extension ("a.jsonl.gz" -> "a.jsonl").
absl::string_view StripCompressionExtension(absl::string_view path);

class ByteStream {
 public:
  virtual ~ByteStream() = default;
  // Up to `size` decompressed bytes into `buffer`; 0 only at the end of the stream. Errors name
  // the file.
  virtual absl::StatusOr<size_t> Read(char* buffer, size_t size) = 0;
};

// Opens `path` for streaming, decompressing by its extension (see the top).
absl::StatusOr<std::unique_ptr<ByteStream>> OpenByteStream(const std::string& path);

}  // namespace mesa::model

#endif  // MESANET_MODEL_DATA_BYTE_STREAM_H_
