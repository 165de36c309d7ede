// Context reuse in task scoring (docs/evaluation.md "Context reuse"): the requests of a
// multiple-choice item share their context, so the context is run once and every continuation
// resumes from its saved recurrent state (MesaNet::Advance from a DecodeState row copied per
// choice) instead of each row running the context again. Items are packed into waves that depend
// only on the item list and the net's rows, so a wave computes the same numbers on any rank.
#ifndef MESANET_MODEL_TASKS_SHARED_CONTEXT_H_
#define MESANET_MODEL_TASKS_SHARED_CONTEXT_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "model/net/mesanet.h"
#include "model/tasks/task_metrics.h"

namespace mesa::model {

// An item whose rows share their context: each row's tokens (BOS, context, continuation; the
// inputs are all but the last token) and the input position where every row's continuation
// targets start, `first_target`; rows agree on their first `first_target` tokens.
struct SharedContextItem {
  int example = 0;
  std::vector<const std::vector<int32_t>*> rows;
  int first_target = 0;
};

// The rows' shared prefix length (their common first_target) when every row has the same tokens
// before it and there are at least two rows; 0 when they do not share one.
int SharedPrefixLength(const std::vector<const std::vector<int32_t>*>& rows,
                       const std::vector<int>& first_targets);

// Items packed into waves of at most `max_rows` rows: sorted by prefix length (longest first,
// index breaking ties) so that a wave's contexts are alike, then cut greedily. Indices into
// `items`; depends only on (items, max_rows).
std::vector<std::vector<int>> PackWaves(const std::vector<SharedContextItem>& items, int max_rows);

// The decoding state a wave of at most `max_rows` rows needs: those rows, one context row per
// item (at most max_rows / 2: an item has two rows or more) and a clear row; and back, the rows of
// a wave a state of `state_rows` serves.
int WaveStateSize(int max_rows);
int WaveStateRows(int state_rows);

// Scores one wave with `net` and `state` (WaveStateSize rows; the last stays as before any token
// and clears the others): the common part of the wave's contexts in Advances of one row per item
// (without logits), each item's state copied to its rows (one gather per state buffer), then
// every row's rest of context and continuation; each phase in pieces of at most `chunk` tokens
// (the net's window). Per item and row: the continuation's log-likelihood and tokens, and with
// `greedy` whether every continuation token was the argmax.
absl::Status ScoreWave(MesaNet& net, DecodeState& state,
                       const std::vector<SharedContextItem>& items, const std::vector<int>& wave,
                       const MesaSolve& solve, int32_t bos, bool greedy, int chunk,
                       std::vector<std::vector<RequestScore>>* scores);

}  // namespace mesa::model

#endif  // MESANET_MODEL_TASKS_SHARED_CONTEXT_H_
