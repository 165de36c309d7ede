// Preemption (docs/coordinator.md "Preemption"): after a scheduling pass, the first pending job
// (in scheduling order) of a queue whose policy is lower_priority stops the fewest running jobs of
// strictly lower priority whose resources make room for it. The victims checkpoint and stop
// through the path `mesactl drain --evict` takes (a cancellation to their workers, STOPPED, then
// rescheduled without using a retry: Job.evictions); the freed resources go to the scheduling
// order, where the preemptor now leads. One preemption at a time: none starts while an earlier
// one's victims are still stopping, so a slow checkpoint is never answered with more victims.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/coordinator.h"
#include "coordinator/coordinator_internal.h"
#include "coordinator/state_machine.h"

namespace mesa::coordinator {

void Coordinator::PreemptForPendingLocked() {
  if (!preempting_.empty()) return;  // earlier victims still stopping
  JobEntry* preemptor = nullptr;
  const QueuePreemption* policy = nullptr;
  for (const std::string& id : scheduler_.PendingInOrder()) {
    JobEntry* e = FindJob(id);
    if (e == nullptr || !e->loaded) continue;
    auto it = options_.preemption.find(e->row.queue);
    if (it != options_.preemption.end() && it->second.lower_priority) {
      preemptor = e;
      policy = &it->second;
      break;
    }
  }
  if (preemptor == nullptr) return;
  // A job held back by a GPU quota would stay pending however much is freed: stopping others for
  // it would only repeat.
  if (!QuotaHoldReason(*preemptor).empty()) return;
  // Candidates: placed attempts of lower priority, lowest priority first, then the newest
  // submission first (the least work lost for the same priority).
  std::vector<JobEntry*> candidates;
  absl::flat_hash_set<const JobEntry*> seen;
  for (const auto& [id, w] : workers_) {
    for (const std::string& job_id : w->jobs) {
      JobEntry* e = FindJob(job_id);
      if (e == nullptr || !seen.insert(e).second || !e->loaded || !IsActive(e->row.state) ||
          IsPending(e->row.state) || e->placement.shares.empty() || !e->row.cancel_reason.empty() ||
          e->row.priority >= preemptor->row.priority) {
        continue;
      }
      candidates.push_back(e);
    }
  }
  if (candidates.empty()) return;
  std::stable_sort(candidates.begin(), candidates.end(), [](const JobEntry* a, const JobEntry* b) {
    return a->row.priority != b->row.priority ? a->row.priority < b->row.priority
                                              : a->row.num > b->row.num;
  });
  std::vector<const Placement*> placements;
  for (const JobEntry* e : candidates) placements.push_back(&e->placement);
  const std::vector<int> victims =
      scheduler_.PreemptionVictims(internal::DemandOf(preemptor->job.spec()), placements);
  if (victims.empty()) return;
  const std::string reason =
      absl::StrCat("preempted by ", preemptor->row.id, " (priority ", preemptor->row.priority,
                   ", queue ", preemptor->row.queue, ")");
  WriteBatch batch;
  std::vector<JobEntry*> touched;
  for (int i : victims) {
    JobEntry* e = candidates[i];
    e->preempted_by = preemptor->row.id;
    preempting_.insert(e->row.id);
    AppendNoteEvent(e,
                    absl::StrCat(reason, ": checkpointing and stopping",
                                 policy->grace > absl::ZeroDuration()
                                     ? absl::StrCat(" (SIGKILL after ",
                                                    absl::FormatDuration(policy->grace), ")")
                                     : ""),
                    &batch);
    bool undelivered = true;
    for (const WorkerShare& s : e->placement.shares) {
      auto w = workers_.find(s.worker_id);
      if (w == workers_.end()) continue;
      if (!WithdrawAssignments(w->second.get(), e->row.id)) {
        undelivered = false;
        PushCancellation(w->second.get(), e->row.id, e->job.attempts(), reason, policy->grace);
      }
    }
    // Never handed out to any worker: nothing to stop, reschedule now.
    if (undelivered) FailAttemptInfra(e, reason, "", &batch, /*evicted=*/true);
    touched.push_back(e);
  }
  {
    std::vector<std::string> ids;
    for (int i : victims) ids.push_back(candidates[i]->row.id);
    AppendNoteEvent(
        preemptor,
        absl::StrCat("preempting ", absl::StrJoin(ids, ", "), " (lower priority) to make room"),
        &batch);
    touched.push_back(preemptor);
  }
  Commit(std::move(batch), touched);
}

}  // namespace mesa::coordinator
