// What of a generation's text may be shown to a client yet. With stop strings, a completion is cut
// where a stop string begins, so text that could still be the start of one is held back until it
// is known not to be; an incomplete UTF-8 character at the end is held too (a token may hold part
// of a character). Streamed completions then never show text that the final one drops.
#ifndef MESANET_SERVE_TEXT_RELEASE_H_
#define MESANET_SERVE_TEXT_RELEASE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/inference/stop_sequences.h"

namespace mesa::serve {

// A piece of the completion that may be shown: its text and the tokens that end within it.
struct Released {
  std::string text;
  std::vector<int32_t> tokens;
  std::vector<double> logprobs;  // of `tokens`
};

class TextRelease {
 public:
  // InvalidArgument for an empty stop string.
  static absl::StatusOr<TextRelease> Create(const std::vector<std::string>& stop);

  // Appends a generated token (its text, its log-probability). Returns what may be shown now;
  // `stopped` becomes true when a stop string completed (then the completion ends before it).
  Released Append(int32_t token, const std::string& text, double logprob);
  // The completion ended otherwise (length, end of document): everything held is shown.
  Released Flush();

  bool stopped() const { return stopped_; }
  // The whole completion so far (stop string removed once stopped), shown or not.
  const std::string& text() const { return text_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  const std::vector<double>& logprobs() const { return logprobs_; }

 private:
  TextRelease(std::vector<std::string> stop, std::optional<model::StopMatcher> matcher)
      : stop_(std::move(stop)), matcher_(std::move(matcher)) {}
  // Shows text_[shown_bytes_, upto) and the tokens that end by `upto`.
  Released ReleaseUpTo(size_t upto, bool all_tokens);

  std::vector<std::string> stop_;
  std::optional<model::StopMatcher> matcher_;
  std::string text_;
  std::vector<int32_t> tokens_;
  std::vector<double> logprobs_;
  std::vector<size_t> token_ends_;  // byte offset in text_ where each token's text ends
  size_t shown_bytes_ = 0, shown_tokens_ = 0;
  bool stopped_ = false;
};

// Bytes at the end of `text` that form an incomplete UTF-8 character (0..3).
size_t IncompleteUtf8Tail(const std::string& text);

}  // namespace mesa::serve

#endif  // MESANET_SERVE_TEXT_RELEASE_H_
