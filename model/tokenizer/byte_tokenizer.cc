#include "model/tokenizer/byte_tokenizer.h"

#include "model/tokenizer/gpt2_tokenizer.h"
#include "nlohmann/json.hpp"

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

std::string ByteTokenizer::HfTokenizerJson() {
  using nlohmann::json;
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[ByteLevelChar(static_cast<uint8_t>(b))] = b;
  // No regex split: with no merges every byte is its own token whatever the pieces are.
  const json byte_level = {{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", false},
                           {"use_regex", false}};
  return json{{"version", "1.0"},
              {"truncation", nullptr},
              {"padding", nullptr},
              {"added_tokens", json::array({{{"id", kBos},
                                             {"content", kBosName},
                                             {"single_word", false},
                                             {"lstrip", false},
                                             {"rstrip", false},
                                             {"normalized", false},
                                             {"special", true}}})},
              {"normalizer", nullptr},
              {"pre_tokenizer", byte_level},
              {"post_processor", nullptr},
              {"decoder", byte_level},
              {"model",
               {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", false},
                {"vocab", vocab},
                {"merges", json::array()}}}}
      .dump();
}

}  // namespace mesa::model
