#include "model/tasks/pair_encoding.h"

#include <algorithm>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/utf8.h"

namespace mesa::model {

EncodedPair EncodePair(const Tokenizer& tokenizer, absl::string_view context,
                       absl::string_view continuation) {
  EncodedPair pair;
  if (context.empty()) {
    pair.continuation = tokenizer.Encode(continuation);
    return pair;
  }
  const size_t cut = base::TrailingUnicodeSpaceStart(context);
  const absl::string_view moved = context.substr(cut);
  context = context.substr(0, cut);
  const std::vector<int32_t> whole = tokenizer.Encode(absl::StrCat(context, moved, continuation));
  pair.context = tokenizer.Encode(context);
  const size_t n = std::min(pair.context.size(), whole.size());
  pair.boundary_merge = n < pair.context.size() ||
                        !std::equal(pair.context.begin(), pair.context.end(), whole.begin());
  pair.continuation.assign(whole.begin() + n, whole.end());
  return pair;
}

absl::StatusOr<ScoredRow> LayOutRow(const EncodedPair& pair, int32_t bos, bool add_bos,
                                    int max_length, Truncation truncation) {
  if (pair.continuation.empty()) {
    return absl::InvalidArgumentError("the continuation encodes to no tokens of its own");
  }
  ScoredRow row;
  const int64_t cont = static_cast<int64_t>(pair.continuation.size());
  if (cont >= max_length) {
    row.skipped = true;
    return row;
  }
  const bool with_bos = add_bos || pair.context.empty();
  int64_t ctx = static_cast<int64_t>(pair.context.size());
  const int64_t tokens = int64_t{with_bos} + ctx + cont;
  if (tokens > int64_t{max_length} + 1) {
    if (truncation == Truncation::kFail) {
      return absl::InvalidArgumentError(absl::StrCat(
          "BOS, context and continuation are ", tokens, " tokens; the window scores at most ",
          max_length + 1, " (set truncation: left to keep the last ones)"));
    }
    // Keep BOS (when the row has one) and the last max_length tokens of context + continuation.
    row.truncated = true;
    ctx = std::max<int64_t>(0, int64_t{max_length} + 1 - int64_t{with_bos} - cont);
  }
  if (with_bos) row.sequence.push_back(bos);
  row.sequence.insert(row.sequence.end(), pair.context.end() - ctx, pair.context.end());
  row.first_target = static_cast<int>(row.sequence.size()) - 1;
  row.sequence.insert(row.sequence.end(), pair.continuation.begin(), pair.continuation.end());
  return row;
}

}  // namespace mesa::model
