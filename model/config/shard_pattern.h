// Shard patterns ("a.bin,b.bin", "dir/train_*.bin") to files; proto-free (mesa-data uses it).
#ifndef MESANET_MODEL_CONFIG_SHARD_PATTERN_H_
#define MESANET_MODEL_CONFIG_SHARD_PATTERN_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace mesa::model {

// Expands "a.bin,b.bin" and glob patterns ("dir/train_*.bin") into a sorted list of files.
// NotFound names `field` and the item that matches nothing.
absl::StatusOr<std::vector<std::string>> ExpandShardPattern(const std::string& pattern,
                                                            const std::string& field);

}  // namespace mesa::model

#endif  // MESANET_MODEL_CONFIG_SHARD_PATTERN_H_
