// Task items spread over the ranks of an evaluation (docs/evaluation.md, "Distribution"): every
// rank builds the same item list, deals it by cost, scores its share, and the ranks exchange
// fixed per-item records that every rank orders by index before computing the metrics once —
// so the metrics do not depend on how many ranks scored the items, bit for bit.
#ifndef MESANET_MODEL_TASKS_TASK_SHARDING_H_
#define MESANET_MODEL_TASKS_TASK_SHARDING_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "model/tasks/task_metrics.h"
#include "proto/mesa/v1/job.pb.h"

namespace mesa::model {

// The rank that scores each item: items sorted by cost (descending, index breaking ties) and dealt
// in snake order (0, 1, …, R−1, R−1, …, 0, 0, …), which keeps ranks' totals close when a few
// items (long prompts, many tokens to decode) dominate. Depends only on (costs, ranks).
std::vector<int> DealItems(const std::vector<int64_t>& costs, int ranks);

// The record of item `index` (its scores as this rank computed them) and the scores it carries.
mesa::v1::TaskItemRecord ItemRecordOf(int64_t index, const ItemScore& score);
ItemScore ItemScoreOf(const mesa::v1::TaskItemRecord& record);

// Every item's scores from the records of `partials`, in index order. Each of the task's `items`
// must appear exactly once over all partials (anything else is a bug or mismatched partials).
absl::StatusOr<std::vector<ItemScore>> MergeItemRecords(
    int64_t items, const std::vector<mesa::v1::TaskPartial>& partials);

}  // namespace mesa::model

#endif  // MESANET_MODEL_TASKS_TASK_SHARDING_H_
