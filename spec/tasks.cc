#include "spec/tasks.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "spec/generation.h"

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

bool TaskScoresBleu(const mesa::v1::EvalTask& task) {
  if (task.metrics_size() > 0) {
    return std::find(task.metrics().begin(), task.metrics().end(), "bleu") != task.metrics().end();
  }
  const TaskAdapter* adapter = FindTaskAdapter(task.adapter());
  return adapter != nullptr && std::string_view(adapter->paper_metric) == "bleu";
}

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
  // A metric must exist, and the adapter's (or the generator's) items must give it (a plain file
  // is checked when read).
  const bool known_form = adapter != nullptr || task.has_niah();
  const TaskItemForm form = task.has_niah()      ? TaskItemForm::kNeedle
                            : adapter != nullptr ? adapter->form
                                                 : TaskItemForm::kMultipleChoice;
  const std::string source = task.has_niah() ? "niah" : task.adapter();
  const char* default_primary = DefaultPrimaryMetric(task.adapter(), task.has_niah());
  auto check_metric = [&](const std::string& field, const std::string& metric) {
    if (!IsTaskMetric(metric)) {
      problems.push_back(absl::StrCat(field, ": ", OneOf(kTaskMetrics, metric)));
    } else if (known_form && !TaskMetricApplies(metric, form)) {
      problems.push_back(absl::StrCat(
          field, ": ", source, " items do not give ", metric,
          " (acc_norm, acc_bytes and acc_tok need choices; exact_match choices or generation "
          "items; target_ppl and target_nll_per_token cloze items; contains and bleu generation "
          "items; match_all and match_any niah items)"));
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
  } else if (task.metrics_size() > 0 && std::find(task.metrics().begin(), task.metrics().end(),
                                                  default_primary) == task.metrics().end()) {
    problems.push_back(absl::StrCat("primary_metric: required when metrics leave out the default (",
                                    default_primary, ")"));
  }
  if (!task.truncation().empty() &&
      std::find(std::begin(kTaskTruncations), std::end(kTaskTruncations), task.truncation()) ==
          std::end(kTaskTruncations)) {
    problems.push_back(
        absl::StrCat("truncation: ", OneOf(kTaskTruncations, task.truncation()), " (or empty)"));
  }
  const bool generation =
      task.has_niah() || (adapter != nullptr && adapter->form == TaskItemForm::kGeneration);
  if (adapter != nullptr && !generation && (task.max_new_tokens() != 0 || task.stop_size() > 0)) {
    problems.push_back(absl::StrCat(task.max_new_tokens() != 0 ? "max_new_tokens" : "stop",
                                    ": applies to generation items; ", task.adapter(),
                                    " items are scored by log-likelihood"));
  }
  if (task.max_new_tokens() < 0 || task.max_new_tokens() > kMaxNewTokens ||
      (seq_len > 0 && task.max_new_tokens() >= seq_len)) {
    problems.push_back(absl::StrCat(
        "max_new_tokens: must be between 0 and ",
        seq_len > 0 ? std::min(seq_len - 1, kMaxNewTokens) : kMaxNewTokens,
        " (below data.seq_len, which holds the prompt too), got ", task.max_new_tokens()));
  }
  if (task.stop_size() > kMaxStopSequences) {
    problems.push_back(
        absl::StrCat("stop: at most ", kMaxStopSequences, " sequences, got ", task.stop_size()));
  }
  for (int i = 0; i < task.stop_size(); ++i) {
    if (task.stop(i).empty() || task.stop(i).size() > static_cast<size_t>(kMaxStopSequenceBytes)) {
      problems.push_back(absl::StrCat("stop[", i, "]: must be 1 to ", kMaxStopSequenceBytes,
                                      " bytes, got ", task.stop(i).size()));
    }
  }
  if (task.has_niah()) {
    const mesa::v1::NiahGenerator& g = task.niah();
    if (!task.path().empty()) problems.push_back("niah: generates its items; leave path out");
    if (!task.adapter().empty()) problems.push_back("niah: not with an adapter");
    if (g.variants_size() == 0) problems.push_back("niah.variants: required");
    bool text = false;
    for (int i = 0; i < g.variants_size(); ++i) {
      const std::string& v = g.variants(i);
      if (std::find(std::begin(kNiahVariants), std::end(kNiahVariants), v) ==
          std::end(kNiahVariants)) {
        problems.push_back(absl::StrCat("niah.variants[", i, "]: ", OneOf(kNiahVariants, v)));
      } else if (std::find(g.variants().begin(), g.variants().begin() + i, v) !=
                 g.variants().begin() + i) {
        problems.push_back(absl::StrCat("niah.variants[", i, "]: \"", v, "\" is listed twice"));
      }
      text = text || (v != "single_1" && v != "multikey_2" && v != "multikey_3");
    }
    if (text && g.haystack_path().empty()) {
      problems.push_back(
          "niah.haystack_path: required by the text-haystack variants (single_2, single_3, "
          "multikey_1, multivalue, multiquery): a UTF-8 file of natural text");
    }
    if (!g.score().empty() && std::find(std::begin(kNiahScores), std::end(kNiahScores),
                                        g.score()) == std::end(kNiahScores)) {
      problems.push_back(
          absl::StrCat("niah.score: ", OneOf(kNiahScores, g.score()), " (or empty)"));
    } else if (g.score() == "greedy") {
      for (const std::string& v : g.variants()) {
        if (v == "multivalue" || v == "multiquery") {
          problems.push_back(absl::StrCat("niah.score: greedy checks one asked value; ", v,
                                          " asks several (use decode)"));
        }
      }
    }
    if (g.lengths_size() == 0) problems.push_back("niah.lengths: required");
    for (int i = 0; i < g.lengths_size(); ++i) {
      if (g.lengths(i) < 1 || g.lengths(i) > kMaxNiahLength) {
        problems.push_back(absl::StrCat("niah.lengths[", i, "]: must be between 1 and ",
                                        kMaxNiahLength, ", got ", g.lengths(i)));
      }
    }
    if (g.items() < 0 || g.items() > kMaxNiahItems) {
      problems.push_back(
          absl::StrCat("niah.items: must be between 0 and ", kMaxNiahItems, ", got ", g.items()));
    } else if (int64_t{g.variants_size()} * g.lengths_size() *
                   (g.items() > 0 ? g.items() : kDefaultNiahItems) >
               kMaxTaskExamples) {
      problems.push_back(
          absl::StrCat("niah: variants x lengths x items exceeds ", kMaxTaskExamples, " items"));
    }
  }
  // Few-shot: demonstrations need answers to show (not generated needles), draws need
  // demonstrations to vary.
  if (task.fewshot_draws() < 0 || task.fewshot_draws() > kMaxFewshotDraws) {
    problems.push_back(absl::StrCat("fewshot_draws: must be between 0 and ", kMaxFewshotDraws,
                                    ", got ", task.fewshot_draws()));
  } else if (task.fewshot_draws() > 1 && task.num_fewshot() == 0) {
    problems.push_back(
        "fewshot_draws: needs num_fewshot > 0 (draws differ in their demonstrations)");
  }
  if (!task.fewshot_path().empty() && task.num_fewshot() == 0) {
    problems.push_back("fewshot_path: needs num_fewshot > 0");
  }
  if (task.has_fewshot_seed() && task.num_fewshot() == 0) {
    problems.push_back("fewshot_seed: needs num_fewshot > 0");
  }
  if (task.has_niah() && task.num_fewshot() > 0) {
    problems.push_back("num_fewshot: generated niah items take no demonstrations");
  }
  if (task.max_length() < 0 || (seq_len > 0 && task.max_length() > seq_len)) {
    problems.push_back(absl::StrCat("max_length: must be between 0 and data.seq_len (", seq_len,
                                    "), got ", task.max_length()));
  }
  return problems;
}

}  // namespace mesa::spec
