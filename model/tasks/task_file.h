// Task files for scoring by log-likelihood (eval.tasks; docs/formats.md "Task files"): JSONL, one
// item per line, in one of five forms (docs/math.md §7.1):
//   multiple choice  {"context", "choices", "gold", "delimiter"?}
//   multi-context    {"contexts", "continuation", "gold", "delimiter"?}   (WinoGrande)
//   cloze            {"context", "target", "score": "greedy", "delimiter"?} (LAMBADA)
//   target           {"context", "target"}  scored by exact match under greedy decoding
//   generation       {"prompt", "answers", "max_new_tokens"?, "stop"?}  (the recall suite)
// and an optional "id". Without "delimiter" (the legacy form) a continuation is written with its
// own leading space and the character normalisations count that space; with it, the request's
// continuation is delimiter + text and the normalisations count the text alone.
#ifndef MESANET_MODEL_TASKS_TASK_FILE_H_
#define MESANET_MODEL_TASKS_TASK_FILE_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "spec/tasks.h"

namespace mesa::model {

using TaskForm = spec::TaskItemForm;

struct TaskExample {
  int line = 0;    // 1-based line of the file (or row of an adapter's file), for error messages
  std::string id;  // the file's "id", else empty
  TaskForm form = TaskForm::kMultipleChoice;
  std::string context;                // every form but multi-context
  std::vector<std::string> contexts;  // multi-context: one request per context
  std::vector<std::string> choices;   // multiple choice: one request per choice
  // Cloze and target: the continuation; multi-context: the shared one; a needle item scored by
  // niah.score greedy: " " + its value, teacher-forced.
  std::string target;
  std::vector<int> gold;  // multiple choice and multi-context: the right indices
  std::optional<std::string> delimiter;
  // Generation: the prompt is `context`; right when an answer occurs in the greedy completion
  // (`contains`). An empty list is an unanswerable item (never right). 0 / unset: the task's.
  std::vector<std::string> answers;
  int max_new_tokens = 0;
  std::optional<std::vector<std::string>> stop;
  // Needle-in-a-haystack items (generated, model/tasks/niah.h): where the result's breakdown
  // puts them. `answers` are the values to find.
  struct NiahTag {
    std::string variant;
    int length = 0;
    int depth = 0;  // percent, of the first asked needle
  };
  std::optional<NiahTag> niah;

  bool multiple_choice() const { return form == TaskForm::kMultipleChoice; }
  // One request per choice or context; cloze and target items have one, generation items none
  // (they are decoded, not scored by likelihood).
  int num_requests() const;
  // The context and continuation strings of request r (the continuation with the delimiter).
  const std::string& RequestContext(int r) const;
  std::string RequestContinuation(int r) const;
  // The text whose characters and bytes acc_norm and acc_bytes count for request r: the choice
  // as written (without the delimiter).
  const std::string& NormText(int r) const;
  // The item as a few-shot demonstration: its (first gold) context and continuation.
  std::string Demonstration() const;
};

// Parses JSONL `text`; errors name `name` and the line. Blank lines are skipped.
absl::StatusOr<std::vector<TaskExample>> ParseTaskJsonl(absl::string_view text,
                                                        absl::string_view name);

// Reads and parses a task file (at most spec::kMaxTaskFileBytes).
absl::StatusOr<std::vector<TaskExample>> LoadTaskFile(const std::string& path);

}  // namespace mesa::model

#endif  // MESANET_MODEL_TASKS_TASK_FILE_H_
