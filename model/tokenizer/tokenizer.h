// Tokenizer interface: text <-> token ids, plus the BOS id that separates packed documents.
#ifndef MESANET_MODEL_TOKENIZER_TOKENIZER_H_
#define MESANET_MODEL_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace mesa::model {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<int32_t> Encode(absl::string_view text) const = 0;
  // Bytes of the tokens (BOS decodes to nothing).
  virtual std::string Decode(const std::vector<int32_t>& ids) const = 0;
  virtual int32_t bos_id() const = 0;
  virtual int32_t vocab_size() const = 0;
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_TOKENIZER_TOKENIZER_H_
