// Turning a (context, continuation) request into the token row the model scores (docs/math.md
// §7.1), as lm-evaluation-harness encodes pairs for causal models: trailing whitespace of the
// context moves to the continuation, the concatenation is encoded once, and the continuation is
// what follows the context's own token count. Then BOS in front and, for rows longer than the
// window, the oldest context tokens dropped.
#ifndef MESANET_MODEL_TASKS_PAIR_ENCODING_H_
#define MESANET_MODEL_TASKS_PAIR_ENCODING_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/tokenizer/tokenizer.h"

namespace mesa::model {

struct EncodedPair {
  std::vector<int32_t> context;
  std::vector<int32_t> continuation;
  // The concatenation's first tokens are not the context's own: the tokenizer merged across the
  // boundary, and the cut by count moved part of the context into the continuation or back.
  bool boundary_merge = false;
};

EncodedPair EncodePair(const Tokenizer& tokenizer, absl::string_view context,
                       absl::string_view continuation);

enum class Truncation { kLeft, kFail };

struct ScoredRow {
  std::vector<int32_t> sequence;  // BOS?, context, continuation: inputs are all but the last
  int first_target = 0;           // inputs index whose target is the continuation's first token
  bool truncated = false;         // context tokens were dropped to fit
  bool skipped = false;           // the continuation alone does not fit: not scored
};

// The row of `pair` within `max_length` inputs (max_length + 1 tokens): BOS first when `add_bos`
// or the context is empty; over-long rows keep BOS and their last tokens (kLeft) or are an error
// (kFail); a continuation of max_length tokens or more is skipped. An empty continuation is an
// error.
absl::StatusOr<ScoredRow> LayOutRow(const EncodedPair& pair, int32_t bos, bool add_bos,
                                    int max_length, Truncation truncation);

}  // namespace mesa::model

#endif  // MESANET_MODEL_TASKS_PAIR_ENCODING_H_
