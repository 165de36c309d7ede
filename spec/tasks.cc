#include "spec/tasks.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace mesa::spec {
namespace {

bool IsTaskMetric(std::string_view name) {
  return std::any_of(std::begin(kTaskMetrics), std::end(kTaskMetrics),
                     [&](const char* m) { return name == m; });
}

// "must be one of "a", "b" (...)" for a list of names.
template <typename Names>
std::string OneOf(const Names& names, std::string_view got) {
  std::vector<std::string> quoted;
  for (const auto& n : names) quoted.push_back(absl::StrCat("\"", n, "\""));
  return absl::StrCat("must be one of ", absl::StrJoin(quoted, ", "), ", got \"", std::string(got),
                      "\"");
}

}  // namespace

std::vector<std::string> EvalTaskProblems(const mesa::v1::EvalTask& task, int seq_len) {
  std::vector<std::string> problems;
  const TaskAdapter* adapter = nullptr;
  if (!task.adapter().empty()) {
    adapter = FindTaskAdapter(task.adapter());
    if (adapter == nullptr) {
      std::vector<const char*> names;
      for (const TaskAdapter& a : kTaskAdapters) names.push_back(a.name);
      problems.push_back(absl::StrCat("adapter: ", OneOf(names, task.adapter()), " (or empty)"));
    }
  }
  // A metric must exist, and the adapter's items must give it (a plain file is checked when read).
  auto check_metric = [&](const std::string& field, const std::string& metric) {
    if (!IsTaskMetric(metric)) {
      problems.push_back(absl::StrCat(field, ": ", OneOf(kTaskMetrics, metric)));
    } else if (adapter != nullptr && !TaskMetricApplies(metric, adapter->form)) {
      problems.push_back(absl::StrCat(field, ": ", task.adapter(), " items do not give ", metric,
                                      " (acc_norm, acc_bytes, acc_tok and exact_match need "
                                      "choices; target_ppl and target_nll_per_token cloze items)"));
    }
  };
  for (int i = 0; i < task.metrics_size(); ++i) {
    const std::string field = absl::StrCat("metrics[", i, "]");
    check_metric(field, task.metrics(i));
    for (int j = 0; j < i; ++j) {
      if (task.metrics(j) == task.metrics(i)) {
        problems.push_back(absl::StrCat(field, ": \"", task.metrics(i), "\" is listed twice"));
      }
    }
  }
  if (!task.primary_metric().empty()) {
    check_metric("primary_metric", task.primary_metric());
    if (task.metrics_size() > 0 && std::find(task.metrics().begin(), task.metrics().end(),
                                             task.primary_metric()) == task.metrics().end()) {
      problems.push_back(
          absl::StrCat("primary_metric: \"", task.primary_metric(), "\" is not among metrics"));
    }
  } else if (task.metrics_size() > 0 &&
             std::find(task.metrics().begin(), task.metrics().end(),
                       DefaultPrimaryMetric(task.adapter())) == task.metrics().end()) {
    problems.push_back(absl::StrCat("primary_metric: required when metrics leave out the default (",
                                    DefaultPrimaryMetric(task.adapter()), ")"));
  }
  if (!task.truncation().empty() &&
      std::find(std::begin(kTaskTruncations), std::end(kTaskTruncations), task.truncation()) ==
          std::end(kTaskTruncations)) {
    problems.push_back(
        absl::StrCat("truncation: ", OneOf(kTaskTruncations, task.truncation()), " (or empty)"));
  }
  if (task.max_length() < 0 || (seq_len > 0 && task.max_length() > seq_len)) {
    problems.push_back(absl::StrCat("max_length: must be between 0 and data.seq_len (", seq_len,
                                    "), got ", task.max_length()));
  }
  return problems;
}

}  // namespace mesa::spec
