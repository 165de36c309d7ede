// Task items spread over the ranks of an evaluation and over shard jobs (docs/evaluation.md,
// "Several ranks", "Shard jobs"): every rank builds the same item list and cost per item, takes
// its job's share and deals it by cost; the ranks exchange per-item records
// (model/tasks/task_metrics.h) that are merged in index order before the metrics are computed
// once (spec/task_results.h) — so the metrics do not depend on how the items were spread, bit for
// bit.
#ifndef MESANET_MODEL_TASKS_TASK_SHARDING_H_
#define MESANET_MODEL_TASKS_TASK_SHARDING_H_

#include <cstdint>
#include <vector>

namespace mesa::model {

// The rank that scores each item: items sorted by cost (descending, index breaking ties) and dealt
// in snake order (0, 1, …, R−1, R−1, …, 0, 0, …), which keeps ranks' totals close when a few
// items (long prompts, many tokens to decode) dominate. Depends only on (costs, ranks).
std::vector<int> DealItems(const std::vector<int64_t>& costs, int ranks);

// eval.shard: whether each item belongs to shard `index` of `count` — the items at positions p of
// the cost-sorted list (as DealItems sorts) with p mod count = index. Every item when count <= 1.
std::vector<bool> ShardItems(const std::vector<int64_t>& costs, int index, int count);

// Units of items scored together (a context-reuse wave, or one item) spread like items: the job's
// (ShardItems over the units' costs), then dealt over its ranks (DealItems over the job's). Per
// unit: whether the job scores it, and whether rank `rank` of `ranks` does.
struct UnitShare {
  std::vector<bool> in_job, mine;
};
UnitShare ShareUnits(const std::vector<int64_t>& costs, int job_shard, int job_shards, int rank,
                     int ranks);

}  // namespace mesa::model

#endif  // MESANET_MODEL_TASKS_TASK_SHARDING_H_
