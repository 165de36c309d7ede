#include "model/tokenizer/byte_tokenizer.h"

namespace mesa::model {

std::vector<int32_t> ByteTokenizer::Encode(absl::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size());
  for (unsigned char c : text) ids.push_back(c);
  return ids;
}

std::string ByteTokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (id >= 0 && id < 256) out.push_back(static_cast<char>(id));
  }
  return out;
}

}  // namespace mesa::model
