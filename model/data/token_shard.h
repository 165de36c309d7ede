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
// directory). Picks uint16 when every token fits, unless `wide` (a vocabulary of more than 65,536
// ids: every shard of the set is uint32, version 2).
absl::Status WriteTokenShard(const std::string& path, const std::vector<uint32_t>& tokens,
                             bool wide = false);

// A read-only shard, read with pread: a file truncated under a running trainer gives an error,
// where a memory mapping would kill the process with SIGBUS.
class TokenShard {
 public:
  // Validates the header and the file size; errors name the file and what is wrong.
  static absl::StatusOr<std::unique_ptr<TokenShard>> Open(const std::string& path);
  ~TokenShard();

  const std::string& path() const { return path_; }
  int64_t size() const { return count_; }
  int version() const { return version_; }
  // Tokens [begin, begin + count) into `out`; the range must lie within size(). DataLoss if the
  // file no longer holds them (truncated or rewritten in place since Open).
  absl::Status Read(int64_t begin, int64_t count, std::vector<uint32_t>* out) const;

 private:
  TokenShard() = default;
  std::string path_;
  int fd_ = -1;
  int64_t count_ = 0;
  int version_ = 0;
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_DATA_TOKEN_SHARD_H_
