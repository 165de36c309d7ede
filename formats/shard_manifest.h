// The manifest of a token-shard set: DIR/mesa_data.json, which mesa-data writes beside the shards
// (tokenizer, vocab_size, bos_id, tokenizer_files with their SHA-256, token_bytes, counts) and the
// job-spec validator, the coordinator and the trainer read (spec/tokenizer_record.h). The one
// definition of its name and place (docs/formats.md, "Token shards").
#ifndef MESANET_FORMATS_SHARD_MANIFEST_H_
#define MESANET_FORMATS_SHARD_MANIFEST_H_

#include <string>

namespace mesa::formats {

inline constexpr char kShardManifestName[] = "mesa_data.json";

// DIR/mesa_data.json.
inline std::string ShardManifestPath(const std::string& dir) {
  return dir + "/" + kShardManifestName;
}

}  // namespace mesa::formats

#endif  // MESANET_FORMATS_SHARD_MANIFEST_H_
