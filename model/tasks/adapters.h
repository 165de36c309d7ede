// Benchmark adapters (eval.tasks[].adapter): a user's local JSONL copy of a benchmark's public
// release, with its upstream keys, rendered into task items as lm-evaluation-harness renders them
// (docs/evaluation.md lists the keys and renders; spec::kTaskAdapters names them). Every item
// uses the one-space target delimiter, so acc_norm counts the choice text alone.
#ifndef MESANET_MODEL_TASKS_ADAPTERS_H_
#define MESANET_MODEL_TASKS_ADAPTERS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/tasks/jsonl.h"
#include "model/tasks/task_file.h"

namespace mesa::model {

// Renders `rows` of `adapter` (a name of spec::kTaskAdapters); errors name `name`, the line and
// the key.
absl::StatusOr<std::vector<TaskExample>> AdaptRows(absl::string_view adapter,
                                                   const std::vector<JsonlRow>& rows,
                                                   absl::string_view name);

// Renders the JSONL `text` of a task file named `name`: with an empty adapter as our own item
// forms (ParseTaskJsonl), else through the adapter.
absl::StatusOr<std::vector<TaskExample>> ParseTaskItems(absl::string_view text,
                                                        absl::string_view name,
                                                        absl::string_view adapter);

// Reads `path` (at most spec::kMaxTaskFileBytes) and renders it (ParseTaskItems).
absl::StatusOr<std::vector<TaskExample>> LoadTaskItems(const std::string& path,
                                                       absl::string_view adapter);

// HellaSwag's text cleaning: trimmed, " [title]" turned into ". ", every bracketed group removed,
// double spaces made single (one pass).
std::string HellaswagClean(absl::string_view text);

}  // namespace mesa::model

#endif  // MESANET_MODEL_TASKS_ADAPTERS_H_
