// Where training and evaluation get their (input, target) windows: token shards (DataLoader) or
// synthetic tasks generated in-process (SyntheticSource). Targets equal to the model's BOS id are
// not scored.
#ifndef MESANET_MODEL_DATA_BATCH_SOURCE_H_
#define MESANET_MODEL_DATA_BATCH_SOURCE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"

namespace mesa::model {

// Saved in checkpoints, so a resumed run reads exactly the same windows. Shards: the shard and
// the token offset of rank 0's next window in it. Synthetic tasks: shard 0 and the index of the
// next example of the training stream.
struct DataPosition {
  int64_t shard = 0;
  int64_t offset = 0;
  int64_t epoch = 0;
  bool operator==(const DataPosition&) const = default;
};

// Whether `token` is in a valid_next() set.
inline bool InValidSet(uint64_t set, int32_t token) {
  return token >= 0 && token < 64 && (set >> token & 1) != 0;
}

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Fills tokens and targets ([batch * seq_len] each). With wrap = false, returns OutOfRange at
  // the end of the data (evaluation); training wraps around.
  virtual absl::Status Next(std::vector<int32_t>* tokens, std::vector<int32_t>* targets,
                            bool wrap = true) = 0;
  virtual const DataPosition& position() const = 0;
  virtual absl::Status SetPosition(const DataPosition& position) = 0;
  // Synthetic tasks where several next tokens are right (regbench): per token of the last Next,
  // the ids an argmax may be (bit v: token v < 64; 0: only the target). Empty for other data.
  virtual const std::vector<uint64_t>& valid_next() const {
    static const std::vector<uint64_t> kNone;
    return kNone;
  }
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_DATA_BATCH_SOURCE_H_
