// Array jobs: a parent that expands into child EVAL jobs (spec/array_jobs.h) and follows them.
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/array_results.h"
#include "coordinator/coordinator.h"
#include "coordinator/coordinator_internal.h"
#include "coordinator/state_machine.h"
#include "spec/array_jobs.h"

namespace mesa::coordinator {

using ::mesa::v1::JobState;

absl::StatusOr<Coordinator::JobEntry*> Coordinator::SubmitArrayLocked(
    const mesa::v1::SubmitJobRequest& request, const std::string& owner, bool admin,
    uint64_t* ticket) {
  absl::StatusOr<std::vector<spec::ArrayChildSpec>> children = spec::ExpandArray(request.spec());
  if (!children.ok()) return children.status();
  JobEntry* parent = NewJobLocked(request.spec(), request.client_job_id(), owner, admin);
  WriteBatch batch;
  Transition(parent, mesa::v1::JOB_STATE_QUEUED,
             absl::StrCat("submitted: an array of ", children->size(), " jobs"), &batch);
  ArrayEntry& entry = arrays_[parent->row.id];
  entry.max_parallel = request.spec().array().max_parallel();
  mesa::v1::ArrayResult& table = *parent->job.mutable_result()->mutable_array();
  std::vector<JobEntry*> touched = {parent};
  for (spec::ArrayChildSpec& child : *children) {
    (*child.spec.mutable_labels())[spec::kArrayLabel] = parent->row.id;
    JobEntry* c = NewJobLocked(child.spec, /*client_job_id=*/"", owner, admin);
    mesa::v1::ArrayChild& listed = *table.add_children();
    listed.set_job_id(c->row.id);
    listed.set_checkpoint_index(child.checkpoint_index);
    listed.set_cg_index(child.cg_index);
    listed.set_shard(child.shard);
    entry.children.push_back(c->row.id);
    Transition(c, mesa::v1::JOB_STATE_QUEUED, absl::StrCat("submitted by array ", parent->row.id),
               &batch);
    array_parent_[c->row.id] = parent->row.id;
    PutJob(c, &batch);
    touched.push_back(c);
  }
  PutJob(parent, &batch);
  *ticket = Commit(std::move(batch), touched);
  for (size_t k = 1; k < touched.size(); ++k) {
    if (entry.max_parallel == 0 || static_cast<int>(k) <= entry.max_parallel) {
      Enqueue(touched[k]);
    } else {
      entry.held.push_back(touched[k]->row.id);
    }
  }
  return parent;
}

void Coordinator::NoteArrayChild(JobEntry* child, JobState to, WriteBatch* batch) {
  auto link = array_parent_.find(child->row.id);
  auto array = arrays_.find(link->second);
  JobEntry* parent = FindJob(link->second);
  if (array == arrays_.end() || parent == nullptr) return;
  // The children's states are their own rows' (the table gets them when the parent ends): the
  // parent is written only when it changes.
  if (to == mesa::v1::JOB_STATE_SCHEDULED && parent->row.state == mesa::v1::JOB_STATE_QUEUED) {
    Transition(parent, mesa::v1::JOB_STATE_SCHEDULED, absl::StrCat(child->row.id, " placed"),
               batch);
    Transition(parent, mesa::v1::JOB_STATE_RUNNING, "running its children", batch);
    PutJob(parent, batch);
    also_touched_.push_back(parent);
  }
  if (!IsTerminal(to)) return;
  ArrayEntry& entry = array->second;
  // One ended: the next held child is admitted (none once the parent is being cancelled).
  while (parent->row.cancel_reason.empty() && !entry.held.empty()) {
    JobEntry* next = FindJob(entry.held.front());
    entry.held.pop_front();
    if (next != nullptr && IsPending(next->row.state)) {
      Enqueue(next);
      break;
    }
  }
  std::vector<ArrayChildOutcome> outcomes;
  for (const mesa::v1::ArrayChild& listed : parent->job.result().array().children()) {
    const JobEntry* c = FindJob(listed.job_id());
    if (c != nullptr && !IsTerminal(c->row.state)) return;  // not the last
    ArrayChildOutcome& o = outcomes.emplace_back();
    o.child = listed;
    if (c != nullptr) o.child.set_state(c->row.state);
  }
  // The last child ended: the parent's table and final state.
  std::vector<std::string> gaps;
  for (ArrayChildOutcome& o : outcomes) {
    absl::StatusOr<JobEntry*> c = FindLoadedJob(o.child.job_id());
    if (!c.ok()) {
      o.failure_reason = "deleted before the array ended";
    } else {
      o.failure_reason = (*c)->job.failure_reason();
      if (o.child.state() == mesa::v1::JOB_STATE_SUCCEEDED) o.result = &(*c)->job.result();
    }
    if (o.child.state() != mesa::v1::JOB_STATE_SUCCEEDED) {
      gaps.push_back(absl::StrCat(o.child.job_id(), " ", ShortStateName(o.child.state())));
    }
  }
  *parent->job.mutable_result()->mutable_array() = ArrayResultOf(parent->job.spec(), outcomes);
  const mesa::v1::ArrayResult& table = parent->job.result().array();
  JobState end = mesa::v1::JOB_STATE_SUCCEEDED;
  std::string message = absl::StrCat("all ", outcomes.size(), " children succeeded");
  if (!parent->row.cancel_reason.empty()) {
    end = mesa::v1::JOB_STATE_CANCELLED;
    message = parent->row.cancel_reason;
    parent->job.set_failure_reason(absl::StrCat("cancelled: ", message));
  } else if (!gaps.empty() || table.missing_size() > 0) {
    end = mesa::v1::JOB_STATE_FAILED;
    message = gaps.empty() ? absl::StrJoin(table.missing(), "; ")
                           : absl::StrCat(gaps.size(), " of ", outcomes.size(),
                                          " children did not succeed: ", absl::StrJoin(gaps, ", "));
    parent->job.set_failure_reason(message);
  }
  if (end != mesa::v1::JOB_STATE_CANCELLED && parent->row.state == mesa::v1::JOB_STATE_QUEUED) {
    // Children that ended without being placed (a restart's retries used up): through RUNNING.
    Transition(parent, mesa::v1::JOB_STATE_SCHEDULED, "its children ended", batch);
    Transition(parent, mesa::v1::JOB_STATE_RUNNING, "its children ended", batch);
  }
  for (const std::string& id : entry.children) array_parent_.erase(id);
  arrays_.erase(array);
  Transition(parent, end, message, batch);
  PutJob(parent, batch);
  also_touched_.push_back(parent);
}

void Coordinator::FillArrayChildStates(mesa::v1::Job* job) {
  if (!job->spec().has_array() || IsTerminal(job->state())) return;
  for (mesa::v1::ArrayChild& listed : *job->mutable_result()->mutable_array()->mutable_children()) {
    if (const JobEntry* c = FindJob(listed.job_id()); c != nullptr) listed.set_state(c->row.state);
  }
}

void Coordinator::CancelArrayLocked(JobEntry* parent, const std::string& reason,
                                    WriteBatch* batch) {
  auto array = arrays_.find(parent->row.id);
  if (array == arrays_.end() || !parent->row.cancel_reason.empty()) return;
  parent->row.cancel_reason = reason;
  array->second.held.clear();
  const std::vector<std::string> children = array->second.children;  // the last may erase it
  for (const std::string& id : children) {
    JobEntry* c = FindJob(id);
    if (c != nullptr && !IsTerminal(c->row.state)) CancelLocked(c, reason, batch);
  }
  if (!IsTerminal(parent->row.state)) {
    AppendNoteEvent(parent, absl::StrCat("cancellation requested: ", reason), batch);
  }
}

void Coordinator::LoadArraysLocked() {
  for (auto& [id, e] : jobs_) {
    if (!e->loaded || !e->job.spec().has_array() || IsTerminal(e->row.state)) continue;
    ArrayEntry& entry = arrays_[id];
    entry.max_parallel = e->job.spec().array().max_parallel();
    int admitted = 0;
    for (const mesa::v1::ArrayChild& listed : e->job.result().array().children()) {
      entry.children.push_back(listed.job_id());
      array_parent_[listed.job_id()] = id;
      const JobEntry* c = FindJob(listed.job_id());
      if (c != nullptr && IsActive(c->row.state)) ++admitted;
    }
    // Pending children in order, up to max_parallel with the running ones; the rest wait again.
    for (const std::string& child : entry.children) {
      const JobEntry* c = FindJob(child);
      if (c == nullptr || !IsPending(c->row.state)) continue;
      if (entry.max_parallel == 0 || admitted < entry.max_parallel) {
        ++admitted;
      } else {
        scheduler_.RemovePending(child);
        entry.held.push_back(child);
      }
    }
  }
}

}  // namespace mesa::coordinator
