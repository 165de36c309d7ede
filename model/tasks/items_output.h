// Per-item records of a scored task as JSON Lines (eval.items_output; docs/evaluation.md
// "Per-item records"): what each item was, how each request scored, what each metric made of it
// and what was decoded, for error analysis outside the service. The result keeps the metrics
// only; these files hold the rest.
#ifndef MESANET_MODEL_TASKS_ITEMS_OUTPUT_H_
#define MESANET_MODEL_TASKS_ITEMS_OUTPUT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "model/tasks/task_file.h"
#include "model/tasks/task_scoring.h"

namespace mesa::model {

// One JSON object per line for every item `score` holds for this job (TaskScore::in_job), in
// index order: index, line, id, form, skipped, truncated, per request its log-likelihood,
// tokens and greedy flag, the right requests, a decoded item's answers and completion, and
// per metric of `metrics` its score and, for choices, the request it picks. Texts that are not
// valid UTF-8 (a completion cut inside a character) have the bad bytes replaced by U+FFFD.
std::string ItemsJsonl(const std::vector<TaskExample>& examples, const TaskScore& score,
                       const std::vector<std::string>& metrics);

// ItemsJsonl written atomically to `path` (its directory is created).
absl::Status WriteItemsFile(const std::string& path, const std::vector<TaskExample>& examples,
                            const TaskScore& score, const std::vector<std::string>& metrics);

}  // namespace mesa::model

#endif  // MESANET_MODEL_TASKS_ITEMS_OUTPUT_H_
