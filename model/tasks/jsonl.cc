#include "model/tasks/jsonl.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/utf8.h"
#include "spec/tasks.h"

namespace mesa::model {

absl::StatusOr<std::vector<JsonlRow>> ParseJsonlObjects(absl::string_view text,
                                                        absl::string_view name) {
  std::vector<JsonlRow> rows;
  int number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    absl::ConsumeSuffix(&line, "\r");
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    auto error = [&](absl::string_view what) {
      return absl::InvalidArgumentError(absl::StrCat(name, ":", number, ": ", what));
    };
    if (rows.size() >= static_cast<size_t>(spec::kMaxTaskExamples)) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": more than ", spec::kMaxTaskExamples, " items"));
    }
    if (const size_t bad = base::FirstInvalidUtf8(line); bad != line.size()) {
      return error(absl::StrCat("invalid UTF-8 at byte ", bad + 1, " of the line"));
    }
    nlohmann::json root =
        nlohmann::json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
    if (root.is_discarded()) return error("not valid JSON");
    if (!root.is_object()) return error("not a JSON object");
    rows.push_back({number, std::move(root)});
  }
  if (rows.empty()) return absl::InvalidArgumentError(absl::StrCat(name, ": no items"));
  return rows;
}

}  // namespace mesa::model
