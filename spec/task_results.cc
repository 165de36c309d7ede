#include "spec/task_results.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "spec/bleu.h"
#include "spec/tasks.h"

namespace mesa::spec {
namespace {

using ::mesa::v1::MetricValue;
using ::mesa::v1::TaskItemRecord;

TaskItemForm FormOf(const TaskItemRecord& r) { return static_cast<TaskItemForm>(r.form()); }

// The request with the largest score(r); exact ties keep the lowest index.
template <typename Score>
int Argmax(int n, Score score) {
  int best = 0;
  for (int r = 1; r < n; ++r) {
    if (score(r) > score(best)) best = r;
  }
  return best;
}

bool IsGold(const TaskItemRecord& item, int r) {
  return std::find(item.gold().begin(), item.gold().end(), r) != item.gold().end();
}

}  // namespace

double ItemMetricScore(const std::string& metric, const TaskItemRecord& item, int* prediction) {
  if (prediction != nullptr) *prediction = -1;
  const int n = item.loglikelihood_size();
  const TaskItemForm form = FormOf(item);
  if (form == TaskItemForm::kGeneration) {
    return metric == "exact_match" ? double{item.exact()} : item.contains();
  }
  if (form == TaskItemForm::kNeedle) {
    return metric == "match_any" ? double{item.match_any()} : item.match_all();
  }
  if (form == TaskItemForm::kCloze || form == TaskItemForm::kTarget) return item.greedy(0);
  if (metric == "exact_match") {
    return std::any_of(item.gold().begin(), item.gold().end(),
                       [&](int g) { return item.greedy(g); });
  }
  auto ll = [&](int r) { return item.loglikelihood(r); };
  int pick = 0;
  if (metric == "acc") {
    pick = Argmax(n, ll);
  } else if (metric == "acc_norm") {
    pick = Argmax(n, [&](int r) { return ll(r) / std::max<int64_t>(1, item.norm_chars(r)); });
  } else if (metric == "acc_bytes") {
    pick = Argmax(n, [&](int r) { return ll(r) / std::max<int64_t>(1, item.norm_bytes(r)); });
  } else {  // acc_tok
    pick = Argmax(n, [&](int r) { return ll(r) / std::max<int64_t>(1, item.tokens(r)); });
  }
  if (prediction != nullptr) *prediction = pick;
  return IsGold(item, pick);
}

namespace {

// The mean of x and lm-eval's mean_stderr: sqrt(Σ(x − x̄)² / (n − 1)) / sqrt(n).
MetricValue MeanOf(const std::string& name, const std::vector<double>& x) {
  MetricValue m;
  m.set_name(name);
  m.set_count(static_cast<int64_t>(x.size()));
  if (x.empty()) return m;
  double sum = 0;
  for (double v : x) sum += v;
  const double mean = sum / static_cast<double>(x.size());
  m.set_value(mean);
  if (x.size() >= 2) {
    double squares = 0;
    for (double v : x) squares += (v - mean) * (v - mean);
    m.set_stderr(std::sqrt(squares / static_cast<double>(x.size() - 1)) /
                 std::sqrt(static_cast<double>(x.size())));
    m.set_stderr_method("mean");
  }
  return m;
}

// The breakdown of needle items (RULER's tables): per variant x length and per length x depth
// decile in order of first appearance, then per length the mean over variants of their means.
void AddNiahCells(const std::vector<TaskItemRecord>& records, mesa::v1::TaskResult* out) {
  struct Cell {
    std::string variant;
    int length = 0;
    int decile = -1;
    double match_all = 0, match_any = 0;
    int64_t count = 0;
  };
  std::vector<Cell> cells;
  auto add = [&](const std::string& variant, int length, int decile, const TaskItemRecord& r) {
    auto cell = std::find_if(cells.begin(), cells.end(), [&](const Cell& c) {
      return c.variant == variant && c.length == length && c.decile == decile;
    });
    if (cell == cells.end()) {
      cells.push_back({variant, length, decile});
      cell = cells.end() - 1;
    }
    cell->match_all += r.match_all();  // sums until the division below
    cell->match_any += r.match_any();
    ++cell->count;
  };
  for (const TaskItemRecord& r : records) {
    if (FormOf(r) != TaskItemForm::kNeedle || r.niah_variant().empty() || r.skipped()) continue;
    add(r.niah_variant(), r.niah_length(), -1, r);
    add("", r.niah_length(), std::min(9, r.niah_depth() / 10), r);
  }
  for (Cell& c : cells) {
    c.match_all /= static_cast<double>(c.count);
    c.match_any /= static_cast<double>(c.count);
  }
  // Per length, the mean over variants of the variant means (every variant weighs the same).
  std::vector<Cell> per_length;
  for (const Cell& c : cells) {
    if (c.variant.empty()) continue;
    auto at = std::find_if(per_length.begin(), per_length.end(),
                           [&](const Cell& p) { return p.length == c.length; });
    if (at == per_length.end()) {
      per_length.push_back({"", c.length, -1});
      at = per_length.end() - 1;
    }
    at->match_all += c.match_all;
    at->match_any += c.match_any;
    at->count += 1;  // variants, until the division below
  }
  for (Cell& p : per_length) {
    p.match_all /= static_cast<double>(p.count);
    p.match_any /= static_cast<double>(p.count);
    p.count = 0;
    for (const Cell& c : cells) {
      if (!c.variant.empty() && c.length == p.length) p.count += c.count;
    }
    cells.push_back(p);
  }
  for (const Cell& c : cells) {
    mesa::v1::NiahCell& cell = *out->add_niah_cells();
    cell.set_variant(c.variant);
    cell.set_length(c.length);
    cell.set_depth_decile(c.decile);
    cell.set_match_all(c.match_all);
    cell.set_match_any(c.match_any);
    cell.set_count(c.count);
  }
}

// What is wrong with a scored item's record, empty when nothing: its requests and facts must
// agree with its form (records cross process boundaries from shard jobs).
std::string RecordProblem(const TaskItemRecord& r) {
  if (r.form() < 0 || r.form() > static_cast<int>(TaskItemForm::kNeedle)) {
    return absl::StrCat("form ", r.form(), " is unknown");
  }
  const int n = r.loglikelihood_size();
  if (r.tokens_size() != n || r.greedy_size() != n) return "requests of unequal lengths";
  switch (FormOf(r)) {
    case TaskItemForm::kMultipleChoice:
      if (n == 0 || r.norm_chars_size() != n || r.norm_bytes_size() != n) {
        return "choices without their lengths";
      }
      [[fallthrough]];
    case TaskItemForm::kMultiContext:
      if (n == 0 || r.gold().empty()) return "no requests or no right one";
      for (int g : r.gold()) {
        if (g < 0 || g >= n) return absl::StrCat("right request ", g, " of ", n);
      }
      return "";
    case TaskItemForm::kCloze:
    case TaskItemForm::kTarget:
      return n == 1 ? "" : absl::StrCat(n, " requests for one continuation");
    default:
      if (n != 0) return absl::StrCat(n, " requests for a decoded item");
      if (r.bleu_stats_size() > 0 &&
          !BleuStats::FromList({r.bleu_stats().begin(), r.bleu_stats().end()})) {
        return "malformed BLEU statistics";
      }
      return "";
  }
}

}  // namespace

std::vector<std::string> DefaultTaskMetrics(const std::vector<TaskItemRecord>& records) {
  std::vector<std::string> out;
  for (const char* metric : kTaskMetrics) {
    // BLEU only where the items were scored by it (spec::TaskScoresBleu).
    const bool bleu = std::string_view(metric) == "bleu";
    if (std::any_of(records.begin(), records.end(), [&](const TaskItemRecord& r) {
          return TaskMetricApplies(metric, FormOf(r)) && (!bleu || r.bleu_stats_size() > 0);
        })) {
      out.emplace_back(metric);
    }
  }
  return out;
}

absl::Status ComputeTaskMetrics(const std::vector<TaskItemRecord>& records,
                                const std::vector<std::string>& metrics,
                                mesa::v1::TaskResult* out) {
  int64_t scored = 0, truncated = 0, skipped = 0, merges = 0, multiple_choice = 0;
  int64_t cg_tokens_prefill = 0, cg_tokens_decode = 0;
  double cg_steps_prefill = 0, cg_steps_decode = 0;
  bool legacy_norm = false;
  std::vector<double> accuracy, accuracy_norm;
  for (size_t i = 0; i < records.size(); ++i) {
    const TaskItemRecord& r = records[i];
    truncated += r.truncated();
    skipped += r.skipped();
    merges += r.boundary_merge();
    const bool choices = FormOf(r) == TaskItemForm::kMultipleChoice;
    multiple_choice += choices;
    legacy_norm = legacy_norm || (choices && r.without_delimiter());
    // In index order, so the sums are the same wherever the records are merged.
    cg_steps_prefill += r.cg_steps_prefill();
    cg_tokens_prefill += r.cg_tokens_prefill();
    cg_steps_decode += r.cg_steps_decode();
    cg_tokens_decode += r.cg_tokens_decode();
    if (r.skipped()) continue;
    if (const std::string problem = RecordProblem(r); !problem.empty()) {
      return absl::InternalError(absl::StrCat("item ", i, "'s record: ", problem));
    }
    ++scored;
    accuracy.push_back(ItemMetricScore("acc", r));
    accuracy_norm.push_back(ItemMetricScore(choices ? "acc_norm" : "acc", r));
  }
  out->set_examples(static_cast<int64_t>(records.size()));
  out->set_multiple_choice(multiple_choice);
  out->set_items(static_cast<int64_t>(records.size()));
  out->set_scored(scored);
  out->set_truncated(truncated);
  out->set_skipped(skipped);
  out->set_boundary_merges(merges);
  out->set_legacy_norm(legacy_norm);
  out->set_cg_steps_mean_prefill(
      cg_tokens_prefill > 0 ? cg_steps_prefill / static_cast<double>(cg_tokens_prefill) : 0.0);
  out->set_cg_steps_mean_decode(
      cg_tokens_decode > 0 ? cg_steps_decode / static_cast<double>(cg_tokens_decode) : 0.0);
  out->set_accuracy(MeanOf("acc", accuracy).value());
  out->set_accuracy_norm(MeanOf("acc_norm", accuracy_norm).value());
  out->clear_metrics();
  out->clear_niah_cells();
  AddNiahCells(records, out);
  const std::vector<std::string> wanted = metrics.empty() ? DefaultTaskMetrics(records) : metrics;
  for (const std::string& metric : wanted) {
    std::vector<double> x;  // per-item scores (accuracies) or log-likelihoods (cloze)
    int64_t tokens = 0;
    std::vector<BleuStats> segments;
    for (const TaskItemRecord& r : records) {
      if (r.skipped() || !TaskMetricApplies(metric, FormOf(r))) continue;
      if (metric == "bleu") {
        const std::optional<BleuStats> stats =
            BleuStats::FromList({r.bleu_stats().begin(), r.bleu_stats().end()});
        if (!stats) {
          return absl::InvalidArgumentError(
              "metric bleu: the items were not scored by BLEU (list bleu in the task's metrics)");
        }
        segments.push_back(*stats);
        x.push_back(0);  // counts the item
      } else if (metric == "target_ppl" || metric == "target_nll_per_token") {
        x.push_back(r.loglikelihood(0));
        tokens += r.tokens(0);
      } else {
        x.push_back(ItemMetricScore(metric, r));
      }
    }
    if (x.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "metric ", metric, ": no scored item gives it (", scored, " of ", records.size(),
          " items scored; acc_norm, acc_bytes and acc_tok need choices, exact_match choices "
          "or generation items, target_ppl and target_nll_per_token cloze items, contains and "
          "bleu generation items)"));
    }
    MetricValue m = MeanOf(metric, x);
    if (metric == "bleu") {
      // Corpus BLEU of the summed statistics; a seeded bootstrap over segments for its error.
      BleuStats sum;
      for (const BleuStats& s : segments) sum += s;
      m.set_value(CorpusBleu(sum));
      m.clear_stderr();
      m.clear_stderr_method();
      if (segments.size() >= 2) {
        m.set_stderr(BootstrapBleuStderr(segments));
        m.set_stderr_method("bootstrap");
      }
    } else if (metric == "target_ppl") {
      // exp of the mean negative log-likelihood over items; delta-method error ppl·sd(LL)/√n.
      m.set_value(std::exp(-m.value()));
      m.set_stderr(m.stderr() * m.value());
      if (!m.stderr_method().empty()) m.set_stderr_method("delta");
    } else if (metric == "target_nll_per_token") {
      double sum = 0;
      for (double v : x) sum += v;
      m.set_value(-sum / static_cast<double>(std::max<int64_t>(1, tokens)));
      m.clear_stderr();
      m.clear_stderr_method();
    }
    *out->add_metrics() = std::move(m);
  }
  return absl::OkStatus();
}

std::string PrimaryMetricOf(const mesa::v1::EvalTask& task, const mesa::v1::TaskResult& result) {
  if (!task.primary_metric().empty()) return task.primary_metric();
  if (!task.adapter().empty() || task.has_niah()) {
    return DefaultPrimaryMetric(task.adapter(), task.has_niah());
  }
  for (const MetricValue& v : result.metrics()) {
    if (v.name() == "acc") return v.name();
  }
  return result.metrics().empty() ? "acc" : result.metrics(0).name();
}

MetricValue AverageOfMetrics(const std::string& name, const std::vector<MetricValue>& members) {
  MetricValue m;
  m.set_name(name);
  if (members.empty()) return m;
  double sum = 0, squares = 0;
  int64_t count = 0;
  bool every_stderr = true;
  for (const MetricValue& v : members) {
    sum += v.value();
    squares += v.stderr() * v.stderr();
    count += v.count();
    every_stderr = every_stderr && !v.stderr_method().empty();
  }
  const double k = static_cast<double>(members.size());
  m.set_value(sum / k);
  m.set_count(count);
  if (every_stderr) {
    m.set_stderr(std::sqrt(squares) / k);
    m.set_stderr_method("mean");
  }
  return m;
}

absl::StatusOr<mesa::v1::TaskResult> CombineDraws(const std::vector<mesa::v1::TaskResult>& draws) {
  if (draws.empty()) return absl::InvalidArgumentError("no few-shot draws to combine");
  mesa::v1::TaskResult out = draws[0];
  out.clear_draws();
  out.set_fewshot_draws(static_cast<int32_t>(draws.size()));
  const double d = static_cast<double>(draws.size());
  for (size_t k = 1; k < draws.size(); ++k) {
    bool same = draws[k].metrics_size() == out.metrics_size();
    for (int m = 0; same && m < out.metrics_size(); ++m) {
      same = draws[k].metrics(m).name() == out.metrics(m).name();
    }
    if (!same) {
      return absl::InternalError(
          absl::StrCat("task ", out.name(), ": draw ", k, " reports other metrics than draw 0"));
    }
  }
  for (int m = 0; m < out.metrics_size(); ++m) {
    double sum = 0, squared_errors = 0;
    for (const mesa::v1::TaskResult& r : draws) {
      sum += r.metrics(m).value();
      squared_errors += r.metrics(m).stderr() * r.metrics(m).stderr();
    }
    const double mean = sum / d;
    double squares = 0;
    for (const mesa::v1::TaskResult& r : draws) {
      squares += (r.metrics(m).value() - mean) * (r.metrics(m).value() - mean);
    }
    MetricValue& v = *out.mutable_metrics(m);
    v.set_value(mean);
    v.set_draw_std(draws.size() >= 2 ? std::sqrt(squares / (d - 1)) : 0.0);
    if (!v.stderr_method().empty()) {
      v.set_stderr(std::sqrt(squared_errors / d));
      v.set_stderr_method("draws");
    }
  }
  double accuracy = 0, accuracy_norm = 0, cg_prefill = 0, cg_decode = 0;
  for (const mesa::v1::TaskResult& r : draws) {
    accuracy += r.accuracy();
    accuracy_norm += r.accuracy_norm();
    cg_prefill += r.cg_steps_mean_prefill();
    cg_decode += r.cg_steps_mean_decode();
    mesa::v1::TaskResult& draw = *out.add_draws();
    draw = r;
    draw.clear_draws();
  }
  out.set_accuracy(accuracy / d);
  out.set_accuracy_norm(accuracy_norm / d);
  out.set_cg_steps_mean_prefill(cg_prefill / d);
  out.set_cg_steps_mean_decode(cg_decode / d);
  return out;
}

absl::StatusOr<std::vector<mesa::v1::TaskGroupResult>> AverageTaskGroups(
    const mesa::v1::EvalConfig& eval, const std::vector<mesa::v1::TaskResult>& tasks) {
  std::vector<mesa::v1::TaskGroupResult> out;
  for (const mesa::v1::EvalTaskGroup& group : eval.task_groups()) {
    std::vector<MetricValue> members;
    for (const std::string& name : group.tasks()) {
      const auto task =
          std::find_if(tasks.begin(), tasks.end(),
                       [&](const mesa::v1::TaskResult& t) { return t.name() == name; });
      if (task == tasks.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("eval.task_groups (", group.name(), "): no task ", name));
      }
      const auto value =
          std::find_if(task->metrics().begin(), task->metrics().end(),
                       [&](const MetricValue& v) { return v.name() == task->primary_metric(); });
      if (value == task->metrics().end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("eval.task_groups (", group.name(), "): task ", name,
                         " did not report its primary metric ", task->primary_metric(),
                         " (add it to its metrics)"));
      }
      members.push_back(*value);
    }
    const MetricValue average = AverageOfMetrics(group.name(), members);
    mesa::v1::TaskGroupResult& g = out.emplace_back();
    g.set_name(group.name());
    for (const std::string& name : group.tasks()) g.add_members(name);
    g.set_value(average.value());
    g.set_stderr(average.stderr());
  }
  return out;
}

absl::StatusOr<std::vector<TaskItemRecord>> MergeItemRecords(
    int64_t items, const std::vector<mesa::v1::TaskPartial>& partials,
    const std::vector<bool>* expected) {
  int64_t wanted = items;
  if (expected != nullptr) wanted = std::count(expected->begin(), expected->end(), true);
  std::vector<TaskItemRecord> records(items);
  std::vector<bool> seen(items, false);
  int64_t count = 0;
  for (const mesa::v1::TaskPartial& p : partials) {
    if (p.items() != items) {
      return absl::InternalError(absl::StrCat("task ", p.task(), ": a partial of ", p.items(),
                                              " items merged into ", items));
    }
    for (const TaskItemRecord& r : p.records()) {
      if (r.index() < 0 || r.index() >= items || seen[r.index()] ||
          (expected != nullptr && !(*expected)[r.index()])) {
        return absl::InternalError(absl::StrCat("task ", p.task(), ": item record ", r.index(),
                                                " is out of range, repeated or not expected (",
                                                items, " items)"));
      }
      if (r.tokens_size() != r.loglikelihood_size() || r.greedy_size() != r.loglikelihood_size()) {
        return absl::InternalError(
            absl::StrCat("task ", p.task(), ": item record ", r.index(), " is malformed"));
      }
      seen[r.index()] = true;
      records[r.index()] = r;
      ++count;
    }
  }
  if (count != wanted) {
    return absl::InternalError(
        absl::StrCat("task item records: ", count, " of ", wanted, " items arrived"));
  }
  return records;
}

absl::StatusOr<mesa::v1::JobResult> MergeShardResults(
    const mesa::v1::EvalConfig& eval, const std::vector<mesa::v1::JobResult>& shards) {
  mesa::v1::JobResult merged;
  if (shards.empty()) return absl::InvalidArgumentError("no shard results to merge");
  std::vector<mesa::v1::TaskResult> tasks;
  for (const mesa::v1::EvalTask& task : eval.tasks()) {
    auto failed = [&](const absl::Status& s) {
      return absl::Status(s.code(), absl::StrCat("task ", task.name(), ": ", s.message()));
    };
    const mesa::v1::TaskResult* first = nullptr;
    std::vector<mesa::v1::TaskPartial> partials;
    for (size_t k = 0; k < shards.size(); ++k) {
      const auto result =
          std::find_if(shards[k].tasks().begin(), shards[k].tasks().end(),
                       [&](const mesa::v1::TaskResult& t) { return t.name() == task.name(); });
      if (result == shards[k].tasks().end()) {
        return failed(absl::InvalidArgumentError(absl::StrCat("shard ", k, " has no result")));
      }
      if (first == nullptr) {
        first = &*result;
      } else if (result->file_sha256() != first->file_sha256() ||
                 result->items() != first->items()) {
        return failed(absl::InvalidArgumentError(
            absl::StrCat("shard ", k, " scored another file or item list (", result->items(),
                         " items, sha256 ", result->file_sha256(), ", against ", first->items(),
                         " items, sha256 ", first->file_sha256(), ")")));
      }
      for (const mesa::v1::TaskPartial& p : shards[k].task_partials()) {
        if (p.task() == task.name()) partials.push_back(p);
      }
    }
    // Each few-shot draw's records merged and scored apart, then the draws combined.
    const int num_draws = std::max(1, first->fewshot_draws());
    for (const mesa::v1::TaskPartial& p : partials) {
      if (p.draw() < 0 || p.draw() >= num_draws) {
        return failed(absl::InvalidArgumentError(
            absl::StrCat("records of draw ", p.draw(), " for ", num_draws, " draws")));
      }
    }
    std::vector<mesa::v1::TaskResult> draws;
    for (int d = 0; d < num_draws; ++d) {
      std::vector<mesa::v1::TaskPartial> of_draw;
      for (const mesa::v1::TaskPartial& p : partials) {
        if (p.draw() == d) of_draw.push_back(p);
      }
      absl::StatusOr<std::vector<TaskItemRecord>> records =
          MergeItemRecords(first->items(), of_draw);
      if (!records.ok()) {
        return failed(num_draws > 1
                          ? absl::Status(records.status().code(),
                                         absl::StrCat("draw ", d, ": ", records.status().message()))
                          : records.status());
      }
      mesa::v1::TaskResult& result = draws.emplace_back(*first);
      result.clear_draws();
      if (absl::Status s =
              ComputeTaskMetrics(*records, {task.metrics().begin(), task.metrics().end()}, &result);
          !s.ok()) {
        return failed(s);
      }
      result.set_primary_metric(PrimaryMetricOf(task, result));
    }
    if (num_draws == 1) {
      tasks.push_back(std::move(draws[0]));
      continue;
    }
    absl::StatusOr<mesa::v1::TaskResult> combined = CombineDraws(draws);
    if (!combined.ok()) return failed(combined.status());
    tasks.push_back(*std::move(combined));
  }
  absl::StatusOr<std::vector<mesa::v1::TaskGroupResult>> groups = AverageTaskGroups(eval, tasks);
  if (!groups.ok()) return groups.status();
  for (mesa::v1::TaskResult& t : tasks) *merged.add_tasks() = std::move(t);
  for (mesa::v1::TaskGroupResult& g : *groups) *merged.add_task_groups() = std::move(g);
  return merged;
}

}  // namespace mesa::spec
