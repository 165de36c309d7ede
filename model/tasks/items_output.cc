#include "model/tasks/items_output.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "model/tasks/task_metrics.h"
#include "nlohmann/json.hpp"
#include "spec/task_results.h"
#include "spec/tasks.h"

namespace mesa::model {
namespace {

using json = nlohmann::json;

const char* FormName(TaskForm form) {
  switch (form) {
    case TaskForm::kMultipleChoice:
      return "multiple_choice";
    case TaskForm::kMultiContext:
      return "multi_context";
    case TaskForm::kCloze:
      return "cloze";
    case TaskForm::kTarget:
      return "target";
    case TaskForm::kGeneration:
      return "generation";
    case TaskForm::kNeedle:
      return "needle";
  }
  return "unknown";
}

// Metrics with a score per item (the corpus and perplexity metrics have none).
bool PerItem(const std::string& metric) {
  return metric != "bleu" && metric != "target_ppl" && metric != "target_nll_per_token";
}

}  // namespace

std::string ItemsJsonl(const std::vector<TaskExample>& examples, const TaskScore& score,
                       const std::vector<std::string>& metrics) {
  std::string out;
  for (size_t i = 0; i < examples.size(); ++i) {
    if (i < score.in_job.size() && !score.in_job[i]) continue;
    const TaskExample& e = examples[i];
    const ItemScore& s = score.items[i];
    json line = {{"index", i},
                 {"line", e.line},
                 {"form", FormName(e.form)},
                 {"skipped", s.skipped},
                 {"truncated", s.truncated}};
    if (!e.id.empty()) line["id"] = e.id;
    json requests = json::array();
    for (const RequestScore& q : s.requests) {
      requests.push_back(
          {{"loglikelihood", q.loglikelihood}, {"tokens", q.tokens}, {"greedy", q.greedy}});
    }
    line["requests"] = std::move(requests);
    if (!e.gold.empty()) line["gold"] = e.gold;
    const bool decoded = e.form == TaskForm::kGeneration || e.form == TaskForm::kNeedle ||
                         (e.form == TaskForm::kTarget && !score.greedy_text[i].empty());
    if (e.form == TaskForm::kGeneration || e.form == TaskForm::kNeedle) line["answers"] = e.answers;
    if (decoded) line["completion"] = score.greedy_text[i];
    if (!s.bleu_stats.empty()) line["bleu_stats"] = s.bleu_stats;
    if (!s.skipped) {
      const mesa::v1::TaskItemRecord record = ItemRecordOf(static_cast<int64_t>(i), e, s);
      json scores = json::object(), picks = json::object();
      for (const std::string& metric : metrics) {
        if (!PerItem(metric) || !spec::TaskMetricApplies(metric, e.form)) continue;
        int pick = -1;
        scores[metric] = spec::ItemMetricScore(metric, record, &pick);
        if (pick >= 0) picks[metric] = pick;
      }
      line["scores"] = std::move(scores);
      if (!picks.empty()) line["picks"] = std::move(picks);
    }
    absl::StrAppend(&out, line.dump(-1, ' ', false, json::error_handler_t::replace), "\n");
  }
  return out;
}

absl::Status WriteItemsFile(const std::string& path, const std::vector<TaskExample>& examples,
                            const TaskScore& score, const std::vector<std::string>& metrics) {
  std::error_code error;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), error);
  if (error) {
    return absl::FailedPreconditionError(absl::StrCat("cannot create the directory of ", path,
                                                      " for eval.items_output: ", error.message()));
  }
  return base::WriteFileAtomically(path, ItemsJsonl(examples, score, metrics));
}

}  // namespace mesa::model
