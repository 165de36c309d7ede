// Limits and names of task scoring from JSONL files (docs/formats.md "Task files"): the limits are
// checked once, by the task file loader (model/tasks); the names by the spec validator, which
// refuses what the loader and the scorer would not know.
#ifndef MESANET_SPEC_TASKS_H_
#define MESANET_SPEC_TASKS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mesa/v1/job.pb.h"

namespace mesa::spec {

inline constexpr int kMaxEvalTasks = 32;                // eval.tasks of one job
inline constexpr int64_t kMaxTaskFileBytes = 64 << 20;  // one JSONL task file
inline constexpr int kMaxTaskExamples = 100000;         // lines of one task file
inline constexpr int kMaxTaskChoices = 64;              // choices of one example
inline constexpr int kMaxTaskFewshot = 32;              // num_fewshot
inline constexpr int kMaxTaskGroups = 16;               // eval.task_groups of one job

// The forms of a task item (docs/formats.md "Task files"; docs/math.md §7.1).
enum class TaskItemForm { kMultipleChoice, kMultiContext, kCloze, kTarget };

// Upstream row formats that eval.tasks[].adapter renders into items (model/tasks/adapters.h), the
// form of their items and the metric the MesaNet paper reports for them (its App. L: choices
// scored by log-likelihood per token; WinoGrande and LAMBADA by plain accuracy).
struct TaskAdapter {
  const char* name;
  TaskItemForm form;
  const char* paper_metric;
};
inline constexpr TaskAdapter kTaskAdapters[] = {
    {"lambada", TaskItemForm::kCloze, "acc"},
    {"hellaswag", TaskItemForm::kMultipleChoice, "acc_tok"},
    {"piqa", TaskItemForm::kMultipleChoice, "acc_tok"},
    {"arc", TaskItemForm::kMultipleChoice, "acc_tok"},
    {"winogrande", TaskItemForm::kMultiContext, "acc"},
    {"siqa", TaskItemForm::kMultipleChoice, "acc_tok"},
    {"boolq", TaskItemForm::kMultipleChoice, "acc_tok"},
    {"openbookqa", TaskItemForm::kMultipleChoice, "acc_tok"},
    {"race", TaskItemForm::kMultipleChoice, "acc_tok"},
    {"storycloze", TaskItemForm::kMultipleChoice, "acc_tok"},
};

// The adapter named `name`, or nullptr.
constexpr const TaskAdapter* FindTaskAdapter(std::string_view name) {
  for (const TaskAdapter& a : kTaskAdapters) {
    if (name == a.name) return &a;
  }
  return nullptr;
}

// eval.tasks[].primary_metric when it is empty: the paper's metric for an adapter, else acc.
constexpr const char* DefaultPrimaryMetric(std::string_view adapter) {
  const TaskAdapter* a = FindTaskAdapter(adapter);
  return a != nullptr ? a->paper_metric : "acc";
}

// Metrics of log-likelihood tasks (docs/math.md §7.2): eval.tasks[].metrics and primary_metric.
inline constexpr const char* kTaskMetrics[] = {
    "acc", "acc_norm", "acc_bytes", "acc_tok", "exact_match", "target_ppl", "target_nll_per_token"};

// Whether items of `form` give `metric` (a name of kTaskMetrics): every form gives acc; the
// normalised accuracies and exact_match need choices; the perplexities need cloze items.
constexpr bool TaskMetricApplies(std::string_view metric, TaskItemForm form) {
  if (metric == "acc") return true;
  if (metric == "acc_norm" || metric == "acc_bytes" || metric == "acc_tok" ||
      metric == "exact_match") {
    return form == TaskItemForm::kMultipleChoice;
  }
  if (metric == "target_ppl" || metric == "target_nll_per_token") {
    return form == TaskItemForm::kCloze;
  }
  return false;
}

// eval.tasks[].truncation: drop the oldest context tokens of an over-long row (the default), or
// fail the job as before.
inline constexpr const char* kTaskTruncations[] = {"left", "fail"};
// Separates the few-shot examples from each other and from the example scored (lm-eval-harness's
// default).
inline constexpr char kTaskFewshotSeparator[] = "\n\n";

// What is wrong with a task's scoring options ("field: message", the field below the task, e.g.
// "metrics[1]: ..."), empty when none: a known adapter, metrics and primary metric that exist and
// that the adapter's items give, no metric twice, a truncation mode, max_length within 0..seq_len.
std::vector<std::string> EvalTaskProblems(const mesa::v1::EvalTask& task, int seq_len);

}  // namespace mesa::spec

#endif  // MESANET_SPEC_TASKS_H_
