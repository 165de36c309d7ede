#include "model/inference/stop_sequences.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace mesa::model {

absl::StatusOr<StopMatcher> StopMatcher::Create(StopSequences stops) {
  for (size_t i = 0; i < stops.token_sequences.size(); ++i) {
    if (stops.token_sequences[i].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("stop token sequence ", i, " is empty"));
    }
  }
  for (size_t i = 0; i < stops.strings.size(); ++i) {
    if (stops.strings[i].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("stop string ", i, " is empty"));
    }
  }
  return StopMatcher(std::move(stops));
}

StopMatcher::StopMatcher(StopSequences stops) : stops_(std::move(stops)) {
  for (const auto& seq : stops_.token_sequences) max_tokens_ = std::max(max_tokens_, seq.size());
  for (const auto& s : stops_.strings) max_bytes_ = std::max(max_bytes_, s.size());
}

std::optional<StopMatch> StopMatcher::Append(int32_t token, absl::string_view text) {
  const int64_t start = text_bytes_;
  ++tokens_;
  text_bytes_ += static_cast<int64_t>(text.size());
  recent_.push_back({token, start, text_bytes_});

  std::optional<StopMatch> match;
  for (size_t i = 0; i < stops_.token_sequences.size() && !match; ++i) {
    const std::vector<int32_t>& seq = stops_.token_sequences[i];
    if (seq.size() > recent_.size()) continue;
    const size_t first = recent_.size() - seq.size();
    bool equal = true;
    for (size_t j = 0; j < seq.size() && equal; ++j) equal = recent_[first + j].token == seq[j];
    if (equal) {
      match = StopMatch{.kind = StopMatch::Kind::kTokens,
                        .index = i,
                        .tokens_before = tokens_ - static_cast<int64_t>(seq.size()),
                        .text_bytes_before = recent_[first].start};
    }
  }

  if (max_bytes_ > 0) {
    // Only occurrences that end inside the new piece are new.
    const std::string window = absl::StrCat(recent_text_, text);
    const int64_t window_start = text_bytes_ - static_cast<int64_t>(window.size());
    const size_t old = recent_text_.size();
    size_t best_pos = std::string::npos, best_index = 0;
    for (size_t i = 0; i < stops_.strings.size() && !match; ++i) {
      const std::string& s = stops_.strings[i];
      const size_t pos = window.find(s, old + 1 > s.size() ? old + 1 - s.size() : 0);
      if (pos < best_pos) {
        best_pos = pos;
        best_index = i;
      }
    }
    if (!match && best_pos != std::string::npos) {
      const int64_t match_start = window_start + static_cast<int64_t>(best_pos);
      int64_t before = dropped_;
      for (const Entry& e : recent_) before += e.end <= match_start;
      match = StopMatch{.kind = StopMatch::Kind::kText,
                        .index = best_index,
                        .tokens_before = before,
                        .text_bytes_before = match_start};
    }
    recent_text_ = window.substr(window.size() - std::min(window.size(), max_bytes_ - 1));
  }

  // A later string match starts at or after the text kept in recent_text_.
  const int64_t text_limit = text_bytes_ - static_cast<int64_t>(recent_text_.size());
  while (recent_.size() > max_tokens_ && (max_bytes_ == 0 || recent_.front().end <= text_limit)) {
    recent_.pop_front();
    ++dropped_;
  }
  return match;
}

}  // namespace mesa::model
