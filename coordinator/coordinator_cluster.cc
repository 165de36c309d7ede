// Cluster operations: listing workers, cordoning (drain / uncordon), a worker's clean
// deregistration and an operator forgetting a decommissioned one; the per-worker metric series.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "coordinator/coordinator.h"
#include "coordinator/coordinator_internal.h"
#include "coordinator/state_machine.h"

namespace mesa::coordinator {
namespace {

// What the attempts placed on a worker hold there.
struct WorkerUse {
  int gpus = 0;
  int cpu_slots = 0;
  int attempts = 0;
};

// What the active attempts in `job_ids` hold on worker `worker_id`; their ids go to `running` if
// not null. `jobs`: the coordinator's jobs_ (a template, so the private entry type is deduced).
template <typename Jobs>
WorkerUse UseOf(const Jobs& jobs, const std::string& worker_id,
                const absl::flat_hash_set<std::string>& job_ids,
                std::vector<std::string>* running) {
  WorkerUse use;
  for (const std::string& job_id : job_ids) {
    auto it = jobs.find(job_id);
    if (it == jobs.end() || !IsActive(it->second->row.state)) continue;
    ++use.attempts;
    if (running != nullptr) running->push_back(job_id);
    for (const WorkerShare& s : it->second->placement.shares) {
      if (s.worker_id != worker_id) continue;
      use.gpus += static_cast<int>(s.gpu_indices.size());
      use.cpu_slots += s.cpu_slots;
    }
  }
  return use;
}

mesa::v1::WorkerState ApiState(int state) {
  switch (state) {
    case 0:
      return mesa::v1::WORKER_STATE_AWAITING;
    case 1:
      return mesa::v1::WORKER_STATE_LIVE;
    case 2:
      return mesa::v1::WORKER_STATE_LOST;
  }
  return mesa::v1::WORKER_STATE_UNSPECIFIED;
}

// Which cordon wins when another is set: an operator's over the stopping agent's over the node's.
int DrainRank(mesa::v1::DrainReason reason) {
  switch (reason) {
    case mesa::v1::DRAIN_REASON_NODE_CORDONED:
      return 1;
    case mesa::v1::DRAIN_REASON_AGENT_STOPPING:
      return 2;
    case mesa::v1::DRAIN_REASON_OPERATOR:
      return 3;
    default:
      return 0;
  }
}

}  // namespace

mesa::v1::WorkerInfo Coordinator::DescribeWorker(const WorkerEntry& w) const {
  mesa::v1::WorkerInfo info;
  info.set_id(w.id);
  info.set_hostname(w.hostname);
  info.set_state(ApiState(static_cast<int>(w.state)));
  info.set_draining(w.drain != mesa::v1::DRAIN_REASON_NONE);
  info.set_drain_reason(w.drain);
  info.set_gpus(w.resources.gpus_size());
  info.set_cpu_slots(w.resources.cpu_slots());
  std::vector<std::string> jobs;
  const WorkerUse use = UseOf(jobs_, w.id, w.jobs, &jobs);
  std::sort(jobs.begin(), jobs.end());
  for (std::string& j : jobs) info.add_running_jobs(std::move(j));
  info.set_free_gpus(std::max(0, info.gpus() - use.gpus));
  info.set_free_cpu_slots(std::max(0, info.cpu_slots() - use.cpu_slots));
  if (w.lease_expiry > absl::UnixEpoch()) {
    internal::SetTime(w.lease_expiry - options_.lease_ttl, info.mutable_last_renewed());
  }
  return info;
}

void Coordinator::UpdateWorkerMetrics() {
  if (metrics_ == nullptr) return;
  int64_t n[3] = {0, 0, 0};
  for (const auto& [id, w] : workers_) {
    ++n[static_cast<int>(w->state)];
    // Runs after every scheduling pass: no protos, no sorting.
    const WorkerUse use = UseOf(jobs_, id, w->jobs, nullptr);
    metrics_->SetWorker(id, {.gpus = w->resources.gpus_size(),
                             .gpus_allocated = use.gpus,
                             .cpu_slots = w->resources.cpu_slots(),
                             .cpu_slots_allocated = use.cpu_slots,
                             .attempts = use.attempts,
                             .live = w->state == WorkerEntry::State::kLive,
                             .draining = w->drain != mesa::v1::DRAIN_REASON_NONE});
  }
  metrics_->SetWorkers("awaiting", n[0]);
  metrics_->SetWorkers("live", n[1]);
  metrics_->SetWorkers("lost", n[2]);
}

absl::StatusOr<mesa::v1::ListWorkersResponse> Coordinator::ListWorkers() {
  absl::MutexLock lock(&mu_);
  std::vector<const WorkerEntry*> sorted;
  for (const auto& [id, w] : workers_) sorted.push_back(w.get());
  std::sort(sorted.begin(), sorted.end(),
            [](const WorkerEntry* a, const WorkerEntry* b) { return a->id < b->id; });
  mesa::v1::ListWorkersResponse out;
  for (const WorkerEntry* w : sorted) *out.add_workers() = DescribeWorker(*w);
  return out;
}

absl::StatusOr<mesa::v1::WorkerInfo> Coordinator::SetWorkerDraining(const std::string& id,
                                                                    bool draining, bool evict,
                                                                    mesa::v1::DrainReason reason) {
  if (evict && !draining) return absl::InvalidArgumentError("evict applies to a drain only");
  if (draining && reason == mesa::v1::DRAIN_REASON_NONE) {
    return absl::InvalidArgumentError("a drain needs a reason");
  }
  mesa::v1::WorkerInfo info;
  uint64_t ticket = 0;
  {
    absl::MutexLock lock(&mu_);
    auto it = workers_.find(id);
    if (it == workers_.end()) {
      return absl::NotFoundError(absl::StrCat("worker \"", id.substr(0, 128), "\" not found"));
    }
    WorkerEntry* w = it->second.get();
    // The agent lifts only its own node cordon; an operator lifts any.
    if (!draining && reason != mesa::v1::DRAIN_REASON_OPERATOR && w->drain != reason) {
      return DescribeWorker(*w);
    }
    if (evict && w->state == WorkerEntry::State::kLive) ticket = EvictAttempts(w);
    const bool was_draining = w->drain != mesa::v1::DRAIN_REASON_NONE;
    if (was_draining != draining && w->state == WorkerEntry::State::kLive) {
      if (draining) {
        // Out of the scheduler: nothing new is placed here. What runs here keeps its attempt; its
        // end releases nothing in the scheduler (shares on unknown workers are skipped).
        scheduler_.RemoveWorker(id);
      } else {
        // Back with its resources, less what the attempts still running here hold.
        std::vector<int> gpus;
        for (const auto& g : w->resources.gpus()) gpus.push_back(g.index());
        scheduler_.UpsertWorker(id, gpus, w->resources.cpu_slots(), w->resources.memory_bytes());
        for (const std::string& job_id : w->jobs) {
          const JobEntry* e = FindJob(job_id);
          if (e == nullptr || !IsActive(e->row.state)) continue;
          for (const WorkerShare& s : e->placement.shares) {
            if (s.worker_id != id) continue;
            Placement just_this;
            just_this.shares.push_back(s);
            scheduler_.Allocate(just_this).IgnoreError();
          }
        }
        KickScheduler();
      }
    }
    // The stronger reason stays (DrainRank): a node's uncordon must not lift an operator's drain
    // nor the drain of an agent that is stopping.
    mesa::v1::DrainReason drain = mesa::v1::DRAIN_REASON_NONE;
    if (draining) drain = DrainRank(reason) >= DrainRank(w->drain) ? reason : w->drain;
    if (w->drain != drain) {
      w->drain = drain;
      if (draining) {
        cordoned_[id] = drain;
      } else {
        cordoned_.erase(id);
      }
      // Stored, so the cordon outlives a restart.
      WriteBatch batch;
      batch.PutWorker(id, w->hostname, w->resources.SerializeAsString(), static_cast<int>(w->state),
                      absl::ToUnixMillis(clock_->Now()), drain);
      ticket = std::max(ticket, Commit(std::move(batch), {}));
    }
    UpdateWorkerMetrics();
    info = DescribeWorker(*w);
  }
  if (ticket != 0) {
    if (absl::Status s = WaitCommitted(ticket); !s.ok()) return s;
  }
  return info;
}

uint64_t Coordinator::EvictAttempts(WorkerEntry* w) {
  const std::string reason =
      absl::StrCat("evicted: worker ", w->id, " is draining (mesactl drain --evict)");
  WriteBatch batch;
  std::vector<JobEntry*> touched;
  std::vector<std::string> jobs(w->jobs.begin(), w->jobs.end());
  for (const std::string& job_id : jobs) {
    JobEntry* e = FindJob(job_id);
    if (e == nullptr || !e->loaded || !IsActive(e->row.state) || !e->row.cancel_reason.empty()) {
      continue;
    }
    e->evicted_from = w->id;
    if (WithdrawAssignments(w, job_id)) {
      // Never handed out: nothing to stop, reschedule now.
      FailAttemptInfra(e, reason, w->id, &batch, /*evicted=*/true);
      touched.push_back(e);
    } else {
      PushCancellation(w, job_id, e->job.attempts(), reason);
    }
  }
  if (touched.empty()) return 0;
  return Commit(std::move(batch), touched);
}

uint64_t Coordinator::RemoveWorkerLocked(WorkerEntry* w, const std::string& why) {
  const std::string id = w->id;
  WriteBatch batch;
  std::vector<JobEntry*> touched;
  std::vector<std::string> jobs(w->jobs.begin(), w->jobs.end());
  for (const std::string& job_id : jobs) {
    JobEntry* e = FindJob(job_id);
    if (e == nullptr || !IsActive(e->row.state)) continue;
    FailAttemptInfra(e, why, id, &batch);
    touched.push_back(e);
  }
  scheduler_.RemoveWorker(id);
  batch.DeleteWorker(id);
  cordoned_.erase(id);
  workers_.erase(id);
  if (metrics_ != nullptr) metrics_->RemoveWorker(id);
  UpdateWorkerMetrics();
  KickScheduler();
  return Commit(std::move(batch), touched);
}

absl::Status Coordinator::DeregisterWorker(const mesa::v1::DeregisterWorkerRequest& request) {
  uint64_t ticket;
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<WorkerEntry*> leased = LeasedWorker(request.worker_id(), request.lease_id());
    if (!leased.ok()) return leased.status();
    WorkerEntry* w = *leased;
    // A heartbeat of this worker still waiting answers now; the entry goes once none holds it.
    w->leaving = true;
    w->cv.SignalAll();
    const std::string id = w->id;
    auto unheld = [this, &id]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      auto it = workers_.find(id);
      return it == workers_.end() || it->second->waiters == 0;
    };
    mu_.AwaitWithTimeout(absl::Condition(&unheld), absl::Seconds(5));
    leased = LeasedWorker(request.worker_id(), request.lease_id());
    if (!leased.ok()) return leased.status();
    w = *leased;
    if (w->waiters > 0) {
      w->leaving = false;
      return absl::UnavailableError("a heartbeat of this worker is still in flight; retry");
    }
    ticket = RemoveWorkerLocked(w, absl::StrCat("worker ", id, " deregistered"));
  }
  return WaitCommitted(ticket);
}

absl::StatusOr<mesa::v1::WorkerInfo> Coordinator::DrainSelf(
    const mesa::v1::DrainSelfRequest& request) {
  if (request.reason() == mesa::v1::DRAIN_REASON_OPERATOR ||
      !mesa::v1::DrainReason_IsValid(request.reason())) {
    return absl::InvalidArgumentError("DrainSelf: reason must be AGENT_STOPPING or NODE_CORDONED");
  }
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = LeasedWorker(request.worker_id(), request.lease_id()).status(); !s.ok()) {
      return s;
    }
  }
  // A node's cordon lets the attempts finish; a stopping agent's (NONE from older agents) evicts.
  const bool node = request.reason() == mesa::v1::DRAIN_REASON_NODE_CORDONED;
  return SetWorkerDraining(
      request.worker_id(), /*draining=*/true, /*evict=*/!node,
      node ? mesa::v1::DRAIN_REASON_NODE_CORDONED : mesa::v1::DRAIN_REASON_AGENT_STOPPING);
}

absl::StatusOr<mesa::v1::WorkerInfo> Coordinator::UncordonSelf(
    const mesa::v1::UncordonSelfRequest& request) {
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = LeasedWorker(request.worker_id(), request.lease_id()).status(); !s.ok()) {
      return s;
    }
  }
  // Only the node's own cordon: SetWorkerDraining leaves a drain of another reason (an operator's
  // outlives the node's uncordon) and answers the worker as it is.
  return SetWorkerDraining(request.worker_id(), /*draining=*/false, /*evict=*/false,
                           mesa::v1::DRAIN_REASON_NODE_CORDONED);
}

absl::Status Coordinator::ForgetWorker(const std::string& id) {
  uint64_t ticket;
  {
    absl::MutexLock lock(&mu_);
    auto it = workers_.find(id);
    if (it == workers_.end()) {
      return absl::NotFoundError(absl::StrCat("worker \"", id.substr(0, 128), "\" not found"));
    }
    WorkerEntry* w = it->second.get();
    if (w->state == WorkerEntry::State::kLive) {
      return absl::FailedPreconditionError(
          absl::StrCat("worker ", id,
                       " holds a live lease; stop its agent first (a stopped agent deregisters "
                       "itself), or wait until its lease runs out"));
    }
    if (w->waiters > 0) {
      return absl::UnavailableError("a call of this worker is still in flight; retry");
    }
    ticket = RemoveWorkerLocked(w, absl::StrCat("worker ", id, " forgotten by an operator"));
  }
  return WaitCommitted(ticket);
}

}  // namespace mesa::coordinator
