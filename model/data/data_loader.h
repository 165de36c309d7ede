// Batches of (input, target) token windows from a list of shards, llm.c style.
//
// Each micro-batch of B sequences x T tokens reads B*T+1 consecutive tokens; rank r of W reads at
// position + r*B*T, and every rank advances by B*T*W. When the next window would run past the end
// of a shard, the loader moves to the next shard (and wraps to the first one, counting epochs).
// The position is a small struct, saved in checkpoints, so a resumed run reads exactly the same
// tokens.
#ifndef MESANET_MODEL_DATA_DATA_LOADER_H_
#define MESANET_MODEL_DATA_DATA_LOADER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/data/batch_source.h"
#include "model/data/token_shard.h"

namespace mesa::model {

class DataLoader : public BatchSource {
 public:
  // Opens and validates every shard. `vocab_size` bounds the token ids (checked lazily per batch).
  static absl::StatusOr<std::unique_ptr<DataLoader>> Open(const std::vector<std::string>& paths,
                                                          int batch, int seq_len, int rank,
                                                          int world_size);

  // Fills tokens and targets ([batch * seq_len] each). With wrap = false, returns OutOfRange at
  // the end of the data (evaluation); training wraps around.
  absl::Status Next(std::vector<int32_t>* tokens, std::vector<int32_t>* targets,
                    bool wrap = true) override;

  const DataPosition& position() const override { return position_; }
  absl::Status SetPosition(const DataPosition& position) override;
  int64_t total_tokens() const { return total_tokens_; }

 private:
  DataLoader() = default;
  int64_t WindowTokens() const { return int64_t{batch_} * seq_len_; }
  bool Fits(int64_t shard, int64_t offset) const;

  std::vector<std::unique_ptr<TokenShard>> shards_;
  int batch_ = 0, seq_len_ = 0, rank_ = 0, world_size_ = 1;
  DataPosition position_;
  int64_t total_tokens_ = 0;
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_DATA_DATA_LOADER_H_
