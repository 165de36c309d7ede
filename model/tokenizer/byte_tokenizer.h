// Byte-level tokenizer: ids 0..255 are the bytes, 256 is BOS (vocab 257).
#ifndef MESANET_MODEL_TOKENIZER_BYTE_TOKENIZER_H_
#define MESANET_MODEL_TOKENIZER_BYTE_TOKENIZER_H_

#include <string>

#include "model/tokenizer/tokenizer.h"

namespace mesa::model {

class ByteTokenizer : public Tokenizer {
 public:
  static constexpr int32_t kBos = 256;
  std::vector<int32_t> Encode(absl::string_view text) const override;
  std::string Decode(const std::vector<int32_t>& ids) const override;
  int32_t bos_id() const override { return kBos; }
  int32_t vocab_size() const override { return 257; }
  // The same tokenizer as a Hugging Face tokenizer.json: byte-level BPE over the 256 byte
  // tokens (ids 0-255) with no merges, and BOS as the added token kBosName (id 256).
  static constexpr char kBosName[] = "<|endoftext|>";
  static std::string HfTokenizerJson();
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_TOKENIZER_BYTE_TOKENIZER_H_
