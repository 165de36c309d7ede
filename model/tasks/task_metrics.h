// An item's scores (per request: log-likelihood, tokens, greedy match; a decoded item's contains
// or needle matches) and their record, from which spec/task_results.h computes a task's metrics
// (docs/math.md §7.2): acc, acc_norm (per character of the choice), acc_bytes (per UTF-8 byte),
// acc_tok (per continuation token), exact_match, target_ppl, contains, match_all, match_any.
#ifndef MESANET_MODEL_TASKS_TASK_METRICS_H_
#define MESANET_MODEL_TASKS_TASK_METRICS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/tasks/task_file.h"
#include "proto/mesa/v1/job.pb.h"

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
  // Generation items: 1 when an answer occurs in the completion (ContainsAnswer), else 0;
  // whether the completion equals an answer after NormalizeAnswer; with BLEU scoring, the
  // completion's statistics against the first answer (spec::BleuStats::ToList).
  double contains = 0;
  bool exact = false;
  std::vector<int64_t> bleu_stats;
  // Needle items: the share of expected values found, and whether any was (ScoreNiah).
  double match_all = 0;
  bool match_any = false;
  // Models with Mesa layers: CG steps (mean over those layers and heads per token) summed over
  // the item's scored tokens and over its decoded ones, and those tokens.
  double cg_steps_prefill = 0;
  int64_t cg_tokens_prefill = 0;
  double cg_steps_decode = 0;
  int64_t cg_tokens_decode = 0;
};

// The recall suite's rule: some answer occurs in `output` as a literal substring, ignoring the
// case of ASCII letters (no other normalisation; an empty list never matches).
bool ContainsAnswer(const std::string& output, const std::vector<std::string>& answers);

// Item `index`'s record (mesa.v1.TaskItemRecord): its scores and what the metrics need of the item
// itself (form, right choices, the choices' lengths, a needle's cell), so that records alone give
// the task's metrics (spec/task_results.h); and the scores a record carries.
mesa::v1::TaskItemRecord ItemRecordOf(int64_t index, const TaskExample& item,
                                      const ItemScore& score);
ItemScore ItemScoreOf(const mesa::v1::TaskItemRecord& record);

// The metric fields of a task's result (counts, metrics in the order of `metrics`, empty = every
// one the items give, the older accuracy fields, the needle breakdown): spec::ComputeTaskMetrics
// over the items' records. A requested metric that no scored item gives is an error.
absl::StatusOr<mesa::v1::TaskResult> ComputeTaskMetrics(const std::vector<TaskExample>& items,
                                                        const std::vector<ItemScore>& scores,
                                                        const std::vector<std::string>& metrics);

}  // namespace mesa::model

#endif  // MESANET_MODEL_TASKS_TASK_METRICS_H_
