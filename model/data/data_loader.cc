#include "model/data/data_loader.h"

#include "absl/strings/str_cat.h"

namespace mesa::model {

absl::StatusOr<std::unique_ptr<DataLoader>> DataLoader::Open(const std::vector<std::string>& paths,
                                                             int batch, int seq_len, int rank,
                                                             int world_size) {
  if (paths.empty()) return absl::InvalidArgumentError("no token shards given");
  if (rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " outside world size ", world_size));
  }
  std::unique_ptr<DataLoader> loader(new DataLoader());
  loader->batch_ = batch;
  loader->seq_len_ = seq_len;
  loader->rank_ = rank;
  loader->world_size_ = world_size;
  const int64_t needed = loader->WindowTokens() * world_size + 1;
  bool any_fits = false;
  for (const std::string& path : paths) {
    auto shard = TokenShard::Open(path);
    if (!shard.ok()) return shard.status();
    loader->total_tokens_ += (*shard)->size();
    any_fits |= (*shard)->size() >= needed;
    loader->shards_.push_back(*std::move(shard));
  }
  if (!any_fits) {
    return absl::InvalidArgumentError(absl::StrCat(
        "no shard holds the ", needed, " tokens one step needs (batch ", batch, " x seq_len ",
        seq_len, " x world ", world_size, " + 1); use more data or a smaller batch"));
  }
  return loader;
}

bool DataLoader::Fits(int64_t shard, int64_t offset) const {
  return offset + WindowTokens() * world_size_ + 1 <= shards_[shard]->size();
}

absl::Status DataLoader::SetPosition(const DataPosition& position) {
  if (position.shard < 0 || position.shard >= static_cast<int64_t>(shards_.size()) ||
      position.offset < 0 || position.offset > shards_[position.shard]->size()) {
    return absl::InvalidArgumentError(absl::StrCat("data position (shard ", position.shard,
                                                   ", offset ", position.offset,
                                                   ") does not exist in the configured shards"));
  }
  position_ = position;
  return absl::OkStatus();
}

absl::Status DataLoader::Next(std::vector<int32_t>* tokens, std::vector<int32_t>* targets,
                              bool wrap) {
  // Skip to the next shard with room for a whole step (all ranks).
  int64_t hops = 0;
  while (!Fits(position_.shard, position_.offset)) {
    position_.offset = 0;
    if (++position_.shard == static_cast<int64_t>(shards_.size())) {
      if (!wrap) return absl::OutOfRangeError("end of data");
      position_.shard = 0;
      ++position_.epoch;
    }
    if (++hops > static_cast<int64_t>(shards_.size()) + 1) {
      return absl::InternalError("no shard fits a step");  // excluded by Open
    }
  }
  const TokenShard& shard = *shards_[position_.shard];
  const int64_t n = WindowTokens();
  const int64_t start = position_.offset + rank_ * n;
  std::vector<uint32_t> window;
  if (absl::Status s = shard.Read(start, n + 1, &window); !s.ok()) return s;
  tokens->resize(n);
  targets->resize(n);
  for (int64_t i = 0; i < n; ++i) {
    (*tokens)[i] = static_cast<int32_t>(window[i]);
    (*targets)[i] = static_cast<int32_t>(window[i + 1]);
  }
  position_.offset += n * world_size_;
  return absl::OkStatus();
}

}  // namespace mesa::model
