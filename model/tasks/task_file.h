// Task files for scoring by log-likelihood (eval.tasks; docs/formats.md "Task files"): JSONL, one
// example per line, either multiple choice ({"context", "choices", "gold"}) or a target scored by
// exact match under greedy decoding ({"context", "target"}).
#ifndef MESANET_MODEL_TASKS_TASK_FILE_H_
#define MESANET_MODEL_TASKS_TASK_FILE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mesa::model {

struct TaskExample {
  int line = 0;  // 1-based line of the file, for error messages
  std::string context;
  // Multiple choice: the continuations and the index of the right one. Empty with a target.
  std::vector<std::string> choices;
  int gold = 0;
  // Exact match: the continuation greedy decoding must produce. Empty with choices.
  std::string target;

  bool multiple_choice() const { return !choices.empty(); }
  // The right continuation (a few-shot example shows it after its context).
  const std::string& answer() const { return multiple_choice() ? choices[gold] : target; }
};

// Parses JSONL `text`; errors name `name` and the line. Blank lines are skipped.
absl::StatusOr<std::vector<TaskExample>> ParseTaskJsonl(absl::string_view text,
                                                        absl::string_view name);

// Reads and parses a task file (at most spec::kMaxTaskFileBytes).
absl::StatusOr<std::vector<TaskExample>> LoadTaskFile(const std::string& path);

}  // namespace mesa::model

#endif  // MESANET_MODEL_TASKS_TASK_FILE_H_
