// mesactl's view of evaluation results: the per-dataset lines of `mesactl get` and the per-position
// ΔNLL of `mesactl compare` (docs/mesactl.md; the quantities are docs/math.md §7's).
#ifndef MESANET_CLI_EVAL_FORMAT_H_
#define MESANET_CLI_EVAL_FORMAT_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "mesa/v1/job.pb.h"

namespace mesa::cli {

// "key: value" lines for an evaluation result (datasets, their average, CG figures, the CG sweep);
// empty for results without them. Curves are summarised, not printed (--json has them).
std::vector<std::pair<std::string, std::string>> EvalResultFields(const mesa::v1::JobResult& r);

// ΔNLL of job `a` against the reference `b` on every dataset both evaluated with per-position
// curves (matched by name), over the positions both scored. FAILED_PRECONDITION naming the job
// when one has no curves, or when they share no dataset.
absl::StatusOr<mesa::v1::NllComparison> CompareNll(const mesa::v1::Job& a, const mesa::v1::Job& b);

// A table per dataset, one row per position both jobs scored: NLL_k of each, ΔNLL_k and
// Δ mean-so-far NLL.
std::string FormatNllComparison(const mesa::v1::NllComparison& comparison);

}  // namespace mesa::cli

#endif  // MESANET_CLI_EVAL_FORMAT_H_
