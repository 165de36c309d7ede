// Limits of task scoring from JSONL files (docs/formats.md "Task files"): checked once, here, by
// the task file loader (model/tasks).
#ifndef MESANET_SPEC_TASKS_H_
#define MESANET_SPEC_TASKS_H_

#include <cstdint>

namespace mesa::spec {

inline constexpr int kMaxEvalTasks = 32;                // eval.tasks of one job
inline constexpr int64_t kMaxTaskFileBytes = 64 << 20;  // one JSONL task file
inline constexpr int kMaxTaskExamples = 100000;         // lines of one task file
inline constexpr int kMaxTaskChoices = 64;              // choices of one example
inline constexpr int kMaxTaskFewshot = 32;              // num_fewshot
// Separates the few-shot examples from each other and from the example scored (lm-eval-harness's
// default).
inline constexpr char kTaskFewshotSeparator[] = "\n\n";

}  // namespace mesa::spec

#endif  // MESANET_SPEC_TASKS_H_
