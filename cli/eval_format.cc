#include "cli/eval_format.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cli/format.h"

namespace mesa::cli {
namespace {

using ::mesa::v1::DatasetResult;

bool HasCurves(const DatasetResult& d) {
  return d.nll_at_position_size() > 0 && d.nll_at_position_size() == d.mean_nll_so_far_size() &&
         d.nll_at_position_size() == d.count_at_position_size();
}

const DatasetResult* FindDataset(const mesa::v1::JobResult& r, const std::string& name) {
  for (const DatasetResult& d : r.datasets()) {
    if (d.name() == name) return &d;
  }
  return nullptr;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> EvalResultFields(const mesa::v1::JobResult& r) {
  std::vector<std::pair<std::string, std::string>> out;
  if (r.datasets_size() > 1) {
    out.emplace_back("Average",
                     absl::StrFormat("loss %.4f, ppl %.3f over %d datasets", r.average_loss(),
                                     r.average_perplexity(), r.datasets_size()));
  }
  for (const DatasetResult& d : r.datasets()) {
    std::string line = absl::StrFormat(
        "seq_len %d: loss %.4f, ppl %.3f, %s tokens in %s sequences, mean CG steps %.2f",
        d.seq_len(), d.loss(), d.perplexity(), FormatCount(static_cast<double>(d.tokens())),
        FormatCount(static_cast<double>(d.sequences())), d.cg_steps_mean());
    // Synthetic tasks (no shards) are scored by accuracy on their answers.
    if (d.val_path().empty()) absl::StrAppendFormat(&line, ", accuracy %.4f", d.accuracy());
    if (HasCurves(d)) {
      absl::StrAppendFormat(&line, "; per-position curve of %d positions (NLL_0 %.3f, NLL_%d %.3f)",
                            d.nll_at_position_size(), d.nll_at_position(0),
                            d.nll_at_position_size() - 1,
                            d.nll_at_position(d.nll_at_position_size() - 1));
    }
    out.emplace_back(absl::StrCat("Dataset ", d.name()), line);
  }
  if (r.has_cg() && !r.cg().cg_mode().empty()) {
    const mesa::v1::CgStats& cg = r.cg();
    out.emplace_back("CG", cg.cg_tol() > 0
                               ? absl::StrFormat("tolerance %g (max %d steps): mean %.2f steps",
                                                 cg.cg_tol(), cg.cg_max_steps(), cg.cg_steps_mean())
                               : absl::StrFormat("fixed %d steps: mean %.2f steps",
                                                 cg.cg_max_steps(), cg.cg_steps_mean()));
  }
  for (const mesa::v1::LayerInternals& layer : r.internals()) {
    std::string line =
        absl::StrFormat("%s, mean CG steps %.2f", layer.mixer(), layer.cg_steps_mean());
    for (const mesa::v1::HeadInternals& h : layer.heads()) {
      absl::StrAppendFormat(&line, "; head %d λ %.3g..%.3g (mean %.3g)", h.head(), h.lambda_min(),
                            h.lambda_max(), h.lambda_mean());
      if (h.gamma_max() > 0) {
        absl::StrAppendFormat(&line, ", γ %.3f±%.3f, β %.3f±%.3f", h.gamma_mean(), h.gamma_std(),
                              h.beta_mean(), h.beta_std());
      }
      if (h.cg_steps_mean() > 0) absl::StrAppendFormat(&line, ", CG %.2f", h.cg_steps_mean());
      if (h.condition_rows() > 0) {
        absl::StrAppendFormat(&line, ", cond %.3g (%.3g..%.3g)", h.condition_mean(),
                              h.condition_min(), h.condition_max());
      }
    }
    out.emplace_back(absl::StrCat("Layer ", layer.layer()), line);
  }
  for (const mesa::v1::TaskResult& t : r.tasks()) {
    std::string line;
    for (const mesa::v1::MetricValue& m : t.metrics()) {
      absl::StrAppend(&line, line.empty() ? "" : ", ", m.name() == t.primary_metric() ? "*" : "",
                      m.name(), " ", absl::StrFormat("%.4f", m.value()));
      if (!m.stderr_method().empty()) absl::StrAppendFormat(&line, " ±%.4f", m.stderr());
      if (t.fewshot_draws() > 1) absl::StrAppendFormat(&line, " (sd %.4f)", m.draw_std());
    }
    if (t.metrics_size() == 0) {  // a result from before the metric list
      line = absl::StrFormat("acc %.4f, acc_norm %.4f", t.accuracy(), t.accuracy_norm());
    }
    absl::StrAppendFormat(&line, " over %d examples (%d multiple choice", t.examples(),
                          t.multiple_choice());
    if (t.truncated() > 0) absl::StrAppendFormat(&line, ", %d truncated", t.truncated());
    if (t.skipped() > 0) absl::StrAppendFormat(&line, ", %d skipped", t.skipped());
    absl::StrAppendFormat(&line, "), %d-shot", t.num_fewshot());
    if (t.fewshot_draws() > 1) absl::StrAppendFormat(&line, " x %d draws", t.fewshot_draws());
    if (t.cg_steps_mean_prefill() > 0 || t.cg_steps_mean_decode() > 0) {
      absl::StrAppendFormat(&line, ", CG steps %.2f prefill, %.2f decode",
                            t.cg_steps_mean_prefill(), t.cg_steps_mean_decode());
    }
    if (!t.adapter().empty()) absl::StrAppend(&line, ", adapter ", t.adapter());
    out.emplace_back(absl::StrCat("Task ", t.name()), line);
    // Needle-in-a-haystack: match_all per length, the mean over the variants (--json: every cell).
    std::string by_length;
    for (const mesa::v1::NiahCell& c : t.niah_cells()) {
      if (!c.variant().empty() || c.depth_decile() != -1) continue;
      absl::StrAppendFormat(&by_length, "%s%d: %.3f", by_length.empty() ? "" : ", ", c.length(),
                            c.match_all());
    }
    if (!by_length.empty()) {
      out.emplace_back(absl::StrCat("Task ", t.name()),
                       absl::StrCat("match_all by length, mean over variants: ", by_length));
    }
  }
  if (const mesa::v1::AveragedCurve& a = r.averaged_curve(); a.positions_size() > 0) {
    // The curve in brief (--json has it in full): its first and last positions.
    const int last = a.positions_size() - 1;
    out.emplace_back("Averaged curve",
                     absl::StrFormat("mean-so-far perplexity over %s at %d positions: k=%d %.3f, "
                                     "k=%d %.3f",
                                     absl::StrJoin(a.datasets(), ", "), a.positions_size(),
                                     a.positions(0), a.mean_so_far_perplexity(0), a.positions(last),
                                     a.mean_so_far_perplexity(last)));
  }
  for (const mesa::v1::TaskGroupResult& g : r.task_groups()) {
    out.emplace_back(absl::StrCat("Group ", g.name()),
                     absl::StrFormat("%.4f ±%.4f, the mean of %s", g.value(), g.stderr(),
                                     absl::StrJoin(g.members(), ", ")));
  }
  for (int i = 0; i < r.cg_sweep_size(); ++i) {
    const mesa::v1::CgSweepPoint& p = r.cg_sweep(i);
    std::string line =
        p.cg_tol() > 0
            ? absl::StrFormat("tolerance %g (max %d): loss %.4f, ppl %.3f, mean CG steps %.2f",
                              p.cg_tol(), p.cg_max_steps(), p.val_loss(), p.val_perplexity(),
                              p.cg_steps_mean())
            : absl::StrFormat("fixed %d: loss %.4f, ppl %.3f, mean CG steps %.2f", p.cg_max_steps(),
                              p.val_loss(), p.val_perplexity(), p.cg_steps_mean());
    if (const int n = p.cg_steps_at_position_size(); n > 0) {
      // The curve in brief (--json has it in full): its ends and where it peaks.
      const auto& curve = p.cg_steps_at_position();
      const int peak =
          static_cast<int>(std::max_element(curve.begin(), curve.end()) - curve.begin());
      absl::StrAppendFormat(&line, "; by position (%d): k=0 %.2f, k=%d %.2f, max %.2f at k=%d", n,
                            curve[0], n - 1, curve[n - 1], curve[peak], peak);
    }
    out.emplace_back(absl::StrCat("CG sweep ", i), line);
  }
  return out;
}

absl::StatusOr<mesa::v1::NllComparison> CompareNll(const mesa::v1::Job& a, const mesa::v1::Job& b) {
  for (const mesa::v1::Job* job : {&a, &b}) {
    const auto& datasets = job->result().datasets();
    if (std::none_of(datasets.begin(), datasets.end(), HasCurves)) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", job->id(),
                       " has no per-position curves (an EVAL job run with eval.per_position: "
                       "true has them)"));
    }
  }
  mesa::v1::NllComparison out;
  out.set_job_a(a.id());
  out.set_job_b(b.id());
  for (const DatasetResult& da : a.result().datasets()) {
    const DatasetResult* db = FindDataset(b.result(), da.name());
    if (db == nullptr || !HasCurves(da) || !HasCurves(*db)) continue;
    if (!da.bin_first_position().empty() || !db->bin_first_position().empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("dataset ", da.name(),
                       ": binned curves (eval.curve_bins_per_octave) are not compared "
                       "per position; evaluate both jobs without binning"));
    }
    mesa::v1::DatasetComparison& c = *out.add_datasets();
    c.set_name(da.name());
    c.set_delta_loss(da.loss() - db->loss());
    const int n = std::min(da.nll_at_position_size(), db->nll_at_position_size());
    for (int k = 0; k < n; ++k) {
      if (da.count_at_position(k) == 0 || db->count_at_position(k) == 0) continue;
      c.add_positions(k);
      c.add_delta_nll(da.nll_at_position(k) - db->nll_at_position(k));
      c.add_delta_mean_nll_so_far(da.mean_nll_so_far(k) - db->mean_nll_so_far(k));
      c.add_nll_a(da.nll_at_position(k));
      c.add_nll_b(db->nll_at_position(k));
    }
  }
  if (out.datasets().empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("jobs ", a.id(), " and ", b.id(),
                     " have no dataset in common with per-position curves (datasets are matched "
                     "by name)"));
  }
  return out;
}

std::string FormatNllComparison(const mesa::v1::NllComparison& comparison) {
  std::string out;
  for (const mesa::v1::DatasetComparison& c : comparison.datasets()) {
    absl::StrAppendFormat(&out,
                          "Dataset %s: ΔNLL = NLL(%s) - NLL(%s); Δloss %+.4f over all tokens\n",
                          c.name(), comparison.job_a(), comparison.job_b(), c.delta_loss());
    std::vector<std::vector<std::string>> rows;
    for (int i = 0; i < c.positions_size(); ++i) {
      rows.push_back({absl::StrCat(c.positions(i)), absl::StrFormat("%.4f", c.nll_a(i)),
                      absl::StrFormat("%.4f", c.nll_b(i)), absl::StrFormat("%+.4f", c.delta_nll(i)),
                      absl::StrFormat("%+.4f", c.delta_mean_nll_so_far(i))});
    }
    out += FormatTable({"POSITION", "NLL_A", "NLL_B", "DELTA_NLL", "DELTA_MEAN_SO_FAR"}, rows);
  }
  return out;
}

}  // namespace mesa::cli
