// JSONL reading shared by task files and the benchmark adapters: one JSON object per non-blank
// line, valid UTF-8, at most spec::kMaxTaskExamples of them; errors name the file and the line.
#ifndef MESANET_MODEL_TASKS_JSONL_H_
#define MESANET_MODEL_TASKS_JSONL_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace mesa::model {

struct JsonlRow {
  int line = 0;  // 1-based
  nlohmann::json object;
};

absl::StatusOr<std::vector<JsonlRow>> ParseJsonlObjects(absl::string_view text,
                                                        absl::string_view name);

}  // namespace mesa::model

#endif  // MESANET_MODEL_TASKS_JSONL_H_
