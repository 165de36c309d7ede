// An array job's result (JobResult.array; docs/evaluation.md "Array jobs"): its children's
// results as one table, one row per (checkpoint, CG setting, task / group / dataset, metric).
// Shards of one (checkpoint, setting) are merged here with the trainer's own rules
// (spec::MergeShardResults), so a sharded cell equals an unsharded one bit for bit.
#ifndef MESANET_COORDINATOR_ARRAY_RESULTS_H_
#define MESANET_COORDINATOR_ARRAY_RESULTS_H_

#include <string>
#include <vector>

#include "mesa/v1/job.pb.h"

namespace mesa::coordinator {

struct ArrayChildOutcome {
  mesa::v1::ArrayChild child;                   // id, place in the product, final state
  const mesa::v1::JobResult* result = nullptr;  // SUCCEEDED children: their result
  std::string failure_reason;
};

// The table of `parent` (its spec has `array`) from every child's outcome. A cell whose children
// did not all succeed, or whose shards do not merge, has no rows and a line in `missing`.
mesa::v1::ArrayResult ArrayResultOf(const mesa::v1::JobSpec& parent,
                                    const std::vector<ArrayChildOutcome>& children);

}  // namespace mesa::coordinator

#endif  // MESANET_COORDINATOR_ARRAY_RESULTS_H_
