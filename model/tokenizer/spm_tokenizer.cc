#include "model/tokenizer/spm_tokenizer.h"

#include "absl/strings/str_cat.h"

namespace mesa::model {

SentencePieceTokenizer::SentencePieceTokenizer() = default;

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::Load(
    const std::string& path) {
  std::unique_ptr<SentencePieceTokenizer> tok(new SentencePieceTokenizer());
  std::string error;
  tok->processor_ = SpmProcessor::Load(path, &error);
  if (tok->processor_ == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot load the SentencePiece model: ", error));
  }
  tok->vocab_size_ = tok->processor_->piece_size();
  tok->bos_id_ = tok->processor_->bos_id();
  if (tok->bos_id_ < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        path,
        ": the SentencePiece model has no BOS piece (trained with bos_id=-1); documents "
        "need one to be packed"));
  }
  return tok;
}

std::vector<int32_t> SentencePieceTokenizer::Encode(absl::string_view text) const {
  const std::vector<int> ids = processor_->Encode(std::string_view(text.data(), text.size()));
  return std::vector<int32_t>(ids.begin(), ids.end());
}

std::string SentencePieceTokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::vector<int> kept;
  for (int32_t id : ids) {
    if (id >= 0 && id < vocab_size_ && id != bos_id_) kept.push_back(id);
  }
  return processor_->Decode(kept);
}

}  // namespace mesa::model
