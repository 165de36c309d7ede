#include "coordinator/array_results.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "coordinator/state_machine.h"
#include "spec/array_jobs.h"
#include "spec/task_results.h"

namespace mesa::coordinator {
namespace {

using ::mesa::v1::ArrayRow;

// The rows of one (checkpoint, setting) cell from its (merged) result.
void AddRows(const mesa::v1::JobResult& result, const ArrayRow& cell, mesa::v1::ArrayResult* out) {
  auto row = [&](const std::string& name, const std::string& kind, const std::string& metric,
                 double value, double stderr_value, int64_t count) {
    ArrayRow& r = *out->add_rows();
    r = cell;
    r.set_name(name);
    r.set_kind(kind);
    r.set_metric(metric);
    r.set_value(value);
    r.set_stderr(stderr_value);
    r.set_count(count);
  };
  for (const mesa::v1::DatasetResult& d : result.datasets()) {
    row(d.name(), "dataset", "perplexity", d.perplexity(), 0, d.tokens());
    row(d.name(), "dataset", "loss", d.loss(), 0, d.tokens());
  }
  for (const mesa::v1::TaskResult& t : result.tasks()) {
    for (const mesa::v1::MetricValue& m : t.metrics()) {
      row(t.name(), "task", m.name(), m.value(), m.stderr(), m.count());
      ArrayRow& r = *out->mutable_rows()->rbegin();
      r.set_cg_steps_mean_prefill(t.cg_steps_mean_prefill());
      r.set_cg_steps_mean_decode(t.cg_steps_mean_decode());
      r.set_draw_std(m.draw_std());
    }
  }
  for (const mesa::v1::TaskGroupResult& g : result.task_groups()) {
    row(g.name(), "group", "mean", g.value(), g.stderr(), g.members_size());
  }
}

}  // namespace

mesa::v1::ArrayResult ArrayResultOf(const mesa::v1::JobSpec& parent,
                                    const std::vector<ArrayChildOutcome>& children) {
  mesa::v1::ArrayResult out;
  const mesa::v1::ArraySpec& array = parent.array();
  // Cells in the product's order, each with its children by shard.
  std::map<std::pair<int, int>, std::vector<const ArrayChildOutcome*>> cells;
  for (const ArrayChildOutcome& c : children) {
    *out.add_children() = c.child;
    cells[{c.child.checkpoint_index(), c.child.cg_index()}].push_back(&c);
  }
  for (auto& [place, shards] : cells) {
    std::sort(shards.begin(), shards.end(),
              [](const ArrayChildOutcome* a, const ArrayChildOutcome* b) {
                return a->child.shard() < b->child.shard();
              });
    const auto [i, j] = place;
    const std::string checkpoint =
        array.checkpoints_size() > i ? array.checkpoints(i) : parent.eval().checkpoint();
    const std::string setting = spec::CgSettingName(array, j);
    const std::string where = absl::StrCat("checkpoint ", checkpoint, ", CG ", setting);
    std::vector<mesa::v1::JobResult> results;
    std::string gap;
    for (const ArrayChildOutcome* c : shards) {
      if (c->child.state() != mesa::v1::JOB_STATE_SUCCEEDED || c->result == nullptr) {
        gap = absl::StrCat(
            where, ": ", c->child.job_id(), " ", ShortStateName(c->child.state()),
            c->failure_reason.empty() ? "" : absl::StrCat(" (", c->failure_reason, ")"));
        break;
      }
      results.push_back(*c->result);
    }
    if (!gap.empty()) {
      out.add_missing(gap);
      continue;
    }
    mesa::v1::JobResult merged = results[0];
    if (results.size() > 1) {
      absl::StatusOr<mesa::v1::JobResult> tasks = spec::MergeShardResults(parent.eval(), results);
      if (!tasks.ok()) {
        out.add_missing(
            absl::StrCat(where, ": the shards do not merge: ", tasks.status().message()));
        continue;
      }
      // Datasets, the CG figures and the checkpoint are shard 0's; the tasks every shard's.
      merged.mutable_tasks()->Swap(tasks->mutable_tasks());
      merged.mutable_task_groups()->Swap(tasks->mutable_task_groups());
      merged.clear_task_partials();
    }
    ArrayRow cell;
    cell.set_checkpoint(merged.checkpoint_path().empty() ? checkpoint : merged.checkpoint_path());
    cell.set_checkpoint_index(i);
    cell.set_cg_setting(setting);
    cell.set_cg_index(j);
    cell.set_cg_steps_mean(merged.cg().cg_steps_mean());
    for (const ArrayChildOutcome* c : shards) cell.add_job_ids(c->child.job_id());
    AddRows(merged, cell, &out);
  }
  return out;
}

}  // namespace mesa::coordinator
