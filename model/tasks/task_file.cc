#include "model/tasks/task_file.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "model/tasks/jsonl.h"
#include "nlohmann/json.hpp"
#include "spec/generation.h"
#include "spec/tasks.h"

namespace mesa::model {
namespace {

using json = nlohmann::json;

constexpr const char* kKeys[] = {
    "id",        "context", "contexts", "choices", "continuation",   "target", "gold",
    "delimiter", "score",   "prompt",   "answers", "max_new_tokens", "stop"};

// A non-empty array of strings (choices, contexts), at most kMaxTaskChoices of them.
absl::StatusOr<std::vector<std::string>> StringList(const json& root, const char* key,
                                                    bool allow_empty_strings) {
  const json& list = root.at(key);
  if (!list.is_array() || list.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(key, ": must be a non-empty array"));
  }
  if (list.size() > static_cast<size_t>(spec::kMaxTaskChoices)) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, ": ", list.size(), " of them, at most ", spec::kMaxTaskChoices));
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < list.size(); ++i) {
    if (!list[i].is_string() || (!allow_empty_strings && list[i].get<std::string>().empty())) {
      return absl::InvalidArgumentError(absl::StrCat(
          key, "[", i, "]: must be a", allow_empty_strings ? "" : " non-empty", " string"));
    }
    out.push_back(list[i].get<std::string>());
  }
  return out;
}

// gold: an index of `n` requests, or a non-empty list of distinct ones (any of them is right).
absl::StatusOr<std::vector<int>> GoldIndices(const json& root, size_t n) {
  auto gold = root.find("gold");
  if (gold == root.end()) return absl::InvalidArgumentError("gold: missing");
  std::vector<int64_t> values;
  if (gold->is_number_integer()) {
    values.push_back(gold->get<int64_t>());
  } else if (gold->is_array() && !gold->empty()) {
    for (const json& g : *gold) {
      if (!g.is_number_integer()) break;
      values.push_back(g.get<int64_t>());
    }
    if (values.size() != gold->size()) values.clear();
  }
  if (values.empty()) {
    return absl::InvalidArgumentError("gold: must be an integer or a non-empty list of integers");
  }
  std::vector<int> out;
  for (int64_t g : values) {
    if (g < 0 || g >= static_cast<int64_t>(n)) {
      return absl::InvalidArgumentError(
          absl::StrCat("gold: ", g, " is not an index of the ", n, " choices (0..", n - 1, ")"));
    }
    if (std::find(out.begin(), out.end(), g) != out.end()) {
      return absl::InvalidArgumentError(absl::StrCat("gold: ", g, " is listed twice"));
    }
    out.push_back(static_cast<int>(g));
  }
  return out;
}

// {"prompt", "answers", "max_new_tokens"?, "stop"?}: decoded greedily, scored by `contains`.
absl::Status ParseGeneration(const json& root, TaskExample& example) {
  for (const char* key : {"context", "gold", "delimiter", "score"}) {
    if (root.contains(key))
      return absl::InvalidArgumentError(absl::StrCat(key, ": not with prompt"));
  }
  example.form = TaskForm::kGeneration;
  const json& prompt = root.at("prompt");
  if (!prompt.is_string() || prompt.get<std::string>().empty()) {
    return absl::InvalidArgumentError("prompt: must be a non-empty string");
  }
  example.context = prompt.get<std::string>();
  auto answers = root.find("answers");
  if (answers == root.end() || !answers->is_array()) {
    return absl::InvalidArgumentError("answers: missing or not an array (empty: unanswerable)");
  }
  if (!answers->empty()) {
    absl::StatusOr<std::vector<std::string>> list = StringList(root, "answers", false);
    if (!list.ok()) return list.status();
    example.answers = *std::move(list);
  }
  if (auto n = root.find("max_new_tokens"); n != root.end()) {
    if (!n->is_number_integer() || n->get<int64_t>() < 1 ||
        n->get<int64_t>() > spec::kMaxNewTokens) {
      return absl::InvalidArgumentError(
          absl::StrCat("max_new_tokens: must be an integer from 1 to ", spec::kMaxNewTokens));
    }
    example.max_new_tokens = static_cast<int>(n->get<int64_t>());
  }
  if (root.contains("stop")) {
    const json& stop = root.at("stop");
    std::vector<std::string> list;
    if (!stop.is_array() || stop.size() > static_cast<size_t>(spec::kMaxStopSequences)) {
      return absl::InvalidArgumentError(
          absl::StrCat("stop: must be an array of at most ", spec::kMaxStopSequences, " strings"));
    }
    for (const json& s : stop) {
      if (!s.is_string() || s.get<std::string>().empty() ||
          s.get<std::string>().size() > static_cast<size_t>(spec::kMaxStopSequenceBytes)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "stop: every entry must be a string of 1 to ", spec::kMaxStopSequenceBytes, " bytes"));
      }
      list.push_back(s.get<std::string>());
    }
    example.stop = std::move(list);
  }
  return absl::OkStatus();
}

absl::Status ParseItem(const json& root, TaskExample& example) {
  for (const auto& [key, value] : root.items()) {
    if (std::find_if(std::begin(kKeys), std::end(kKeys), [&](const char* k) { return key == k; }) ==
        std::end(kKeys)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown key \"", key,
          "\" (expected context with choices and gold, contexts with continuation and gold, or "
          "context with target, or prompt with answers; optional id, delimiter, score, "
          "max_new_tokens, "
          "stop)"));
    }
  }
  auto text = [&](const char* key, bool required, bool non_empty) -> absl::StatusOr<std::string> {
    auto it = root.find(key);
    if (it == root.end()) {
      if (required) return absl::InvalidArgumentError(absl::StrCat(key, ": missing"));
      return std::string();
    }
    if (!it->is_string() || (non_empty && it->get<std::string>().empty())) {
      return absl::InvalidArgumentError(
          absl::StrCat(key, ": must be a", non_empty ? " non-empty" : "", " string"));
    }
    return it->get<std::string>();
  };
  if (auto id = root.find("id"); id != root.end()) {
    if (id->is_string()) {
      example.id = id->get<std::string>();
    } else if (id->is_number_integer()) {
      example.id = std::to_string(id->get<int64_t>());
    } else {
      return absl::InvalidArgumentError("id: must be a string or an integer");
    }
  }
  if (root.contains("delimiter")) {
    absl::StatusOr<std::string> d = text("delimiter", true, false);
    if (!d.ok()) return d.status();
    example.delimiter = *d;
  }
  const int shapes = root.contains("choices") + root.contains("contexts") +
                     root.contains("target") + root.contains("prompt");
  if (shapes != 1) {
    return absl::InvalidArgumentError(
        "needs exactly one of choices (with context and gold), contexts (with continuation and "
        "gold), target (with context) or prompt (with answers)");
  }
  if (root.contains("prompt")) return ParseGeneration(root, example);
  for (const char* key : {"answers", "max_new_tokens", "stop"}) {
    if (root.contains(key)) {
      return absl::InvalidArgumentError(absl::StrCat(key, ": only with prompt"));
    }
  }
  if (root.contains("score") && !root.contains("target")) {
    return absl::InvalidArgumentError("score: only with target");
  }
  if (root.contains("continuation") && !root.contains("contexts")) {
    return absl::InvalidArgumentError("continuation: only with contexts");
  }
  if (root.contains("contexts")) {
    if (root.contains("context")) return absl::InvalidArgumentError("context: not with contexts");
    example.form = TaskForm::kMultiContext;
    absl::StatusOr<std::vector<std::string>> contexts = StringList(root, "contexts", true);
    if (!contexts.ok()) return contexts.status();
    example.contexts = *std::move(contexts);
    absl::StatusOr<std::string> continuation = text("continuation", true, true);
    if (!continuation.ok()) return continuation.status();
    example.target = *std::move(continuation);
    absl::StatusOr<std::vector<int>> gold = GoldIndices(root, example.contexts.size());
    if (!gold.ok()) return gold.status();
    example.gold = *std::move(gold);
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> context = text("context", true, false);
  if (!context.ok()) return context.status();
  example.context = *std::move(context);
  if (root.contains("target")) {
    if (root.contains("gold")) return absl::InvalidArgumentError("gold: only with choices");
    absl::StatusOr<std::string> target = text("target", true, true);
    if (!target.ok()) return target.status();
    example.target = *std::move(target);
    absl::StatusOr<std::string> score = text("score", false, false);
    if (!score.ok()) return score.status();
    if (!score->empty() && *score != "greedy") {
      return absl::InvalidArgumentError(
          absl::StrCat("score: \"", *score, "\" is not \"greedy\" (leave it out to decode)"));
    }
    example.form = score->empty() ? TaskForm::kTarget : TaskForm::kCloze;
    return absl::OkStatus();
  }
  example.form = TaskForm::kMultipleChoice;
  absl::StatusOr<std::vector<std::string>> choices = StringList(root, "choices", false);
  if (!choices.ok()) return choices.status();
  example.choices = *std::move(choices);
  absl::StatusOr<std::vector<int>> gold = GoldIndices(root, example.choices.size());
  if (!gold.ok()) return gold.status();
  example.gold = *std::move(gold);
  return absl::OkStatus();
}

}  // namespace

int TaskExample::num_requests() const {
  switch (form) {
    case TaskForm::kMultipleChoice:
      return static_cast<int>(choices.size());
    case TaskForm::kMultiContext:
      return static_cast<int>(contexts.size());
    case TaskForm::kGeneration:
    case TaskForm::kNeedle:
      return 0;
    default:
      return 1;
  }
}

const std::string& TaskExample::RequestContext(int r) const {
  return form == TaskForm::kMultiContext ? contexts[r] : context;
}

const std::string& TaskExample::NormText(int r) const {
  return form == TaskForm::kMultipleChoice ? choices[r] : target;
}

std::string TaskExample::RequestContinuation(int r) const {
  return delimiter.value_or("") + NormText(r);
}

std::string TaskExample::Demonstration() const {
  // A generation item shows its first answer after the delimiter (lm-evaluation-harness's
  // default, a space).
  if (form == TaskForm::kGeneration) {
    return absl::StrCat(context, delimiter.value_or(" "), answers.empty() ? "" : answers[0]);
  }
  const int r = gold.empty() ? 0 : gold[0];
  return RequestContext(r) + RequestContinuation(r);
}

absl::StatusOr<std::vector<TaskExample>> ParseTaskJsonl(absl::string_view text,
                                                        absl::string_view name) {
  absl::StatusOr<std::vector<JsonlRow>> rows = ParseJsonlObjects(text, name);
  if (!rows.ok()) return rows.status();
  std::vector<TaskExample> examples(rows->size());
  for (size_t i = 0; i < rows->size(); ++i) {
    examples[i].line = (*rows)[i].line;
    if (absl::Status s = ParseItem((*rows)[i].object, examples[i]); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ":", examples[i].line, ": ", s.message()));
    }
  }
  return examples;
}

absl::StatusOr<std::vector<TaskExample>> LoadTaskFile(const std::string& path) {
  auto text = base::ReadFile(path, spec::kMaxTaskFileBytes);
  if (!text.ok()) return text.status();
  return ParseTaskJsonl(*text, path);
}

}  // namespace mesa::model
