// How task item records become a task's result (docs/math.md §7.2–7.3): the metrics and their
// standard errors, the needle-in-a-haystack breakdown, the primary metric and the group averages.
// Pure arithmetic on mesa.v1.TaskItemRecord in item order, shared by the trainer (records of its
// ranks) and the coordinator (records of shard jobs), so that the same records give bit-identical
// results wherever they are merged.
#ifndef MESANET_SPEC_TASK_RESULTS_H_
#define MESANET_SPEC_TASK_RESULTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mesa/v1/job.pb.h"

namespace mesa::spec {

// A scored item's x under a per-item metric (every metric but bleu, target_ppl and
// target_nll_per_token, which TaskMetricApplies must allow for its form): 1 or 0 for the
// accuracies, the share found for match_all. With choices, `prediction` (when given) gets the
// request the metric picks (else -1).
double ItemMetricScore(const std::string& metric, const mesa::v1::TaskItemRecord& item,
                       int* prediction = nullptr);

// The metrics the records' item forms give (TaskMetricApplies), in kTaskMetrics order.
std::vector<std::string> DefaultTaskMetrics(const std::vector<mesa::v1::TaskItemRecord>& records);

// Fills `out`'s counts (items, scored, truncated, skipped, boundary_merges), `metrics` (in the
// order of `metrics`; empty = DefaultTaskMetrics), accuracy, accuracy_norm, legacy_norm and
// niah_cells from one record per item in index order. A requested metric that no scored item
// gives is an error.
absl::Status ComputeTaskMetrics(const std::vector<mesa::v1::TaskItemRecord>& records,
                                const std::vector<std::string>& metrics, mesa::v1::TaskResult* out);

// The metric group averages use: the task's primary_metric, else the adapter's (the paper's) or
// match_all for needle items, else acc when reported, else the first reported.
std::string PrimaryMetricOf(const mesa::v1::EvalTask& task, const mesa::v1::TaskResult& result);

// A group's average of its members' values: the unweighted mean, sqrt(Σ stderr²) / K as its
// standard error (when every member has one) and the members' item counts summed.
mesa::v1::MetricValue AverageOfMetrics(const std::string& name,
                                       const std::vector<mesa::v1::MetricValue>& members);

// A task scored over few-shot draws (eval.tasks[].fewshot_draws), each draw's result in draw
// order: draw 0's result with each metric's value the mean over the draws, draw_std their sample
// standard deviation and stderr the root mean square of the draws' standard errors (method
// "draws"), the older accuracy fields and the CG means averaged likewise, and every draw's own
// result in `draws`.
// Draws must report the same metrics in the same order.
absl::StatusOr<mesa::v1::TaskResult> CombineDraws(const std::vector<mesa::v1::TaskResult>& draws);

// eval.task_groups over `tasks` (each with its primary metric reported): one result per group.
absl::StatusOr<std::vector<mesa::v1::TaskGroupResult>> AverageTaskGroups(
    const mesa::v1::EvalConfig& eval, const std::vector<mesa::v1::TaskResult>& tasks);

// Every item's record from `partials` in index order. Each of the task's `items` (or each that
// `expected` marks; the others' records are left empty) must appear exactly once over all
// partials (anything else is a bug or partials of different runs).
absl::StatusOr<std::vector<mesa::v1::TaskItemRecord>> MergeItemRecords(
    int64_t items, const std::vector<mesa::v1::TaskPartial>& partials,
    const std::vector<bool>* expected = nullptr);

// The tasks and groups of an EVAL job scored as `shards` (the results of its eval.shard jobs, any
// order): per task the records of every shard merged and its metrics computed as an unsharded job
// computes them, the settings and counts taken from the shards' task results. Errors name the
// task: shards of different files or settings, a missing or repeated item.
absl::StatusOr<mesa::v1::JobResult> MergeShardResults(
    const mesa::v1::EvalConfig& eval, const std::vector<mesa::v1::JobResult>& shards);

}  // namespace mesa::spec

#endif  // MESANET_SPEC_TASK_RESULTS_H_
