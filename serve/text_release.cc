#include "serve/text_release.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"

namespace mesa::serve {

size_t IncompleteUtf8Tail(const std::string& text) {
  // Walk back over at most 3 continuation bytes to a lead byte; the tail is incomplete when the
  // lead byte announces more bytes than follow it.
  const size_t n = text.size();
  for (size_t back = 1; back <= std::min<size_t>(4, n); ++back) {
    const unsigned char c = static_cast<unsigned char>(text[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte
    size_t need = 1;
    if ((c & 0xE0) == 0xC0) {
      need = 2;
    } else if ((c & 0xF0) == 0xE0) {
      need = 3;
    } else if ((c & 0xF8) == 0xF0) {
      need = 4;
    }
    return need > back ? back : 0;
  }
  return 0;  // only continuation bytes: nothing a later byte could complete
}

absl::StatusOr<TextRelease> TextRelease::Create(const std::vector<std::string>& stop) {
  std::optional<model::StopMatcher> matcher;
  if (!stop.empty()) {
    absl::StatusOr<model::StopMatcher> m = model::StopMatcher::Create({.strings = stop});
    if (!m.ok()) return m.status();
    matcher = *std::move(m);
  }
  return TextRelease(stop, std::move(matcher));
}

Released TextRelease::ReleaseUpTo(size_t upto, bool all_tokens) {
  Released out;
  if (upto > shown_bytes_) {
    out.text = text_.substr(shown_bytes_, upto - shown_bytes_);
    shown_bytes_ = upto;
  }
  while (shown_tokens_ < tokens_.size() &&
         (all_tokens || token_ends_[shown_tokens_] <= shown_bytes_)) {
    out.tokens.push_back(tokens_[shown_tokens_]);
    out.logprobs.push_back(logprobs_[shown_tokens_]);
    ++shown_tokens_;
  }
  return out;
}

Released TextRelease::Append(int32_t token, const std::string& text, double logprob) {
  if (stopped_) return {};
  tokens_.push_back(token);
  logprobs_.push_back(logprob);
  text_ += text;
  token_ends_.push_back(text_.size());
  if (matcher_.has_value()) {
    if (std::optional<model::StopMatch> m = matcher_->Append(token, text); m.has_value()) {
      stopped_ = true;
      tokens_.resize(m->tokens_before);
      logprobs_.resize(m->tokens_before);
      token_ends_.resize(m->tokens_before);
      text_.resize(m->text_bytes_before);
      return ReleaseUpTo(text_.size(), /*all_tokens=*/true);
    }
  }
  // Hold the longest end of the text that begins a stop string, and an incomplete character.
  size_t hold = IncompleteUtf8Tail(text_);
  const absl::string_view all(text_);
  for (const std::string& s : stop_) {
    for (size_t k = std::min(s.size() - 1, all.size()); k > hold; --k) {
      if (absl::EndsWith(all, absl::string_view(s).substr(0, k))) {
        hold = k;
        break;
      }
    }
  }
  return ReleaseUpTo(text_.size() - hold, /*all_tokens=*/false);
}

Released TextRelease::Flush() { return ReleaseUpTo(text_.size(), /*all_tokens=*/true); }

}  // namespace mesa::serve
