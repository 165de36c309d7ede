// WorkerService's rendezvous: PutRendezvous and GetRendezvous (in memory only, per attempt).
#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "coordinator/coordinator.h"
#include "coordinator/coordinator_internal.h"
#include "coordinator/state_machine.h"

namespace mesa::coordinator {

using internal::kMaxRendezvousKeys;

absl::StatusOr<Coordinator::JobEntry*> Coordinator::FindCurrentAttempt(const std::string& job_id,
                                                                       int attempt) {
  absl::StatusOr<JobEntry*> found = FindLoadedJob(job_id);
  if (!found.ok()) return found.status();
  JobEntry* e = *found;
  if (!IsActive(e->row.state) || e->job.attempts() != attempt) {
    return absl::FailedPreconditionError(absl::StrCat("attempt ", attempt, " of job ", e->row.id,
                                                      " is not current (current ",
                                                      e->job.attempts(), ")"));
  }
  return e;
}

absl::Status Coordinator::PutRendezvous(const mesa::v1::PutRendezvousRequest& request) {
  if (request.key().empty() || request.key().size() > 256) {
    return absl::InvalidArgumentError("key: must be 1 to 256 bytes");
  }
  if (request.value().size() > 65536) {
    return absl::InvalidArgumentError("value: at most 65536 bytes");
  }
  absl::MutexLock lock(&mu_);
  absl::StatusOr<JobEntry*> found = FindCurrentAttempt(request.job_id(), request.attempt());
  if (!found.ok()) return found.status();
  JobEntry* e = *found;
  if (auto w = AuthorizeWorkerCall(request.worker_id(), request.lease_id(), *e); !w.ok()) {
    return w.status();
  }
  auto& values = rendezvous_[e->row.id];  // the current attempt's only (cleared per attempt)
  const std::string key = absl::StrCat(request.attempt(), "/", request.key());
  if (!values.contains(key) && values.size() >= kMaxRendezvousKeys) {
    return absl::ResourceExhaustedError(absl::StrCat("attempt ", request.attempt(), " of job ",
                                                     e->row.id, " already has ", kMaxRendezvousKeys,
                                                     " rendezvous keys"));
  }
  values[key] = request.value();
  activity_cv_.SignalAll();
  return absl::OkStatus();
}

absl::StatusOr<mesa::v1::GetRendezvousResponse> Coordinator::GetRendezvous(
    const mesa::v1::GetRendezvousRequest& request, const Cancelled& cancelled) {
  const absl::Duration wait = std::min(absl::Milliseconds(std::max<int64_t>(request.wait_ms(), 0)),
                                       options_.max_rendezvous_wait);
  const absl::Time deadline = absl::Now() + wait;
  const std::string key = absl::StrCat(request.attempt(), "/", request.key());
  absl::MutexLock lock(&mu_);
  for (bool first = true;; first = false) {
    absl::StatusOr<JobEntry*> found = FindCurrentAttempt(request.job_id(), request.attempt());
    if (!found.ok()) return found.status();
    JobEntry* e = *found;
    if (first) {
      if (auto w = AuthorizeWorkerCall(request.worker_id(), request.lease_id(), *e); !w.ok()) {
        return w.status();
      }
    }
    auto jit = rendezvous_.find(e->row.id);
    if (jit != rendezvous_.end()) {
      auto kit = jit->second.find(key);
      if (kit != jit->second.end()) {
        mesa::v1::GetRendezvousResponse out;
        out.set_value(kit->second);
        return out;
      }
    }
    if (shutdown_) return absl::UnavailableError("coordinator is shutting down");
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "rendezvous key \"", request.key(), "\" of job ", e->row.id, " attempt ",
          request.attempt(), " not published within ", absl::ToInt64Milliseconds(wait), " ms"));
    }
    activity_cv_.WaitWithDeadline(&mu_, std::min(deadline, absl::Now() + absl::Milliseconds(500)));
    if (cancelled && cancelled()) return absl::CancelledError("cancelled");
  }
}

}  // namespace mesa::coordinator
