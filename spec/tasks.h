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
inline constexpr int kMaxTaskFewshot = 128;             // num_fewshot (the paper's 100-shot)
inline constexpr int kMaxFewshotDraws = 20;             // fewshot_draws
inline constexpr int kMaxTaskGroups = 16;               // eval.task_groups of one job

// The forms of a task item (docs/formats.md "Task files"; docs/math.md §7.1).
// kNeedle: a generated needle-in-a-haystack item, decoded like a generation item and scored by
// RULER's match_all / match_any.
enum class TaskItemForm { kMultipleChoice, kMultiContext, kCloze, kTarget, kGeneration, kNeedle };

// Upstream row formats that eval.tasks[].adapter renders into items (model/tasks/adapters.h), the
// form of their items and the metric the MesaNet paper reports for them (its App. L: choices
// scored by log-likelihood per token; WinoGrande and LAMBADA by plain accuracy; the recall suite
// by whether an answer occurs in a greedy completion of at most 48 tokens ended by a newline;
// few-shot word unscrambling by exact match and translation to English by corpus BLEU, greedy
// to a newline, Tables 15-16).
struct TaskAdapter {
  const char* name;
  TaskItemForm form;
  const char* paper_metric;
  int max_new_tokens = 0;      // generation: the default eval.tasks[].max_new_tokens
  const char* stop = nullptr;  // generation: the default stop sequence (none when null)
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
    {"based_swde", TaskItemForm::kGeneration, "contains", 48, "\n"},
    {"based_fda", TaskItemForm::kGeneration, "contains", 48, "\n"},
    {"based_squad", TaskItemForm::kGeneration, "contains", 48, "\n"},
    {"based_triviaqa", TaskItemForm::kGeneration, "contains", 48, "\n"},
    {"based_nq", TaskItemForm::kGeneration, "contains", 48, "\n"},
    {"based_drop", TaskItemForm::kGeneration, "contains", 48, "\n"},
    {"unscramble", TaskItemForm::kGeneration, "exact_match", 32, "\n"},
    {"wmt_fr_en", TaskItemForm::kGeneration, "bleu", 128, "\n"},
    {"wmt_de_en", TaskItemForm::kGeneration, "bleu", 128, "\n"},
    {"wmt_ro_en", TaskItemForm::kGeneration, "bleu", 128, "\n"},
};

// Generation items decode this many tokens unless the item or its task says otherwise.
inline constexpr int kDefaultTaskNewTokens = 48;

// The adapter named `name`, or nullptr.
constexpr const TaskAdapter* FindTaskAdapter(std::string_view name) {
  for (const TaskAdapter& a : kTaskAdapters) {
    if (name == a.name) return &a;
  }
  return nullptr;
}

// eval.tasks[].primary_metric when it is empty: the paper's metric for an adapter, match_all for
// generated needle items, else acc (a file of generation items alone: contains, which the scorer
// picks when acc is not reported).
constexpr const char* DefaultPrimaryMetric(std::string_view adapter, bool niah = false) {
  if (niah) return "match_all";
  const TaskAdapter* a = FindTaskAdapter(adapter);
  return a != nullptr ? a->paper_metric : "acc";
}

// Metrics of tasks (docs/math.md §7.2): eval.tasks[].metrics and primary_metric.
inline constexpr const char* kTaskMetrics[] = {"acc",
                                               "acc_norm",
                                               "acc_bytes",
                                               "acc_tok",
                                               "exact_match",
                                               "target_ppl",
                                               "target_nll_per_token",
                                               "contains",
                                               "match_all",
                                               "match_any",
                                               "bleu"};

// Whether items of `form` give `metric` (a name of kTaskMetrics): every scored-by-likelihood
// form gives acc; the normalised accuracies need choices; exact_match choices or generation
// items; the perplexities need cloze items; contains and bleu generation items.
constexpr bool TaskMetricApplies(std::string_view metric, TaskItemForm form) {
  if (metric == "contains" || metric == "bleu") return form == TaskItemForm::kGeneration;
  if (metric == "exact_match") {
    return form == TaskItemForm::kMultipleChoice || form == TaskItemForm::kGeneration;
  }
  if (metric == "match_all" || metric == "match_any") return form == TaskItemForm::kNeedle;
  if (metric == "acc") return form != TaskItemForm::kGeneration && form != TaskItemForm::kNeedle;
  if (metric == "acc_norm" || metric == "acc_bytes" || metric == "acc_tok") {
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

// eval.tasks[].niah: the generated needle-in-a-haystack items (model/tasks/niah.h).
inline constexpr const char* kNiahVariants[] = {"single_1",   "single_2",   "single_3",
                                                "multikey_1", "multikey_2", "multikey_3",
                                                "multivalue", "multiquery"};
inline constexpr int kDefaultNiahItems = 100;  // per (variant, length)
inline constexpr int kMaxNiahItems = 10000;
inline constexpr int kMaxNiahLength = 1 << 17;     // tokens of one item
inline constexpr int kDefaultNiahNewTokens = 128;  // RULER's
// eval.tasks[].niah.score: decode and search (RULER's), or the teacher-forced greedy check.
inline constexpr const char* kNiahScores[] = {"decode", "greedy"};

// Whether a task's generation items are scored by BLEU: bleu among its metrics, or no metrics
// listed and an adapter whose paper metric is bleu (the statistics cost a few integers per item).
bool TaskScoresBleu(const mesa::v1::EvalTask& task);

// What is wrong with a task's scoring options ("field: message", the field below the task, e.g.
// "metrics[1]: ..."), empty when none: a known adapter, metrics and primary metric that exist and
// that the adapter's items give, no metric twice, a truncation mode, max_length within 0..seq_len.
std::vector<std::string> EvalTaskProblems(const mesa::v1::EvalTask& task, int seq_len);

}  // namespace mesa::spec

#endif  // MESANET_SPEC_TASKS_H_
