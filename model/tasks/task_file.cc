#include "model/tasks/task_file.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/file_util.h"
#include "base/utf8.h"
#include "nlohmann/json.hpp"
#include "spec/tasks.h"

namespace mesa::model {
namespace {

using json = nlohmann::json;

absl::StatusOr<TaskExample> ParseLine(absl::string_view line, int number, absl::string_view name) {
  auto error = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(name, ":", number, ": ", what));
  };
  if (const size_t bad = base::FirstInvalidUtf8(line); bad != line.size()) {
    return error(absl::StrCat("invalid UTF-8 at byte ", bad + 1, " of the line"));
  }
  const json root = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return error("not valid JSON");
  if (!root.is_object()) return error("not a JSON object");
  TaskExample example;
  example.line = number;
  for (const auto& [key, value] : root.items()) {
    if (key != "context" && key != "choices" && key != "gold" && key != "target") {
      return error(absl::StrCat("unknown key \"", key,
                                "\" (expected context, choices and gold, or context and target)"));
    }
  }
  auto context = root.find("context");
  if (context == root.end() || !context->is_string())
    return error("context: missing or not a string");
  example.context = context->get<std::string>();
  auto choices = root.find("choices");
  auto target = root.find("target");
  if ((choices == root.end()) == (target == root.end())) {
    return error("needs either choices (with gold) or target");
  }
  if (target != root.end()) {
    if (!target->is_string() || target->get<std::string>().empty()) {
      return error("target: must be a non-empty string");
    }
    if (root.contains("gold")) return error("gold: only with choices");
    example.target = target->get<std::string>();
    return example;
  }
  if (!choices->is_array() || choices->empty()) return error("choices: must be a non-empty array");
  if (choices->size() > static_cast<size_t>(spec::kMaxTaskChoices)) {
    return error(
        absl::StrCat("choices: ", choices->size(), " of them, at most ", spec::kMaxTaskChoices));
  }
  for (size_t i = 0; i < choices->size(); ++i) {
    const json& c = (*choices)[i];
    if (!c.is_string() || c.get<std::string>().empty()) {
      return error(absl::StrCat("choices[", i, "]: must be a non-empty string"));
    }
    example.choices.push_back(c.get<std::string>());
  }
  auto gold = root.find("gold");
  if (gold == root.end() || !gold->is_number_integer()) {
    return error("gold: missing or not an integer");
  }
  const int64_t g = gold->get<int64_t>();
  if (g < 0 || g >= static_cast<int64_t>(example.choices.size())) {
    return error(absl::StrCat("gold: ", g, " is not an index of choices (0..",
                              example.choices.size() - 1, ")"));
  }
  example.gold = static_cast<int>(g);
  return example;
}

}  // namespace

absl::StatusOr<std::vector<TaskExample>> ParseTaskJsonl(absl::string_view text,
                                                        absl::string_view name) {
  std::vector<TaskExample> examples;
  int number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    absl::ConsumeSuffix(&line, "\r");
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    if (examples.size() >= static_cast<size_t>(spec::kMaxTaskExamples)) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": more than ", spec::kMaxTaskExamples, " examples"));
    }
    auto example = ParseLine(line, number, name);
    if (!example.ok()) return example.status();
    examples.push_back(*std::move(example));
  }
  if (examples.empty()) return absl::InvalidArgumentError(absl::StrCat(name, ": no examples"));
  return examples;
}

absl::StatusOr<std::vector<TaskExample>> LoadTaskFile(const std::string& path) {
  auto text = base::ReadFile(path, spec::kMaxTaskFileBytes);
  if (!text.ok()) return text.status();
  return ParseTaskJsonl(*text, path);
}

}  // namespace mesa::model
