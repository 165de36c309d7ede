// WorkerService: RegisterWorker (with reconciliation), Heartbeat (with re-delivery of lost
// answers), UpdateAttempt.
#include <algorithm>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/utf8.h"
#include "coordinator/coordinator.h"
#include "coordinator/coordinator_internal.h"
#include "coordinator/state_machine.h"
#include "coordinator/validation.h"
#include "launch/trainer_launch.h"
#include "proto/worker_api_limits.h"
#include "spec/tasks.h"
#include "spec/validate_job_spec.h"

namespace mesa::coordinator {
namespace {

using internal::kMaxAttemptMessageBytes;
using internal::SetTime;
using ::mesa::v1::AttemptPhase;
using ::mesa::v1::JobEvent;

// True if every worker of the attempt last reported phase `p`.
bool AllIn(const absl::flat_hash_map<std::string, AttemptPhase>& phases, AttemptPhase p) {
  for (const auto& [worker, phase] : phases) {
    if (phase != p) return false;
  }
  return true;
}

}  // namespace

mesa::v1::Assignment Coordinator::MakeAssignment(const JobEntry& e,
                                                 const std::string& worker_id) const {
  mesa::v1::Assignment a;
  a.set_job_id(e.row.id);
  a.set_attempt(e.job.attempts());
  *a.mutable_spec() = e.job.spec();
  // Every attempt gets the same root, so a retry anywhere finds the checkpoints of the last one.
  if (!e.job.spec().checkpoint().dir().empty() || !options_.checkpoint_root.empty()) {
    a.set_checkpoint_dir(launch::JobCheckpointDir(e.job.spec().checkpoint().dir(),
                                                  options_.checkpoint_root, e.row.id));
  }
  // The worker checks the resolved paths against the same roots at use.
  for (const std::string& root : options_.data_roots) a.add_data_roots(root);
  a.set_checkpoint_root(options_.checkpoint_root);
  // The worker checks the owner-scoped checkpoint paths again at use (symbolic links made later).
  a.set_owner(e.job.owner());
  a.set_owner_is_admin(e.job.owner_is_admin());
  int rank = 0;
  for (const WorkerShare& s : e.placement.shares) {
    a.add_workers(s.worker_id);
    const int n = s.gpu_indices.empty() ? s.cpu_ranks : static_cast<int>(s.gpu_indices.size());
    for (int i = 0; i < n; ++i, ++rank) {
      if (s.worker_id != worker_id) continue;
      auto* r = a.add_ranks();
      r->set_rank(rank);
      r->set_gpu_index(s.gpu_indices.empty() ? -1 : s.gpu_indices[i]);
    }
  }
  a.set_world_size(rank);
  return a;
}

absl::StatusOr<mesa::v1::RegisterWorkerResponse> Coordinator::RegisterWorker(
    const mesa::v1::RegisterWorkerRequest& request) {
  if (absl::Status s = CheckRegisterWorkerRequest(request); !s.ok()) return s;
  const mesa::v1::WorkerResources& res = request.resources();
  std::vector<int> gpu_indices;
  for (const auto& gpu : res.gpus()) gpu_indices.push_back(gpu.index());
  mesa::v1::RegisterWorkerResponse out;
  uint64_t ticket;
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return absl::UnavailableError("coordinator is shutting down");
    auto& slot = workers_[request.worker_id()];
    if (!slot) {
      slot = std::make_unique<WorkerEntry>();
      slot->id = request.worker_id();
      if (auto c = cordoned_.find(slot->id); c != cordoned_.end()) slot->drain = c->second;
    }
    WorkerEntry* w = slot.get();
    const absl::Time now = clock_->Now();
    // A live lease belongs to the process that registered it; a registration without it is
    // another process claiming the id (a restarted agent waits for the lease to lapse, at most
    // lease_ttl). Leases are not persisted: after a coordinator restart none is live.
    if (w->state == WorkerEntry::State::kLive && !w->lease_id.empty() && now < w->lease_expiry &&
        request.lease_id() != w->lease_id) {
      return absl::AlreadyExistsError(absl::StrCat(
          "worker ", w->id, " is registered with a live lease that this request does not present; ",
          "a new registration under this id is accepted once that lease lapses (within ",
          absl::FormatDuration(w->lease_expiry - now), ")"));
    }
    w->hostname = request.hostname();
    w->resources = res;
    w->state = WorkerEntry::State::kLive;
    w->lease_id = absl::StrCat(request.worker_id(), "-", absl::ToUnixMicros(absl::Now()), "-",
                               ++lease_counter_);
    w->lease_expiry = now + options_.lease_ttl;
    w->assignments.clear();
    w->cancellations.clear();
    // The agent acks per lease; the re-delivery below covers anything still unconfirmed.
    w->unconfirmed.clear();
    w->delivery_seq = 0;
    w->leaving = false;
    scheduler_.UpsertWorker(w->id, gpu_indices, res.cpu_slots(), res.memory_bytes());

    absl::flat_hash_map<std::string, int> reported;
    for (const auto& r : request.running()) reported[r.job_id()] = r.attempt();
    WriteBatch batch;
    std::vector<JobEntry*> touched;
    // Reconcile what the coordinator believes runs here with what the worker reports.
    std::vector<std::string> mine(w->jobs.begin(), w->jobs.end());
    for (const std::string& job_id : mine) {
      JobEntry* e = FindJob(job_id);
      if (e == nullptr || !IsActive(e->row.state)) {
        w->jobs.erase(job_id);
        continue;
      }
      const WorkerShare* share = nullptr;
      for (const auto& s : e->placement.shares) {
        if (s.worker_id == w->id) share = &s;
      }
      if (share == nullptr) {
        w->jobs.erase(job_id);
        continue;
      }
      Placement just_this;
      just_this.shares.push_back(*share);
      // UpsertWorker freed everything on this worker. The share belongs to the current attempt
      // whatever happens below, and EndAttempt releases it, so take it back first: otherwise an
      // attempt failed here, or one whose share already finished here, releases resources that
      // another job holds by then (a GPU given twice, CPU slots counted free twice).
      scheduler_.Allocate(just_this).IgnoreError();
      auto rep = reported.find(job_id);
      auto phase = e->phases[w->id];
      if (rep != reported.end() && rep->second == e->job.attempts()) {
        reported.erase(rep);  // keep: still runs here
        if (!e->row.cancel_reason.empty()) {
          PushCancellation(w, job_id, e->job.attempts(), e->row.cancel_reason);
        }
      } else if (e->row.state == mesa::v1::JOB_STATE_SCHEDULED &&
                 phase == mesa::v1::ATTEMPT_PHASE_UNSPECIFIED && e->row.cancel_reason.empty()) {
        // Never started here (the assignment may have been lost with a restart): deliver again.
        w->assignments.push_back(MakeAssignment(*e, w->id));
      } else if (phase == mesa::v1::ATTEMPT_PHASE_UNSPECIFIED ||
                 phase == mesa::v1::ATTEMPT_PHASE_RUNNING) {
        w->jobs.erase(job_id);
        FailAttemptInfra(
            e, absl::StrCat("worker ", w->id, " re-registered without attempt ", e->job.attempts()),
            w->id, &batch);
        touched.push_back(e);
      }
    }
    // A cordoned worker keeps its cordon across re-registrations (its running shares were taken
    // back above only to be released consistently): out of the scheduler again.
    if (w->drain != mesa::v1::DRAIN_REASON_NONE) scheduler_.RemoveWorker(w->id);
    for (const auto& [job_id, attempt] : reported) {
      mesa::v1::RunningAttempt* s = out.add_stop();
      s->set_job_id(job_id);
      s->set_attempt(attempt);
    }
    batch.PutWorker(w->id, w->hostname, res.SerializeAsString(), static_cast<int>(w->state),
                    absl::ToUnixMillis(now), w->drain);
    ticket = Commit(std::move(batch), touched);
    w->outbox_ticket = ticket;
    out.set_lease_id(w->lease_id);
    out.set_lease_ttl_ms(absl::ToInt64Milliseconds(options_.lease_ttl));
    out.set_heartbeat_interval_ms(absl::ToInt64Milliseconds(options_.heartbeat_interval));
    UpdateWorkerMetrics();
    KickScheduler();
  }
  if (absl::Status s = WaitCommitted(ticket); !s.ok()) return s;
  return out;
}

uint64_t Coordinator::RedeliverLost(WorkerEntry* w, const mesa::v1::HeartbeatRequest& request) {
  if (w->unconfirmed.empty()) return 0;
  absl::flat_hash_set<std::pair<std::string, int>> listed;
  for (const auto& r : request.running()) listed.insert({r.job_id(), r.attempt()});
  const int64_t acked = request.acked_delivery();
  const absl::Time now = clock_->Now();
  WriteBatch batch;
  std::vector<JobEntry*> touched;
  for (auto it = w->unconfirmed.begin(); it != w->unconfirmed.end();) {
    const std::string job_id = it->first;
    const WorkerEntry::Delivery d = it->second;
    JobEntry* e = FindJob(job_id);
    bool unstarted = e != nullptr && e->loaded && e->row.state == mesa::v1::JOB_STATE_SCHEDULED &&
                     e->job.attempts() == d.attempt && w->jobs.contains(job_id);
    if (unstarted) {
      auto ph = e->phases.find(w->id);
      unstarted = ph != e->phases.end() && ph->second == mesa::v1::ATTEMPT_PHASE_UNSPECIFIED;
    }
    if (!unstarted || listed.contains({job_id, d.attempt}) || acked >= d.seq) {
      w->unconfirmed.erase(it++);  // arrived (or no longer wanted)
      continue;
    }
    // An agent that acks sent this request without having received the answer, after that answer
    // went out: it was lost. One that does not ack may still be starting it: give it a grace.
    if (acked == 0 && now - d.at < 2 * options_.heartbeat_interval) {
      ++it;
      continue;
    }
    w->unconfirmed.erase(it++);
    if (e->row.cancel_reason.empty()) {
      bool queued = false;
      for (const auto& a : w->assignments) queued |= a.job_id() == job_id;
      if (!queued) w->assignments.push_back(MakeAssignment(*e, w->id));
      continue;
    }
    // Cancelled since: it never ran here, so it is stopped here, like a withdrawn assignment.
    e->phases[w->id] = mesa::v1::ATTEMPT_PHASE_STOPPED;
    if (AllIn(e->phases, mesa::v1::ATTEMPT_PHASE_STOPPED)) {
      FinishCancelled(e, "", &batch);
      PutJob(e, &batch);
      touched.push_back(e);
    }
  }
  if (touched.empty()) return 0;
  return Commit(std::move(batch), touched);
}

uint64_t Coordinator::EndUnlistedAttempts(WorkerEntry* w,
                                          const mesa::v1::HeartbeatRequest& request) {
  absl::flat_hash_set<std::string> listed;
  for (const auto& r : request.running()) listed.insert(r.job_id());
  std::vector<std::string> gone;
  for (const std::string& job_id : w->jobs) {
    if (listed.contains(job_id) || w->unconfirmed.contains(job_id)) continue;
    bool queued = false;  // assigned, not handed out yet
    for (const auto& a : w->assignments) queued |= a.job_id() == job_id;
    if (queued) continue;
    JobEntry* e = FindJob(job_id);
    if (e == nullptr || !e->loaded || !IsActive(e->row.state)) continue;
    auto phase = e->phases.find(w->id);
    if (phase == e->phases.end() || phase->second == mesa::v1::ATTEMPT_PHASE_SUCCEEDED ||
        phase->second == mesa::v1::ATTEMPT_PHASE_FAILED ||
        phase->second == mesa::v1::ATTEMPT_PHASE_STOPPED) {
      continue;
    }
    gone.push_back(job_id);
  }
  if (gone.empty()) return 0;
  // The agent received these attempts and lists every attempt it runs until its final report is
  // delivered: one it no longer lists, without a final report, is lost (an agent that could not
  // report it, or that restarted in between). Waiting for the lease would keep the job RUNNING
  // with no trainer for as long as the worker stays alive.
  WriteBatch batch;
  std::vector<JobEntry*> touched;
  for (const std::string& job_id : gone) {
    JobEntry* e = FindJob(job_id);
    FailAttemptInfra(e,
                     absl::StrCat("worker ", w->id, " no longer runs attempt ", e->job.attempts(),
                                  " (absent from its heartbeat, no final report)"),
                     w->id, &batch);
    touched.push_back(e);
  }
  return Commit(std::move(batch), touched);
}

absl::StatusOr<mesa::v1::HeartbeatResponse> Coordinator::Heartbeat(
    const mesa::v1::HeartbeatRequest& request, const Cancelled& cancelled) {
  mesa::v1::HeartbeatResponse out;
  uint64_t ticket;
  {
    absl::MutexLock lock(&mu_);
    WorkerEntry* w = FindLeasedWorker(request.worker_id(), request.lease_id());
    if (w == nullptr) {
      out.set_reregister(true);
      return out;
    }
    w->lease_expiry = clock_->Now() + options_.lease_ttl;
    // Attempts the worker runs that the coordinator does not run there: stop them.
    for (const auto& r : request.running()) {
      JobEntry* e = FindJob(r.job_id());
      bool ours = e != nullptr && e->loaded && IsActive(e->row.state) &&
                  e->job.attempts() == r.attempt() && w->jobs.contains(r.job_id());
      if (!ours) {
        bool already = false;
        for (const auto& c : w->cancellations) {
          already |= c.job_id() == r.job_id() && c.attempt() == r.attempt();
        }
        if (!already) {
          PushCancellation(w, r.job_id(), r.attempt(),
                           "the coordinator does not run this attempt here");
        }
      }
    }
    const uint64_t redelivery_ticket =
        std::max(RedeliverLost(w, request), EndUnlistedAttempts(w, request));
    const absl::Duration wait =
        std::min(absl::Milliseconds(std::max<int64_t>(request.max_wait_ms(), 0)),
                 options_.max_heartbeat_wait);
    const absl::Time deadline = absl::Now() + wait;
    ++w->waiters;  // retention does not forget a worker while a heartbeat holds it
    while (w->assignments.empty() && w->cancellations.empty() && !shutdown_ && !w->leaving &&
           w->state == WorkerEntry::State::kLive && absl::Now() < deadline) {
      // Wake at least every 500 ms to notice a client that went away.
      w->cv.WaitWithDeadline(&mu_, std::min(deadline, absl::Now() + absl::Milliseconds(500)));
      if (cancelled && cancelled()) break;
    }
    --w->waiters;
    if (w->state != WorkerEntry::State::kLive) {
      out.set_reregister(true);
      return out;
    }
    if (!w->assignments.empty()) {
      out.set_delivery_seq(++w->delivery_seq);
      const absl::Time now = clock_->Now();
      for (const auto& a : w->assignments) {
        w->unconfirmed[a.job_id()] = WorkerEntry::Delivery{a.attempt(), out.delivery_seq(), now};
      }
    }
    for (auto& a : w->assignments) *out.add_assignments() = std::move(a);
    for (auto& c : w->cancellations) *out.add_cancellations() = std::move(c);
    w->assignments.clear();
    w->cancellations.clear();
    ticket = std::max(w->outbox_ticket, redelivery_ticket);
  }
  // Hand out only assignments whose SCHEDULED transition is durable.
  if (absl::Status s = WaitCommitted(ticket); !s.ok()) return s;
  if (cancelled && cancelled() && (out.assignments_size() > 0 || out.cancellations_size() > 0)) {
    // The caller gave up (its deadline passed during the wait or the commit): gRPC drops this
    // answer, and nothing else would ever deliver these assignments again (the job would stay
    // SCHEDULED while the worker keeps its lease). Put them back for the next heartbeat.
    absl::MutexLock lock(&mu_);
    if (WorkerEntry* w = FindLeasedWorker(request.worker_id(), request.lease_id()); w != nullptr) {
      for (int i = out.assignments_size() - 1; i >= 0; --i) {
        const mesa::v1::Assignment& a = out.assignments(i);
        JobEntry* e = FindJob(a.job_id());
        // Only if still undelivered: same attempt, still SCHEDULED here, not cancelled meanwhile.
        if (e == nullptr || e->row.state != mesa::v1::JOB_STATE_SCHEDULED ||
            e->job.attempts() != a.attempt() || !e->row.cancel_reason.empty() ||
            !w->jobs.contains(a.job_id())) {
          continue;
        }
        // A later heartbeat may have found it lost and queued it again already.
        auto u = w->unconfirmed.find(a.job_id());
        if (u == w->unconfirmed.end() || u->second.seq != out.delivery_seq()) continue;
        w->unconfirmed.erase(u);
        w->assignments.push_front(a);
      }
      for (int i = out.cancellations_size() - 1; i >= 0; --i) {
        w->cancellations.push_front(out.cancellations(i));
      }
    }
    return absl::CancelledError("heartbeat cancelled by the client");
  }
  return out;
}

absl::StatusOr<mesa::v1::UpdateAttemptResponse> Coordinator::UpdateAttempt(
    const mesa::v1::UpdateAttemptRequest& request) {
  if (absl::Status s = CheckUpdateAttemptRequest(request); !s.ok()) return s;
  // A failing trainer's message is kept (it is the job's failure reason), but bounded, and cut on
  // a character boundary: stored text that is not UTF-8 would make every read of the job fail.
  std::string message = base::SanitizeUtf8(request.message());
  if (message.size() > kMaxAttemptMessageBytes) {
    message.resize(base::Utf8PrefixLength(message, kMaxAttemptMessageBytes));
    message += " ... (truncated)";
  }
  mesa::v1::UpdateAttemptResponse out;
  uint64_t ticket;
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<JobEntry*> found = FindLoadedJob(request.job_id());
    if (!found.ok()) return found.status();
    JobEntry* e = *found;
    if (request.attempt() != e->job.attempts() || !IsActive(e->row.state)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "attempt ", request.attempt(), " of job ", e->row.id, " is not current (current attempt ",
          e->job.attempts(), ", state ", ShortStateName(e->row.state), "); stop it"));
    }
    absl::StatusOr<WorkerEntry*> w =
        AuthorizeWorkerCall(request.worker_id(), request.lease_id(), *e);
    if (!w.ok()) return w.status();
    const absl::Time now = clock_->Now();
    (*w)->lease_expiry = now + options_.lease_ttl;  // any sign of life renews the lease
    WriteBatch batch;
    bool persist = false;
    for (const auto& in : request.logs()) {
      persist = true;
      mesa::v1::LogLine line = in;
      *line.mutable_text() = base::SanitizeUtf8(line.text());
      if (line.text().size() > kMaxLogLineBytes) {
        line.mutable_text()->resize(base::Utf8PrefixLength(line.text(), kMaxLogLineBytes));
      }
      const int64_t bytes = static_cast<int64_t>(line.text().size());
      if (e->job.log_bytes() + bytes > options_.max_log_bytes_per_job) {
        // One note where the stored log stops, then only a count: a chatty trainer cannot fill
        // the coordinator's disk, and a reader of the log sees why it ends.
        const bool first_dropped = e->job.dropped_log_lines() == 0;
        e->job.set_dropped_log_lines(e->job.dropped_log_lines() + 1);
        if (!first_dropped) continue;
        line.set_text(absl::StrCat("[coordinator] this job's stored log reached its limit of ",
                                   options_.max_log_bytes_per_job,
                                   " bytes; later lines are counted in dropped_log_lines, not "
                                   "stored (the worker's trainer log file has them)"));
      } else {
        e->job.set_log_bytes(e->job.log_bytes() + bytes);
      }
      // Sequences are given to stored lines only, so they stay dense.
      line.set_sequence(++e->row.log_seq);
      if (!line.has_time()) SetTime(now, line.mutable_time());
      line.set_attempt(request.attempt());
      batch.AddLog(e->row.id, line);
    }
    if (!request.checkpoint_path().empty() &&
        request.checkpoint_path() != e->job.latest_checkpoint()) {
      e->job.set_latest_checkpoint(request.checkpoint_path());
      JobEvent ev;
      ev.set_type(mesa::v1::JOB_EVENT_TYPE_CHECKPOINT);
      ev.set_message(request.checkpoint_path());
      AppendEvent(e, std::move(ev), &batch);
      persist = true;
    }
    if (request.has_resumed()) {
      JobEvent ev;
      ev.set_type(mesa::v1::JOB_EVENT_TYPE_RESUMED);
      ev.set_message(absl::StrCat("resumed from step ", request.resumed().step(), " (",
                                  base::SanitizeUtf8(request.resumed().checkpoint()), ")"));
      AppendEvent(e, std::move(ev), &batch);
      persist = true;
    }
    if (request.has_progress()) {
      *e->job.mutable_progress() = request.progress();
      SetTime(now, e->job.mutable_progress()->mutable_update_time());
      if (now - e->last_progress_event >= options_.progress_event_interval) {
        AppendProgressEvent(e, now, &batch);
        persist = true;
      }
    }
    switch (request.phase()) {
      case mesa::v1::ATTEMPT_PHASE_RUNNING:
        e->phases[request.worker_id()] = mesa::v1::ATTEMPT_PHASE_RUNNING;
        if (e->row.state == mesa::v1::JOB_STATE_SCHEDULED) {
          Transition(e, mesa::v1::JOB_STATE_RUNNING,
                     absl::StrCat("started on ", request.worker_id()), &batch);
          persist = true;
        }
        break;
      case mesa::v1::ATTEMPT_PHASE_SUCCEEDED:
        e->phases[request.worker_id()] = mesa::v1::ATTEMPT_PHASE_SUCCEEDED;
        if (request.has_result()) *e->job.mutable_result() = request.result();
        if (AllIn(e->phases, mesa::v1::ATTEMPT_PHASE_SUCCEEDED)) {
          EndAttempt(e, "job succeeded", request.worker_id());
          // Progress reports and their events are rate-limited, so the last one kept can be well
          // short of the end: a training job that succeeded ran all its steps, and its followers
          // see that before the result.
          mesa::v1::Progress& progress = *e->job.mutable_progress();
          const int64_t last_step = progress.total_steps() > 0 ? progress.total_steps()
                                                               : e->job.spec().training().steps();
          if (e->job.spec().type() == mesa::v1::JOB_TYPE_TRAIN && last_step > progress.step()) {
            progress.set_step(last_step);
            progress.set_total_steps(last_step);
            progress.set_eta_seconds(0);
            SetTime(now, progress.mutable_update_time());
            AppendProgressEvent(e, now, &batch);
          }
          JobEvent ev;
          ev.set_type(mesa::v1::JOB_EVENT_TYPE_RESULT);
          *ev.mutable_result() = e->job.result();
          AppendEvent(e, std::move(ev), &batch);
          Transition(e, mesa::v1::JOB_STATE_SUCCEEDED, message.empty() ? "succeeded" : message,
                     &batch);
        }
        persist = true;
        break;
      case mesa::v1::ATTEMPT_PHASE_FAILED:
        e->phases[request.worker_id()] = mesa::v1::ATTEMPT_PHASE_FAILED;
        if (request.failure_kind() == mesa::v1::FAILURE_KIND_INFRA) {
          FailAttemptInfra(
              e, absl::StrCat("infrastructure failure on ", request.worker_id(), ": ", message),
              request.worker_id(), &batch);
        } else {
          // The job's own spec or data: retrying would fail the same way.
          EndAttempt(e, "job failed", request.worker_id());
          e->job.set_failure_reason(message.empty() ? "the trainer failed" : message);
          Transition(e, mesa::v1::JOB_STATE_FAILED, e->job.failure_reason(), &batch);
        }
        persist = true;
        break;
      case mesa::v1::ATTEMPT_PHASE_STOPPED:
        e->phases[request.worker_id()] = mesa::v1::ATTEMPT_PHASE_STOPPED;
        if (!e->row.cancel_reason.empty()) {
          if (AllIn(e->phases, mesa::v1::ATTEMPT_PHASE_STOPPED)) {
            FinishCancelled(e, request.worker_id(), &batch);
          }
        } else if (!e->preempted_by.empty()) {
          // Stopped for a preemption: rescheduled without using a retry.
          FailAttemptInfra(e,
                           absl::StrCat("preempted by ", e->preempted_by, " (stopped on ",
                                        request.worker_id(), " after checkpointing)"),
                           request.worker_id(), &batch, /*evicted=*/true);
        } else if (e->evicted_from == request.worker_id()) {
          // Stopped by an eviction (drain --evict): rescheduled without using a retry.
          FailAttemptInfra(e,
                           absl::StrCat("evicted from draining worker ", request.worker_id(),
                                        " after checkpointing"),
                           request.worker_id(), &batch, /*evicted=*/true);
        } else {
          // Stopped without being asked (agent shutdown, preemption): an infrastructure failure.
          FailAttemptInfra(e,
                           absl::StrCat("attempt stopped by worker ", request.worker_id(),
                                        message.empty() ? "" : ": ", message),
                           request.worker_id(), &batch);
        }
        persist = true;
        break;
      default:
        break;
    }
    if (persist) PutJob(e, &batch);
    out.set_cancel_requested(!e->row.cancel_reason.empty());
    ticket = batch.empty() ? e->ticket : Commit(std::move(batch), {e});
  }
  if (absl::Status s = WaitCommitted(ticket); !s.ok()) return s;
  return out;
}

}  // namespace mesa::coordinator
