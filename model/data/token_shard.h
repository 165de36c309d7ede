// Token shards in llm.c's `.bin` layout (docs/formats.md):
//   header: 256 little-endian int32; [0] magic 20240520, [1] version, [2] token count
//   version 1: uint16 tokens (vocab <= 65,536); version 2: uint32 tokens (larger vocabularies)
//   then exactly `count` tokens. Documents are packed, each starting with the BOS token.
#ifndef MESANET_MODEL_DATA_TOKEN_SHARD_H_
#define MESANET_MODEL_DATA_TOKEN_SHARD_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace mesa::model {

inline constexpr int32_t kShardMagic = 20240520;
inline constexpr int32_t kShardVersionU16 = 1;
inline constexpr int32_t kShardVersionU32 = 2;
inline constexpr int kShardHeaderInts = 256;

// Writes a shard atomically (base::AtomicFileWriter: temporary file, fsync, rename, fsync of the
// directory). Picks uint16 when every token fits.
absl::Status WriteTokenShard(const std::string& path, const std::vector<uint32_t>& tokens);

// A read-only, memory-mapped shard.
class TokenShard {
 public:
  // Validates the header and the file size; errors name the file and what is wrong.
  static absl::StatusOr<std::unique_ptr<TokenShard>> Open(const std::string& path);
  ~TokenShard();

  const std::string& path() const { return path_; }
  int64_t size() const { return count_; }
  int version() const { return version_; }
  uint32_t operator[](int64_t i) const {
    return version_ == kShardVersionU16 ? static_cast<const uint16_t*>(data_)[i]
                                        : static_cast<const uint32_t*>(data_)[i];
  }

 private:
  TokenShard() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const void* data_ = nullptr;
  int64_t count_ = 0;
  int version_ = 0;
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_DATA_TOKEN_SHARD_H_
