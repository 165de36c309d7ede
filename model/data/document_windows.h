// eval.datasets[].windows "documents" (docs/evaluation.md "Long-context perplexity"): one row per
// document instead of packed windows. A row starts at the document's BOS and holds its first
// seq_len tokens (targets up to token seq_len), the rest BOS, which is not scored; longer
// documents are cut. The perplexity then sums over documents exactly as the paper's per-position
// formulas read (position k of every row is token k of a document).
#ifndef MESANET_MODEL_DATA_DOCUMENT_WINDOWS_H_
#define MESANET_MODEL_DATA_DOCUMENT_WINDOWS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/data/batch_source.h"
#include "model/data/token_shard.h"

namespace mesa::model {

class DocumentWindows : public BatchSource {
 public:
  // Opens the shards and finds their documents (each starts at a `bos` token; tokens before a
  // shard's first BOS form a document of their own). Document d goes to rank (d / batch) mod
  // world_size, so every rank runs the same number of batches (the last ones padded with empty
  // rows). InvalidArgument for shards without a token.
  static absl::StatusOr<std::unique_ptr<DocumentWindows>> Open(
      const std::vector<std::string>& paths, int batch, int seq_len, int rank, int world_size,
      int32_t bos);

  absl::Status Next(std::vector<int32_t>* tokens, std::vector<int32_t>* targets,
                    bool wrap = true) override;
  // offset: the batches of this rank read so far; epoch: passes over the documents.
  const DataPosition& position() const override { return position_; }
  absl::Status SetPosition(const DataPosition& position) override;
  int64_t documents() const { return static_cast<int64_t>(documents_.size()); }

 private:
  struct Document {
    int shard = 0;
    int64_t begin = 0;
    int64_t length = 0;
  };
  DocumentWindows() = default;
  int64_t Batches() const;

  std::vector<std::unique_ptr<TokenShard>> shards_;
  std::vector<Document> documents_;
  int batch_ = 0, seq_len_ = 0, rank_ = 0, world_size_ = 1;
  int32_t bos_ = 0;
  DataPosition position_;
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_DATA_DOCUMENT_WINDOWS_H_
