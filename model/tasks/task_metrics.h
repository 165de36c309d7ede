// The metrics of a log-likelihood task from its items' per-request scores (docs/math.md §7.2):
// acc, acc_norm (per character of the choice), acc_bytes (per UTF-8 byte), acc_tok (per
// continuation token), exact_match (greedy), for cloze items target_ppl and
// target_nll_per_token, for generation items contains; each with its standard error
// (lm-evaluation-harness's rules). Pure arithmetic in item order, so the same scores give
// bit-identical metrics wherever they are computed.
#ifndef MESANET_MODEL_TASKS_TASK_METRICS_H_
#define MESANET_MODEL_TASKS_TASK_METRICS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/tasks/task_file.h"

namespace mesa::model {

struct RequestScore {
  double loglikelihood = 0;  // Σ log p over the continuation's tokens (nats)
  int64_t tokens = 0;        // the continuation's tokens as cut (the delimiter's token counts)
  // Every continuation token was the argmax at its position; for target items, whether decoding
  // produced the target.
  bool greedy = false;
};

struct ItemScore {
  std::vector<RequestScore> requests;  // one per request of the item
  bool truncated = false;              // context tokens were dropped from a request's row
  bool skipped = false;                // a continuation did not fit: the item is not scored
  bool boundary_merge = false;
  // Generation items: 1 when an answer occurs in the completion (ContainsAnswer), else 0.
  double contains = 0;
  // Needle items: the share of expected values found, and whether any was (ScoreNiah).
  double match_all = 0;
  bool match_any = false;
};

// A needle-in-a-haystack breakdown cell: items of one variant (empty: the mean over variants of
// their means) and length, at one depth decile of the first asked needle (-1: every depth).
struct NiahCellValue {
  std::string variant;
  int length = 0;
  int depth_decile = -1;
  double match_all = 0;
  double match_any = 0;
  int64_t count = 0;
};

struct MetricValue {
  std::string name;
  double value = 0;
  double stderr_value = 0;
  std::string stderr_method;  // "mean" or "delta"; empty when there is none (fewer than 2 items)
  int64_t count = 0;          // items it is over
};

struct TaskMetrics {
  int64_t items = 0;
  int64_t scored = 0;
  int64_t truncated = 0;
  int64_t skipped = 0;
  int64_t boundary_merges = 0;
  std::vector<MetricValue> metrics;
  // Multiple-choice items without a delimiter: acc_norm counts the choices' own leading space.
  bool legacy_norm = false;
  // The result's older fields: acc over every scored item, and acc_norm where an item has
  // choices, acc where it has not.
  double accuracy = 0;
  double accuracy_norm = 0;
  // Needle items: per variant x length, per length x depth decile, per length over variants.
  std::vector<NiahCellValue> niah_cells;
};

// The recall suite's rule: some answer occurs in `output` as a literal substring, ignoring the
// case of ASCII letters (no other normalisation; an empty list never matches).
bool ContainsAnswer(const std::string& output, const std::vector<std::string>& answers);

// The metrics the items' forms give (spec::TaskMetricApplies), in spec::kTaskMetrics order.
std::vector<std::string> DefaultTaskMetrics(const std::vector<TaskExample>& items);

// `metrics` empty: DefaultTaskMetrics. A requested metric that no scored item gives is an error.
absl::StatusOr<TaskMetrics> ComputeTaskMetrics(const std::vector<TaskExample>& items,
                                               const std::vector<ItemScore>& scores,
                                               const std::vector<std::string>& metrics);

// A group's average of its members' values (the paper's global and local averages): the
// unweighted mean, and sqrt(Σ stderr²) / K as its standard error.
MetricValue AverageOfMetrics(const std::string& name, const std::vector<MetricValue>& members);

}  // namespace mesa::model

#endif  // MESANET_MODEL_TASKS_TASK_METRICS_H_
