#include "model/tasks/task_metrics.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "spec/tasks.h"

namespace mesa::model {
namespace {

int64_t CodePoints(const std::string& text) {
  // Every byte that is not a UTF-8 continuation byte starts a code point.
  return std::count_if(text.begin(), text.end(),
                       [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; });
}

// The request with the largest score(r); exact ties keep the lowest index.
template <typename Score>
int Argmax(int n, Score score) {
  int best = 0;
  for (int r = 1; r < n; ++r) {
    if (score(r) > score(best)) best = r;
  }
  return best;
}

bool IsGold(const TaskExample& item, int r) {
  return std::find(item.gold.begin(), item.gold.end(), r) != item.gold.end();
}

// Item i's score under an accuracy metric (1 right, 0 wrong).
double AccuracyOf(const std::string& metric, const TaskExample& item, const ItemScore& score) {
  const std::vector<RequestScore>& q = score.requests;
  const int n = static_cast<int>(q.size());
  if (item.form == TaskForm::kGeneration) return score.contains;
  if (item.form == TaskForm::kNeedle) {
    return metric == "match_any" ? double{score.match_any} : score.match_all;
  }
  if (item.form == TaskForm::kCloze || item.form == TaskForm::kTarget) return q[0].greedy;
  if (metric == "exact_match") {
    return std::any_of(item.gold.begin(), item.gold.end(), [&](int g) { return q[g].greedy; });
  }
  int pick = 0;
  if (metric == "acc") {
    pick = Argmax(n, [&](int r) { return q[r].loglikelihood; });
  } else if (metric == "acc_norm") {
    pick = Argmax(n, [&](int r) {
      return q[r].loglikelihood / std::max<int64_t>(1, CodePoints(item.NormText(r)));
    });
  } else if (metric == "acc_bytes") {
    pick = Argmax(n, [&](int r) {
      return q[r].loglikelihood / std::max<size_t>(1, item.NormText(r).size());
    });
  } else {  // acc_tok
    pick = Argmax(n, [&](int r) { return q[r].loglikelihood / std::max<int64_t>(1, q[r].tokens); });
  }
  return IsGold(item, pick);
}

// The mean of x and lm-eval's mean_stderr: sqrt(Σ(x − x̄)² / (n − 1)) / sqrt(n).
MetricValue MeanOf(const std::string& name, const std::vector<double>& x) {
  MetricValue m;
  m.name = name;
  m.count = static_cast<int64_t>(x.size());
  if (x.empty()) return m;
  double sum = 0;
  for (double v : x) sum += v;
  m.value = sum / static_cast<double>(x.size());
  if (x.size() >= 2) {
    double squares = 0;
    for (double v : x) squares += (v - m.value) * (v - m.value);
    m.stderr_value = std::sqrt(squares / static_cast<double>(x.size() - 1)) /
                     std::sqrt(static_cast<double>(x.size()));
    m.stderr_method = "mean";
  }
  return m;
}

}  // namespace

bool ContainsAnswer(const std::string& output, const std::vector<std::string>& answers) {
  const std::string text = absl::AsciiStrToLower(output);
  return std::any_of(answers.begin(), answers.end(), [&](const std::string& answer) {
    return absl::StrContains(text, absl::AsciiStrToLower(answer));
  });
}

namespace {

// The breakdown of needle items (RULER's tables): cells in order of first appearance.
std::vector<NiahCellValue> NiahCells(const std::vector<TaskExample>& items,
                                     const std::vector<ItemScore>& scores) {
  std::vector<NiahCellValue> cells;
  auto add = [&](const std::string& variant, int length, int decile, const ItemScore& s) {
    auto cell = std::find_if(cells.begin(), cells.end(), [&](const NiahCellValue& c) {
      return c.variant == variant && c.length == length && c.depth_decile == decile;
    });
    if (cell == cells.end()) {
      cells.push_back({variant, length, decile});
      cell = cells.end() - 1;
    }
    cell->match_all += s.match_all;  // sums until the division below
    cell->match_any += s.match_any;
    ++cell->count;
  };
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].niah || scores[i].skipped) continue;
    const TaskExample::NiahTag& tag = *items[i].niah;
    add(tag.variant, tag.length, -1, scores[i]);
    add("", tag.length, std::min(9, tag.depth / 10), scores[i]);
  }
  for (NiahCellValue& c : cells) {
    c.match_all /= static_cast<double>(c.count);
    c.match_any /= static_cast<double>(c.count);
  }
  // Per length, the mean over variants of the variant means (every variant weighs the same).
  std::vector<NiahCellValue> per_length;
  for (const NiahCellValue& c : cells) {
    if (c.variant.empty()) continue;
    auto at = std::find_if(per_length.begin(), per_length.end(),
                           [&](const NiahCellValue& p) { return p.length == c.length; });
    if (at == per_length.end()) {
      per_length.push_back({"", c.length, -1});
      at = per_length.end() - 1;
    }
    at->match_all += c.match_all;
    at->match_any += c.match_any;
    at->count += 1;  // variants, until the division below
  }
  for (NiahCellValue& p : per_length) {
    p.match_all /= static_cast<double>(p.count);
    p.match_any /= static_cast<double>(p.count);
    p.count = 0;
    for (const NiahCellValue& c : cells) {
      if (!c.variant.empty() && c.length == p.length) p.count += c.count;
    }
    cells.push_back(p);
  }
  return cells;
}

}  // namespace

std::vector<std::string> DefaultTaskMetrics(const std::vector<TaskExample>& items) {
  std::vector<std::string> out;
  for (const char* metric : spec::kTaskMetrics) {
    if (std::any_of(items.begin(), items.end(), [&](const TaskExample& e) {
          return spec::TaskMetricApplies(metric, e.form);
        })) {
      out.emplace_back(metric);
    }
  }
  return out;
}

absl::StatusOr<TaskMetrics> ComputeTaskMetrics(const std::vector<TaskExample>& items,
                                               const std::vector<ItemScore>& scores,
                                               const std::vector<std::string>& metrics) {
  if (items.size() != scores.size()) {
    return absl::InternalError(
        absl::StrCat(scores.size(), " item scores for ", items.size(), " items"));
  }
  TaskMetrics out;
  out.items = static_cast<int64_t>(items.size());
  std::vector<double> accuracy, accuracy_norm;
  for (size_t i = 0; i < items.size(); ++i) {
    const ItemScore& s = scores[i];
    out.truncated += s.truncated;
    out.skipped += s.skipped;
    out.boundary_merges += s.boundary_merge;
    out.legacy_norm = out.legacy_norm || (items[i].multiple_choice() && !items[i].delimiter);
    if (s.skipped) continue;
    if (s.requests.size() != static_cast<size_t>(items[i].num_requests())) {
      return absl::InternalError(absl::StrCat("item ", i, ": ", s.requests.size(),
                                              " request scores for ", items[i].num_requests(),
                                              " requests"));
    }
    ++out.scored;
    accuracy.push_back(AccuracyOf("acc", items[i], s));
    accuracy_norm.push_back(
        AccuracyOf(items[i].multiple_choice() ? "acc_norm" : "acc", items[i], s));
  }
  out.niah_cells = NiahCells(items, scores);
  out.accuracy = MeanOf("acc", accuracy).value;
  out.accuracy_norm = MeanOf("acc_norm", accuracy_norm).value;
  const std::vector<std::string> wanted = metrics.empty() ? DefaultTaskMetrics(items) : metrics;
  for (const std::string& metric : wanted) {
    std::vector<double> x;  // per-item scores (accuracies) or log-likelihoods (cloze)
    int64_t tokens = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      if (scores[i].skipped || !spec::TaskMetricApplies(metric, items[i].form)) continue;
      if (metric == "target_ppl" || metric == "target_nll_per_token") {
        x.push_back(scores[i].requests[0].loglikelihood);
        tokens += scores[i].requests[0].tokens;
      } else {
        x.push_back(AccuracyOf(metric, items[i], scores[i]));
      }
    }
    if (x.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "metric ", metric, ": no scored item gives it (", out.scored, " of ", out.items,
          " items scored; acc_norm, acc_bytes, acc_tok and exact_match need choices, "
          "target_ppl and target_nll_per_token cloze items)"));
    }
    MetricValue m = MeanOf(metric, x);
    if (metric == "target_ppl") {
      // exp of the mean negative log-likelihood over items; delta-method error ppl·sd(LL)/√n.
      m.value = std::exp(-m.value);
      m.stderr_value *= m.value;
      if (!m.stderr_method.empty()) m.stderr_method = "delta";
    } else if (metric == "target_nll_per_token") {
      double sum = 0;
      for (double v : x) sum += v;
      m.value = -sum / static_cast<double>(std::max<int64_t>(1, tokens));
      m.stderr_value = 0;
      m.stderr_method.clear();
    }
    out.metrics.push_back(std::move(m));
  }
  return out;
}

MetricValue AverageOfMetrics(const std::string& name, const std::vector<MetricValue>& members) {
  MetricValue m;
  m.name = name;
  if (members.empty()) return m;
  double sum = 0, squares = 0;
  bool every_stderr = true;
  for (const MetricValue& v : members) {
    sum += v.value;
    squares += v.stderr_value * v.stderr_value;
    m.count += v.count;
    every_stderr = every_stderr && !v.stderr_method.empty();
  }
  const double k = static_cast<double>(members.size());
  m.value = sum / k;
  if (every_stderr) {
    m.stderr_value = std::sqrt(squares) / k;
    m.stderr_method = "mean";
  }
  return m;
}

}  // namespace mesa::model
