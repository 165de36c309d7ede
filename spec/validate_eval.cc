#include "spec/validate_eval.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "spec/array_jobs.h"
#include "spec/curve_bins.h"
#include "spec/mixers.h"
#include "spec/tasks.h"
#include "spec/validate_job_spec.h"

namespace mesa::spec {

void CheckResultName(const std::string& at, const std::string& name,
                     std::vector<std::string>& names, Problems& p) {
  if (!IsDatasetName(name)) {
    p.Add(absl::StrCat(at, ".name"),
          absl::StrCat("must be 1 to 63 of [a-z0-9_.-], starting with a letter or digit, got \"",
                       name.substr(0, 64), "\""));
  } else if (std::find(names.begin(), names.end(), name) != names.end()) {
    p.Add(absl::StrCat(at, ".name"), absl::StrCat("\"", name, "\" is used twice"));
  }
  names.push_back(name);
}

namespace {

using ::mesa::v1::JobSpec;

// eval.cg_sweep: evaluation only, Mesa layers only, bounded.
void CheckCgSweep(const JobSpec& spec, bool eval, Problems& p) {
  const auto& sweep = spec.eval().cg_sweep();
  if (!spec.eval().has_cg_sweep()) return;
  if (!eval) {
    p.Add("eval.cg_sweep", "applies only to evaluation");
    return;
  }
  if (sweep.fixed_steps_size() + sweep.tolerances_size() == 0 ||
      sweep.fixed_steps_size() + sweep.tolerances_size() > kMaxCgSweepSettings) {
    p.Add("eval.cg_sweep", absl::StrCat("1 to ", kMaxCgSweepSettings, " settings, got ",
                                        sweep.fixed_steps_size() + sweep.tolerances_size()));
  }
  for (int i = 0; i < sweep.fixed_steps_size(); ++i) {
    p.Range(absl::StrCat("eval.cg_sweep.fixed_steps[", i, "]"), sweep.fixed_steps(i), 0,
            kernels::kMaxCgSteps);
  }
  for (int i = 0; i < sweep.tolerances_size(); ++i) {
    if (!(sweep.tolerances(i) > 0 && sweep.tolerances(i) <= 1)) {
      p.Add(absl::StrCat("eval.cg_sweep.tolerances[", i, "]"),
            absl::StrCat("must be in (0, 1], got ", sweep.tolerances(i)));
    }
  }
  p.Range("eval.cg_sweep.max_steps", sweep.max_steps(), 0, kernels::kMaxCgSteps);
  bool any_mesa = false;
  for (const std::string& mixer : LayerMixers(spec.model())) {
    const MixerTraits* traits = FindMixer(mixer);
    any_mesa |= traits != nullptr && traits->solves_with_cg;
  }
  if (!any_mesa) p.Add("eval.cg_sweep", "applies only to models with \"mesa\" layers");
}

// eval.datasets: evaluation only, named uniquely, bounded; with eval.per_position the curves of
// all datasets together are bounded too.
void CheckEvalDatasets(const JobSpec& spec, bool eval, Problems& p) {
  const auto& e = spec.eval();
  if (e.internals() && !eval) p.Add("eval.internals", "applies only to evaluation");
  const int64_t internals = int64_t{spec.model().n_layers()} * spec.model().n_heads();
  if (e.internals() && eval && internals > kMaxInternalsEntries) {
    p.Add("eval.internals",
          absl::StrCat("reports one entry per layer x head, at most ", kMaxInternalsEntries,
                       " (to fit one event line); model.n_layers x model.n_heads = ",
                       spec.model().n_layers(), " x ", spec.model().n_heads(), " = ", internals));
  }
  if (e.datasets_size() > 0 && !eval) {
    p.Add("eval.datasets", "applies only to evaluation");
    return;
  }
  if (e.datasets_size() > 0 && !spec.data().val_path().empty()) {
    p.Add("eval.datasets",
          "set eval.datasets or data.val_path, not both (list the validation set as a dataset)");
  }
  if (e.datasets_size() > kMaxEvalDatasets) {
    p.Add("eval.datasets",
          absl::StrCat("at most ", kMaxEvalDatasets, " datasets, got ", e.datasets_size()));
  }
  // eval.curve_bins_per_octave: each dataset's curves have a value per bin instead of position.
  p.Range("eval.curve_bins_per_octave", e.curve_bins_per_octave(), 0, kMaxCurveBinsPerOctave);
  if (e.curve_bins_per_octave() > 0 && !e.per_position()) {
    p.Add("eval.curve_bins_per_octave", "needs eval.per_position (the curves it bins)");
  }
  const int bins = std::clamp(e.curve_bins_per_octave(), 0, kMaxCurveBinsPerOctave);
  auto curve_entries = [bins](int64_t seq_len) -> int64_t {
    if (bins == 0 || seq_len <= 0 || seq_len > kMaxSeqLen) return seq_len;
    return static_cast<int64_t>(CurveBins(static_cast<int>(seq_len), bins).size());
  };
  int64_t positions = 0;
  std::vector<std::string> names;
  for (int i = 0; i < e.datasets_size(); ++i) {
    const mesa::v1::EvalDataset& d = e.datasets(i);
    const std::string at = absl::StrCat("eval.datasets[", i, "]");
    CheckResultName(at, d.name(), names, p);
    p.OneOf(absl::StrCat(at, ".windows"), d.windows(), {"", "packed", "documents"});
    if (d.val_path().empty()) p.Add(absl::StrCat(at, ".val_path"), "required");
    p.MaxLen(absl::StrCat(at, ".val_path"), d.val_path(), kMaxPathLength);
    p.Range(absl::StrCat(at, ".seq_len"), d.seq_len(), 0, kMaxSeqLen);
    // Under context parallelism every dataset is sliced like the training sequences.
    if (spec.training().context_parallel() > 1 && d.seq_len() > 0) {
      CheckContextSlices(absl::StrCat(at, ".seq_len"), d.seq_len(),
                         spec.training().context_parallel(), p);
    }
    positions += curve_entries(d.seq_len() > 0 ? d.seq_len() : spec.data().seq_len());
  }
  if (e.datasets_size() == 0) positions = curve_entries(spec.data().seq_len());
  // eval.average_curves: named datasets, each once, whose curves exist.
  if (e.average_curves_size() > 0 && !e.per_position()) {
    p.Add("eval.average_curves", "needs eval.per_position (the curves it averages)");
  }
  for (int i = 0; i < e.average_curves_size(); ++i) {
    const std::string& name = e.average_curves(i);
    const std::string at = absl::StrCat("eval.average_curves[", i, "]");
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      p.Add(at, absl::StrCat("\"", name.substr(0, 64), "\" names no eval.datasets entry"));
    } else if (std::find(e.average_curves().begin(), e.average_curves().begin() + i, name) !=
               e.average_curves().begin() + i) {
      p.Add(at, absl::StrCat("\"", name, "\" is listed twice"));
    }
  }
  // Each tolerance of the CG sweep adds a curve of mean CG steps over the first dataset.
  const int64_t first_seq_len = e.datasets_size() > 0 && e.datasets(0).seq_len() > 0
                                    ? e.datasets(0).seq_len()
                                    : spec.data().seq_len();
  positions += int64_t{e.cg_sweep().tolerances_size()} * first_seq_len;
  if (eval && e.per_position() && positions > kMaxEvalCurvePositions) {
    p.Add("eval.per_position",
          absl::StrCat("the curves of all datasets and of the CG sweep's tolerances together may "
                       "have at most ",
                       kMaxEvalCurvePositions,
                       " positions (the sum of the datasets' seq_len, or their bins with "
                       "eval.curve_bins_per_octave, and the first one's seq_len for each "
                       "tolerance), got ",
                       positions));
  }
}

// eval.shard: a share of an evaluation's task items (an array job's shards set it).
void CheckEvalShard(const JobSpec& spec, bool eval, Problems& p) {
  if (!spec.eval().has_shard()) return;
  const mesa::v1::EvalShard& shard = spec.eval().shard();
  if (!eval) p.Add("eval.shard", "applies only to evaluation");
  if (spec.eval().tasks_size() == 0) p.Add("eval.shard", "needs eval.tasks to share");
  p.Range("eval.shard.count", shard.count(), 0, kMaxArrayShards);
  if (shard.count() > 1) {
    p.Range("eval.shard.index", shard.index(), 0, shard.count() - 1);
  } else if (shard.index() != 0) {
    p.Add("eval.shard.index", "must be 0 without a count above 1");
  }
}

// eval.tasks: evaluation only, named uniquely, bounded; the sweep and the internals need a
// validation set to run on.
void CheckEvalTasks(const JobSpec& spec, bool eval, Problems& p) {
  const auto& e = spec.eval();
  if (e.task_groups_size() > 0 && e.tasks_size() == 0) {
    p.Add("eval.task_groups", "needs eval.tasks to average");
  }
  if (e.items_output() && e.tasks_size() == 0) {
    p.Add("eval.items_output", "needs eval.tasks (it writes their per-item records)");
  }
  if (e.tasks_size() == 0) return;
  if (!eval) {
    p.Add("eval.tasks", "applies only to evaluation");
    return;
  }
  if (e.tasks_size() > kMaxEvalTasks) {
    p.Add("eval.tasks", absl::StrCat("at most ", kMaxEvalTasks, " tasks, got ", e.tasks_size()));
  }
  const bool validation_set =
      !spec.data().val_path().empty() || e.datasets_size() > 0 || spec.data().has_synthetic();
  if (!validation_set && e.has_cg_sweep()) {
    p.Add("eval.cg_sweep", "needs a validation set (data.val_path or eval.datasets)");
  }
  if (!validation_set && e.internals()) {
    p.Add("eval.internals", "needs a validation set (data.val_path or eval.datasets)");
  }
  std::vector<std::string> names;
  for (int i = 0; i < e.tasks_size(); ++i) {
    const mesa::v1::EvalTask& t = e.tasks(i);
    const std::string at = absl::StrCat("eval.tasks[", i, "]");
    CheckResultName(at, t.name(), names, p);
    if (t.path().empty() && !t.has_niah()) {
      p.Add(absl::StrCat(at, ".path"), "required (or niah, for generated items)");
    }
    p.MaxLen(absl::StrCat(at, ".path"), t.path(), kMaxPathLength);
    p.MaxLen(absl::StrCat(at, ".fewshot_path"), t.fewshot_path(), kMaxPathLength);
    p.Range(absl::StrCat(at, ".num_fewshot"), t.num_fewshot(), 0, kMaxTaskFewshot);
    for (const std::string& problem : EvalTaskProblems(t, spec.data().seq_len())) {
      const size_t colon = problem.find(':');
      p.Add(absl::StrCat(at, ".", problem.substr(0, colon)), problem.substr(colon + 2));
    }
  }
  // Groups: named like tasks (and apart from them), each member a task, none twice.
  if (e.task_groups_size() > kMaxTaskGroups) {
    p.Add("eval.task_groups",
          absl::StrCat("at most ", kMaxTaskGroups, " groups, got ", e.task_groups_size()));
  }
  const std::vector<std::string> task_names = names;
  for (int i = 0; i < e.task_groups_size(); ++i) {
    const mesa::v1::EvalTaskGroup& g = e.task_groups(i);
    const std::string at = absl::StrCat("eval.task_groups[", i, "]");
    CheckResultName(at, g.name(), names, p);
    if (g.tasks_size() == 0) p.Add(absl::StrCat(at, ".tasks"), "required (the tasks to average)");
    for (int j = 0; j < g.tasks_size(); ++j) {
      const std::string member = absl::StrCat(at, ".tasks[", j, "]");
      if (std::find(task_names.begin(), task_names.end(), g.tasks(j)) == task_names.end()) {
        p.Add(member, absl::StrCat("\"", g.tasks(j).substr(0, 64), "\" names no eval.tasks entry"));
      } else if (std::find(g.tasks().begin(), g.tasks().begin() + j, g.tasks(j)) !=
                 g.tasks().begin() + j) {
        p.Add(member, absl::StrCat("\"", g.tasks(j), "\" is listed twice"));
      }
    }
  }
}

}  // namespace

void CheckEvalSection(const JobSpec& spec, bool eval, Problems& p) {
  CheckCgSweep(spec, eval, p);
  CheckEvalDatasets(spec, eval, p);
  CheckEvalTasks(spec, eval, p);
  CheckEvalShard(spec, eval, p);
}

}  // namespace mesa::spec
