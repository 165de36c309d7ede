#include "model/data/document_windows.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace mesa::model {
namespace {

constexpr int64_t kScanTokens = int64_t{1} << 20;  // tokens read at a time to find documents

}  // namespace

absl::StatusOr<std::unique_ptr<DocumentWindows>> DocumentWindows::Open(
    const std::vector<std::string>& paths, int batch, int seq_len, int rank, int world_size,
    int32_t bos) {
  if (batch < 1 || seq_len < 1 || world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat("document windows of ", batch, " x ", seq_len,
                                                   " on rank ", rank, " of ", world_size));
  }
  if (paths.empty()) return absl::InvalidArgumentError("no token shards to read documents from");
  std::unique_ptr<DocumentWindows> w(new DocumentWindows());
  w->batch_ = batch;
  w->seq_len_ = seq_len;
  w->rank_ = rank;
  w->world_size_ = world_size;
  w->bos_ = bos;
  std::vector<uint32_t> chunk;
  for (const std::string& path : paths) {
    absl::StatusOr<std::unique_ptr<TokenShard>> shard = TokenShard::Open(path);
    if (!shard.ok()) return shard.status();
    if ((*shard)->size() == 0) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": the shard holds no token"));
    }
    const int index = static_cast<int>(w->shards_.size());
    int64_t start = 0;  // the current document's first token
    for (int64_t at = 0; at < (*shard)->size(); at += kScanTokens) {
      const int64_t n = std::min(kScanTokens, (*shard)->size() - at);
      if (absl::Status s = (*shard)->Read(at, n, &chunk); !s.ok()) return s;
      for (int64_t i = 0; i < n; ++i) {
        if (static_cast<int32_t>(chunk[i]) != bos || at + i == start) continue;
        w->documents_.push_back({index, start, at + i - start});
        start = at + i;
      }
    }
    w->documents_.push_back({index, start, (*shard)->size() - start});
    w->shards_.push_back(*std::move(shard));
  }
  return w;
}

int64_t DocumentWindows::Batches() const {
  const int64_t per_pass = int64_t{batch_} * world_size_;
  return (static_cast<int64_t>(documents_.size()) + per_pass - 1) / per_pass;
}

absl::Status DocumentWindows::SetPosition(const DataPosition& position) {
  if (position.offset < 0 || position.offset > Batches()) {
    return absl::InvalidArgumentError(
        absl::StrCat("document windows: batch ", position.offset, " of ", Batches()));
  }
  position_ = position;
  return absl::OkStatus();
}

absl::Status DocumentWindows::Next(std::vector<int32_t>* tokens, std::vector<int32_t>* targets,
                                   bool wrap) {
  if (position_.offset >= Batches()) {
    if (!wrap) return absl::OutOfRangeError("end of data");
    position_.offset = 0;
    ++position_.epoch;
  }
  const int64_t n = int64_t{batch_} * seq_len_;
  tokens->assign(n, bos_);
  targets->assign(n, bos_);
  std::vector<uint32_t> text;
  const int64_t first = (position_.offset * world_size_ + rank_) * batch_;
  for (int r = 0; r < batch_; ++r) {
    const int64_t d = first + r;
    if (d >= static_cast<int64_t>(documents_.size())) break;  // padding rows: nothing scored
    const Document& doc = documents_[d];
    // Inputs are the first seq_len tokens, targets the tokens after them (one more when the
    // document has it).
    const int64_t take = std::min<int64_t>(doc.length, int64_t{seq_len_} + 1);
    if (absl::Status s = shards_[doc.shard]->Read(doc.begin, take, &text); !s.ok()) return s;
    for (int64_t t = 0; t < take; ++t) {
      if (t < seq_len_) (*tokens)[r * seq_len_ + t] = static_cast<int32_t>(text[t]);
      if (t > 0) (*targets)[r * seq_len_ + t - 1] = static_cast<int32_t>(text[t]);
    }
  }
  ++position_.offset;
  return absl::OkStatus();
}

}  // namespace mesa::model
