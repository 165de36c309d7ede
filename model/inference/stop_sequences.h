// Stop sequences for generation: token-id sequences and text strings, matched against what has
// been generated so far (never against the prompt), including matches that span several tokens.
// Memory is bounded by the longest stop sequence, not by the generation length.
#ifndef MESANET_MODEL_INFERENCE_STOP_SEQUENCES_H_
#define MESANET_MODEL_INFERENCE_STOP_SEQUENCES_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mesa::model {

struct StopSequences {
  std::vector<std::vector<int32_t>> token_sequences;  // each non-empty
  std::vector<std::string> strings;                   // each non-empty (bytes, e.g. UTF-8)
};

struct StopMatch {
  enum class Kind { kTokens, kText };
  Kind kind = Kind::kTokens;
  size_t index = 0;  // into StopSequences::token_sequences or ::strings
  // What comes before the stop sequence: what to keep when the stop sequence itself is not part
  // of the completion. tokens_before counts the generated tokens whose text ends at or before
  // the start of the match (for a token match: the tokens before the sequence); text_bytes_before
  // counts the generated text bytes before the match (for a token match: the text of the tokens
  // before the sequence). A token whose text straddles the start of a string match is not among
  // the tokens before it.
  int64_t tokens_before = 0;
  int64_t text_bytes_before = 0;
};

class StopMatcher {
 public:
  // InvalidArgument if a token sequence or a string is empty.
  static absl::StatusOr<StopMatcher> Create(StopSequences stops);

  // Appends one generated token and its text (the tokenizer's bytes for it; may be empty or an
  // incomplete UTF-8 character). Returns the stop sequence completed by this token, if any. When
  // several complete at once, a token sequence wins over a string (first in list order), and among
  // strings the one that starts earliest (then the first in list order).
  std::optional<StopMatch> Append(int32_t token, absl::string_view text);

  int64_t tokens() const { return tokens_; }
  int64_t text_bytes() const { return text_bytes_; }

 private:
  explicit StopMatcher(StopSequences stops);

  StopSequences stops_;
  size_t max_tokens_ = 0;  // longest token sequence
  size_t max_bytes_ = 0;   // longest string
  // Recent generated tokens with the text offsets [start, end) of their bytes: at least the last
  // max_tokens_, and every token that ends inside the text a future string match could cover.
  struct Entry {
    int32_t token;
    int64_t start, end;
  };
  std::deque<Entry> recent_;
  int64_t dropped_ = 0;      // tokens before recent_.front()
  std::string recent_text_;  // the last max_bytes_ - 1 bytes (at most) before the new piece
  int64_t tokens_ = 0;
  int64_t text_bytes_ = 0;
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_INFERENCE_STOP_SEQUENCES_H_
