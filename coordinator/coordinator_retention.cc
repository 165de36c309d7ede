// Retention: finished jobs older than their JobSpec.retention_seconds, or where that is 0
// CoordinatorOptions::job_retention, are deleted with their events, log lines and attempts; workers
// lost for longer than worker_retention are forgotten. Jobs that are not finished are never
// deleted. Audit records older than audit_retention are deleted too.
#include <algorithm>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "coordinator/coordinator.h"
#include "coordinator/state_machine.h"

namespace mesa::coordinator {
namespace {

// Deletions per sweep: bounds the time the sweep holds the lock and the size of its transaction.
// A sweep that reaches it reports `more`, and the next one follows after a second.
constexpr int kMaxDeletionsPerSweep = 1000;

}  // namespace

void Coordinator::ForgetJob(JobEntry* e, WriteBatch* batch) {
  batch->DeleteJob(e->row.id);
  SetStateCount(e->row.state, -1);
  by_num_.erase(e->row.num);
  if (!e->row.client_job_id.empty()) {
    auto it = by_client_id_.find(e->row.client_job_id);
    if (it != by_client_id_.end() && it->second == e) by_client_id_.erase(it);
  }
  // finished_loaded_ is filtered by the caller (one pass for all forgotten jobs); `e` dies here.
  jobs_.erase(e->row.id);
}

absl::StatusOr<Coordinator::RetentionSweep> Coordinator::SweepRetention() {
  RetentionSweep out;
  uint64_t ticket = 0;
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return absl::UnavailableError("coordinator is shutting down");
    const absl::Time now = clock_->Now();
    WriteBatch batch;
    {
      // A job's own retention (JobSpec.retention_seconds) wins over the coordinator's; a job
      // with neither is kept.
      const int64_t now_ms = absl::ToUnixMillis(now);
      const int64_t default_ms = absl::ToInt64Milliseconds(options_.job_retention);
      std::vector<JobEntry*> expired;
      for (const auto& [num, e] : by_num_) {
        // end_unix_ms is 0 only for a finished job whose end time is unknown (a damaged row):
        // kept rather than guessed.
        if (!IsTerminal(e->row.state) || e->row.end_unix_ms == 0) continue;
        const int64_t keep_ms = e->row.retention_ms != 0 ? e->row.retention_ms : default_ms;
        if (keep_ms <= 0 || e->row.end_unix_ms > now_ms - keep_ms) continue;
        if (static_cast<int>(expired.size()) == kMaxDeletionsPerSweep) {
          out.more = true;
          break;
        }
        expired.push_back(e);
      }
      if (!expired.empty()) {
        absl::flat_hash_set<const JobEntry*> gone(expired.begin(), expired.end());
        finished_loaded_.erase(
            std::remove_if(finished_loaded_.begin(), finished_loaded_.end(),
                           [&gone](const JobEntry* e) { return gone.contains(e); }),
            finished_loaded_.end());
        for (JobEntry* e : expired) ForgetJob(e, &batch);
        // The deleted jobs may include the newest job number and event sequence: a restart must
        // continue after them, not hand them out again.
        batch.KeepCounters(last_job_num_, last_sequence_);
        out.jobs = static_cast<int>(expired.size());
      }
    }
    if (options_.worker_retention > absl::ZeroDuration()) {
      const absl::Time cutoff = now - options_.worker_retention;
      for (auto it = workers_.begin(); it != workers_.end();) {
        const WorkerEntry& w = *it->second;
        if (w.state == WorkerEntry::State::kLost && w.lost_at <= cutoff && w.jobs.empty() &&
            w.waiters == 0) {
          cordoned_.erase(it->first);
          if (metrics_ != nullptr) metrics_->RemoveWorker(it->first);
          workers_.erase(it++);
          ++out.workers;
        } else {
          ++it;
        }
      }
      // The store's rows: a lost worker's row was written when it was lost. Rows of workers this
      // process knows as live or awaiting are rewritten first, so only the others can be old
      // enough (also those from before a restart, which memory no longer knows).
      for (const auto& [id, w] : workers_) {
        if (w->state == WorkerEntry::State::kLost) continue;
        batch.PutWorker(id, w->hostname, w->resources.SerializeAsString(),
                        static_cast<int>(w->state), absl::ToUnixMillis(now), w->drain);
      }
      batch.DeleteWorkersSeenBefore(absl::ToUnixMillis(cutoff));
      if (out.workers > 0) UpdateWorkerMetrics();
    }
    if (options_.audit_retention > absl::ZeroDuration()) {
      batch.DeleteAuditBefore(absl::ToUnixMillis(now - options_.audit_retention));
      out.audit = true;
    }
    if (batch.empty()) return out;
    ticket = Commit(std::move(batch), {});
  }
  if (absl::Status s = WaitCommitted(ticket); !s.ok()) return s;
  return out;
}

}  // namespace mesa::coordinator
