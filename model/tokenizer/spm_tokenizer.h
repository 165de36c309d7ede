// SentencePiece models (`.model` files, BPE or unigram) through Debian's libsentencepiece.
// BOS is the model's bos_id (an error if the model was trained without one); vocab_size is the
// model's piece count. Encode adds no BOS/EOS (the packer adds the BOS between documents).
#ifndef MESANET_MODEL_TOKENIZER_SPM_TOKENIZER_H_
#define MESANET_MODEL_TOKENIZER_SPM_TOKENIZER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/tokenizer/spm_processor.h"
#include "model/tokenizer/tokenizer.h"

namespace mesa::model {

class SentencePieceTokenizer : public Tokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> Load(const std::string& path);
  ~SentencePieceTokenizer() override;

  std::vector<int32_t> Encode(absl::string_view text) const override;
  std::string Decode(const std::vector<int32_t>& ids) const override;
  int32_t bos_id() const override { return bos_id_; }
  int32_t vocab_size() const override { return vocab_size_; }

 private:
  SentencePieceTokenizer();
  std::unique_ptr<SpmProcessor> processor_;
  int32_t bos_id_ = -1;
  int32_t vocab_size_ = 0;
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_TOKENIZER_SPM_TOKENIZER_H_
