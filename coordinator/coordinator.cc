// The core of `Coordinator`: creation and loading, the job lifecycle helpers shared by the RPCs
// (events, transitions, commits, ending attempts), scheduling passes and lease checks. The RPCs
// are in coordinator_jobs.cc, coordinator_workers.cc and coordinator_rendezvous.cc.
#include "coordinator/coordinator.h"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/coordinator_internal.h"
#include "coordinator/state_machine.h"

namespace mesa::coordinator {
namespace {

using internal::DemandOf;
using internal::SetTime;
using ::mesa::v1::JobEvent;
using ::mesa::v1::JobState;

// Rebuilds a share from a stored assignment.
WorkerShare ShareOf(const mesa::v1::Assignment& a, const std::string& worker_id) {
  WorkerShare s;
  s.worker_id = worker_id;
  for (const auto& r : a.ranks()) {
    if (r.gpu_index() >= 0) {
      s.gpu_indices.push_back(r.gpu_index());
    } else {
      ++s.cpu_ranks;
    }
  }
  s.cpu_slots = s.cpu_ranks * std::max(a.spec().resources().cpu_threads(), 1);
  s.memory_bytes = static_cast<int64_t>(a.ranks_size()) *
                   std::max<int64_t>(a.spec().resources().memory_bytes(), 0);
  return s;
}

}  // namespace

Coordinator::Coordinator(Store* store, const Clock* clock, Metrics* metrics,
                         const CoordinatorOptions& options)
    : store_(store), clock_(clock), metrics_(metrics), options_(options) {}

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(
    Store* store, const Clock* clock, Metrics* metrics, const CoordinatorOptions& options) {
  std::unique_ptr<Coordinator> c(new Coordinator(store, clock, metrics, options));
  if (absl::Status s = c->Load(); !s.ok()) return s;
  if (options.background_threads) {
    c->scheduler_thread_ = std::thread([p = c.get()] { p->SchedulerLoop(); });
    c->lease_thread_ = std::thread([p = c.get()] { p->LeaseLoop(); });
  }
  return c;
}

Coordinator::~Coordinator() { Shutdown(); }

void Coordinator::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return;
    shutdown_ = true;
    activity_cv_.SignalAll();
    sched_cv_.SignalAll();
    for (auto& [id, w] : workers_) w->cv.SignalAll();
  }
  if (scheduler_thread_.joinable()) scheduler_thread_.join();
  if (lease_thread_.joinable()) lease_thread_.join();
  store_->Flush().IgnoreError();
}

absl::Status Coordinator::Load() {
  absl::StatusOr<LoadedState> loaded = store_->Load();
  if (!loaded.ok()) return loaded.status();
  absl::MutexLock lock(&mu_);
  last_sequence_ = loaded->max_sequence;
  last_job_num_ = loaded->max_job_num;
  const absl::Time now = clock_->Now();
  jobs_.reserve(loaded->finished.size() + loaded->active.size());
  for (JobRow& row : loaded->finished) {
    auto e = std::make_unique<JobEntry>();
    e->row = std::move(row);
    SetStateCount(e->row.state, +1);
    AddJob(std::move(e));
  }
  absl::flat_hash_map<std::string, std::vector<const AttemptRow*>> attempts;
  std::vector<JobEntry*> waiting;
  for (const AttemptRow& a : loaded->attempts) attempts[a.job_id].push_back(&a);
  for (StoredJob& sj : loaded->active) {
    auto e = std::make_unique<JobEntry>();
    e->row = std::move(sj.row);
    e->job = std::move(sj.job);
    e->loaded = true;
    e->queued_since = now;
    SetStateCount(e->row.state, +1);
    JobEntry* p = AddJob(std::move(e));
    if (p->job.spec().has_array()) continue;  // a parent: LoadArraysLocked
    if (!p->job.waiting_for().empty()) {
      waiting.push_back(p);  // below, once every job is here
    } else if (IsPending(p->row.state)) {
      scheduler_.AddPending(p->row.id, p->row.priority, p->row.num, DemandOf(p->job.spec()));
    } else if (IsActive(p->row.state)) {
      // A restart gives a running attempt its whole time limit again (no start time is stored).
      if (p->row.state == mesa::v1::JOB_STATE_RUNNING) p->running_since = now;
      // Running somewhere: wait for those workers to re-register (or their lease to run out).
      for (const AttemptRow* a : attempts[p->row.id]) {
        mesa::v1::Assignment asg;
        if (!asg.ParseFromString(a->assignment)) continue;
        p->placement.shares.push_back(ShareOf(asg, a->worker_id));
        p->phases[a->worker_id] = mesa::v1::ATTEMPT_PHASE_UNSPECIFIED;
        auto& w = workers_[a->worker_id];
        if (!w) {
          w = std::make_unique<WorkerEntry>();
          w->id = a->worker_id;
          w->state = WorkerEntry::State::kAwaiting;
          w->lease_expiry = now + options_.lease_ttl;
        }
        w->jobs.insert(p->row.id);
      }
    }
  }
  for (const auto& [id, reason] : loaded->draining_workers) {
    // Numbers of a newer version read as an operator's cordon: kept until an operator lifts it.
    const auto drain = mesa::v1::DrainReason_IsValid(reason)
                           ? static_cast<mesa::v1::DrainReason>(reason)
                           : mesa::v1::DRAIN_REASON_OPERATOR;
    cordoned_[id] = drain;
    if (auto it = workers_.find(id); it != workers_.end()) it->second->drain = drain;
  }
  LoadArraysLocked();
  // Jobs waiting for dependencies wait again (or move on, had a dependency ended unnoticed).
  WriteBatch batch;
  for (JobEntry* p : waiting) ReleaseOrWait(p, &batch);
  if (!batch.empty()) Commit(std::move(batch), {});
  UpdateWorkerMetrics();
  KickScheduler();
  return absl::OkStatus();
}

void Coordinator::SetStateCount(JobState state, int delta) {
  int s = static_cast<int>(state);
  if (s < 0 || s >= 8) return;
  state_counts_[s] += delta;
  if (metrics_ != nullptr && s != 0) metrics_->SetJobs(state, state_counts_[s]);
}

Coordinator::JobEntry* Coordinator::AddJob(std::unique_ptr<JobEntry> e) {
  JobEntry* p = e.get();
  by_num_[p->row.num] = p;
  if (!p->row.client_job_id.empty()) by_client_id_[p->row.client_job_id] = p;
  jobs_.emplace(p->row.id, std::move(e));
  return p;
}

Coordinator::JobEntry* Coordinator::FindJob(const std::string& id) {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : it->second.get();
}

Coordinator::WorkerEntry* Coordinator::FindLeasedWorker(const std::string& worker_id,
                                                        const std::string& lease_id) {
  auto it = workers_.find(worker_id);
  if (it == workers_.end() || it->second->state != WorkerEntry::State::kLive ||
      it->second->lease_id != lease_id) {
    return nullptr;
  }
  return it->second.get();
}

absl::StatusOr<Coordinator::WorkerEntry*> Coordinator::LeasedWorker(const std::string& worker_id,
                                                                    const std::string& lease_id) {
  WorkerEntry* w = FindLeasedWorker(worker_id, lease_id);
  if (w == nullptr) {
    // Not FAILED_PRECONDITION: the agent would take that as "stop the attempt", while a worker
    // whose lease the coordinator forgot (a restart) only has to register again.
    return absl::AbortedError(absl::StrCat("worker \"", worker_id.substr(0, 128),
                                           "\" holds no current lease; register again"));
  }
  return w;
}

absl::StatusOr<Coordinator::WorkerEntry*> Coordinator::AuthorizeWorkerCall(
    const std::string& worker_id, const std::string& lease_id, const JobEntry& e) {
  absl::StatusOr<WorkerEntry*> w = LeasedWorker(worker_id, lease_id);
  if (!w.ok()) return w.status();
  if (!e.phases.contains(worker_id)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker ", worker_id, " does not run attempt ", e.job.attempts(), " of job ", e.row.id));
  }
  return w;
}

absl::Status Coordinator::WaitCommitted(uint64_t ticket) {
  if (absl::Status s = store_->WaitDurable(ticket); !s.ok()) {
    return absl::UnavailableError(s.message());
  }
  return absl::OkStatus();
}

absl::StatusOr<Coordinator::JobEntry*> Coordinator::FindLoadedJob(const std::string& id) {
  JobEntry* e = FindJob(id);
  if (e == nullptr) return absl::NotFoundError(absl::StrCat("job \"", id, "\" not found"));
  if (!e->loaded) {
    // A finished job from before the last restart, or dropped from memory since: read it back.
    absl::StatusOr<StoredJob> sj = store_->ReadJob(id);
    if (!sj.ok()) return sj.status();
    e->job = std::move(sj->job);
    e->loaded = true;
    NoteFinishedLoaded(e);
  }
  return e;
}

void Coordinator::NoteFinishedLoaded(JobEntry* e) {
  if (e->in_finished_cache) return;
  e->in_finished_cache = true;
  finished_loaded_.push_back(e);
}

void Coordinator::DropFinishedJobs() {
  const int64_t cap = std::max<int64_t>(options_.max_loaded_finished_jobs, 0);
  if (static_cast<int64_t>(finished_loaded_.size()) <= cap) return;
  const uint64_t durable = store_->DurableTicket();
  // One pass over the overflow; a job whose last write is not durable yet goes to the back.
  for (int64_t n = static_cast<int64_t>(finished_loaded_.size()) - cap; n > 0; --n) {
    JobEntry* e = finished_loaded_.front();
    finished_loaded_.pop_front();
    if (e->ticket > durable) {
      finished_loaded_.push_back(e);
      continue;
    }
    e->in_finished_cache = false;
    const auto& labels = e->job.spec().labels();
    e->kept_labels.assign(labels.begin(), labels.end());
    e->labels_kept = true;
    mesa::v1::Job().Swap(&e->job);  // frees the memory, unlike Clear()
    e->loaded = false;
    e->phases.clear();
    e->placement = Placement();
  }
}

int64_t Coordinator::loaded_finished_jobs() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(finished_loaded_.size());
}

void Coordinator::AppendEvent(JobEntry* e, JobEvent event, WriteBatch* batch) {
  event.set_sequence(++last_sequence_);
  event.set_job_id(e->row.id);
  SetTime(clock_->Now(), event.mutable_time());
  event.set_attempt(e->job.attempts());
  if (event.state() == mesa::v1::JOB_STATE_UNSPECIFIED) event.set_state(e->row.state);
  e->job.set_last_sequence(event.sequence());
  batch->AddEvent(event);
}

void Coordinator::AppendNoteEvent(JobEntry* e, std::string message, WriteBatch* batch) {
  JobEvent event;
  event.set_type(mesa::v1::JOB_EVENT_TYPE_STATE_CHANGED);
  event.set_state(e->row.state);
  event.set_previous_state(e->row.state);
  event.set_message(std::move(message));
  AppendEvent(e, std::move(event), batch);
}

void Coordinator::AppendProgressEvent(JobEntry* e, absl::Time now, WriteBatch* batch) {
  e->last_progress_event = now;
  JobEvent event;
  event.set_type(mesa::v1::JOB_EVENT_TYPE_PROGRESS);
  *event.mutable_progress() = e->job.progress();
  AppendEvent(e, std::move(event), batch);
}

void Coordinator::Transition(JobEntry* e, JobState to, const std::string& message,
                             WriteBatch* batch) {
  const JobState from = e->row.state;
  if (absl::Status s = CheckTransition(from, to); !s.ok()) {
    // A bug: the caller has already changed the job (ended its attempt, ...) for a state change
    // that cannot happen. Stop before this is committed; the restart reloads committed state.
    std::cerr << "mesa-coordinator: job " << e->row.id << ": " << s.message() << " (\"" << message
              << "\")" << std::endl;
    std::abort();
  }
  const absl::Time now = clock_->Now();
  e->row.state = to;
  e->job.set_state(to);
  SetTime(now, e->job.mutable_update_time());
  SetStateCount(from, -1);
  SetStateCount(to, +1);
  if (to == mesa::v1::JOB_STATE_RUNNING) {
    e->running_since = now;
    if (!e->job.has_start_time()) SetTime(now, e->job.mutable_start_time());
  }
  if (IsTerminal(to)) {
    SetTime(now, e->job.mutable_end_time());
    e->row.end_unix_ms = absl::ToUnixMillis(now);
    scheduler_.RemovePending(e->row.id);
    e->job.clear_waiting_for();  // a waiting job cancelled, or failed by its dependency
    NoteFinishedLoaded(e);
  }
  JobEvent ev;
  ev.set_type(mesa::v1::JOB_EVENT_TYPE_STATE_CHANGED);
  ev.set_state(to);
  ev.set_previous_state(from);
  ev.set_message(message);
  AppendEvent(e, std::move(ev), batch);
  if (array_parent_.contains(e->row.id)) NoteArrayChild(e, to, batch);
  if (IsTerminal(to)) NoteDependencyEnded(e->row.id, batch);
}

void Coordinator::PutJob(JobEntry* e, WriteBatch* batch) { batch->PutJob(e->row, e->job); }

uint64_t Coordinator::Commit(WriteBatch batch, absl::Span<JobEntry* const> touched) {
  uint64_t t = store_->Enqueue(std::move(batch));
  for (JobEntry* e : touched) {
    if (e != nullptr) e->ticket = t;
  }
  for (JobEntry* e : also_touched_) e->ticket = t;
  also_touched_.clear();
  activity_cv_.SignalAll();
  return t;
}

void Coordinator::KickScheduler() {
  sched_dirty_ = true;
  sched_cv_.Signal();
}

void Coordinator::PushCancellation(WorkerEntry* w, const std::string& job_id, int attempt,
                                   const std::string& reason, absl::Duration grace) {
  mesa::v1::Cancellation c;
  c.set_job_id(job_id);
  c.set_attempt(attempt);
  c.set_reason(reason);
  c.set_grace_seconds(absl::ToInt64Seconds(grace));
  w->cancellations.push_back(std::move(c));
  w->cv.SignalAll();
}

bool Coordinator::WithdrawAssignments(WorkerEntry* w, const std::string& job_id) {
  auto& q = w->assignments;
  const size_t before = q.size();
  q.erase(std::remove_if(q.begin(), q.end(), [&](const auto& a) { return a.job_id() == job_id; }),
          q.end());
  return q.size() != before;
}

void Coordinator::Enqueue(JobEntry* e) {
  e->queued_since = clock_->Now();
  scheduler_.AddPending(e->row.id, e->row.priority, e->row.num, DemandOf(e->job.spec()));
  KickScheduler();
}

void Coordinator::EndAttempt(JobEntry* e, const std::string& reason, const std::string& except) {
  scheduler_.Release(e->placement);
  preempting_.erase(e->row.id);
  for (const WorkerShare& s : e->placement.shares) {
    auto it = workers_.find(s.worker_id);
    if (it == workers_.end()) continue;
    WorkerEntry* w = it->second.get();
    w->jobs.erase(e->row.id);
    // An assignment not yet delivered is simply withdrawn.
    const bool withdrawn = WithdrawAssignments(w, e->row.id);
    auto ph = e->phases.find(s.worker_id);
    bool finished = ph != e->phases.end() && (ph->second == mesa::v1::ATTEMPT_PHASE_SUCCEEDED ||
                                              ph->second == mesa::v1::ATTEMPT_PHASE_FAILED ||
                                              ph->second == mesa::v1::ATTEMPT_PHASE_STOPPED);
    if (!withdrawn && !finished && s.worker_id != except && w->state == WorkerEntry::State::kLive) {
      PushCancellation(w, e->row.id, e->job.attempts(), reason);
    }
  }
  e->placement = Placement();
  e->phases.clear();
  rendezvous_.erase(e->row.id);
  KickScheduler();
}

void Coordinator::FinishCancelled(JobEntry* e, const std::string& except, WriteBatch* batch) {
  EndAttempt(e, e->row.cancel_reason, except);
  e->job.set_failure_reason(absl::StrCat("cancelled: ", e->row.cancel_reason));
  Transition(e, mesa::v1::JOB_STATE_CANCELLED, e->row.cancel_reason, batch);
}

void Coordinator::FailAttemptInfra(JobEntry* e, const std::string& reason,
                                   const std::string& except, WriteBatch* batch, bool evicted) {
  EndAttempt(e, reason, except);
  e->evicted_from.clear();
  e->preempted_by.clear();
  // Attempts ended by an eviction (Job.evictions) do not use up retries.
  if (evicted) e->job.set_evictions(e->job.evictions() + 1);
  const int retries_used = e->job.attempts() - e->job.evictions();
  if (!e->row.cancel_reason.empty()) {
    // Cancelled while the infrastructure failed: the user asked for it to end anyway.
    e->job.set_failure_reason(absl::StrCat("cancelled: ", e->row.cancel_reason));
    Transition(e, mesa::v1::JOB_STATE_CANCELLED, e->job.failure_reason(), batch);
  } else if (retries_used <= e->job.spec().max_retries()) {
    Transition(e, mesa::v1::JOB_STATE_RETRYING,
               absl::StrCat(reason,
                            evicted ? "; rescheduled (an eviction uses no retry)"
                                    : absl::StrCat("; retry ", retries_used, " of ",
                                                   e->job.spec().max_retries()),
                            e->job.latest_checkpoint().empty()
                                ? " from the start"
                                : absl::StrCat(" from checkpoint ", e->job.latest_checkpoint())),
               batch);
    Enqueue(e);
  } else {
    e->job.set_failure_reason(absl::StrCat(
        reason, "; no retries left (", e->job.attempts(), " attempt(s), max_retries ",
        e->job.spec().max_retries(),
        e->job.evictions() > 0 ? absl::StrCat(", ", e->job.evictions(), " evictions not counted")
                               : "",
        ")"));
    Transition(e, mesa::v1::JOB_STATE_FAILED, e->job.failure_reason(), batch);
  }
  PutJob(e, batch);
}

// ---------------------------------------------------------------------------------------------
// Scheduling and leases

int Coordinator::RunSchedulingPass() {
  absl::MutexLock lock(&mu_);
  return RunSchedulingPassLocked();
}

int Coordinator::RunSchedulingPassLocked() {
  sched_dirty_ = false;
  const absl::Time start = absl::Now();
  // GPU quotas: a job whose owner or queue would exceed its GPU quota stays queued this pass.
  const Quotas& q = options_.quotas;
  GpuUse use;
  Scheduler::Admission admission;
  const bool gpu_quotas = q.any_user_max_gpus() || q.queue.max_gpus > 0;
  if (gpu_quotas) {
    use = CountGpusInUse();
    admission.admit = [&](const std::string& id, const Demand& d) {
      if (d.gpus <= 0) return true;
      const JobEntry* e = FindJob(id);
      if (e == nullptr) return true;
      const int64_t user_max = q.ForUser(e->job.owner()).max_gpus;
      return (user_max <= 0 || use.by_user[e->job.owner()] + d.gpus <= user_max) &&
             (q.queue.max_gpus <= 0 || use.by_queue[e->row.queue] + d.gpus <= q.queue.max_gpus);
    };
    admission.placed = [&](const std::string& id, const Demand& d) {
      const JobEntry* e = FindJob(id);
      if (e == nullptr) return;
      use.by_user[e->job.owner()] += d.gpus;
      use.by_queue[e->row.queue] += d.gpus;
    };
  }
  std::vector<Scheduler::Decision> decisions = scheduler_.Pass(gpu_quotas ? &admission : nullptr);
  if (!options_.preemption.empty()) PreemptForPendingLocked();
  last_pass_ = absl::Now() - start;
  if (metrics_ != nullptr) metrics_->ObserveSchedulingPass(absl::ToDoubleSeconds(last_pass_));
  if (decisions.empty()) {
    UpdateWorkerMetrics();  // attempts that ended kicked this pass
    return 0;
  }
  const absl::Time now = clock_->Now();
  WriteBatch batch;
  std::vector<std::pair<WorkerEntry*, mesa::v1::Assignment>> deliveries;
  std::vector<JobEntry*> touched;
  for (Scheduler::Decision& d : decisions) {
    JobEntry* e = FindJob(d.job_id);
    if (e == nullptr || !IsPending(e->row.state)) {
      scheduler_.Release(d.placement);
      continue;
    }
    e->placement = std::move(d.placement);
    e->phases.clear();
    e->job.set_attempts(e->job.attempts() + 1);
    e->job.clear_workers();
    for (const auto& s : e->placement.shares) {
      e->job.add_workers(s.worker_id);
      e->phases[s.worker_id] = mesa::v1::ATTEMPT_PHASE_UNSPECIFIED;
    }
    if (metrics_ != nullptr) {
      metrics_->ObserveQueueWait(absl::ToDoubleSeconds(now - e->queued_since));
    }
    Transition(e, mesa::v1::JOB_STATE_SCHEDULED,
               absl::StrCat("attempt ", e->job.attempts(), " placed on [",
                            absl::StrJoin(e->job.workers(), ", "), "]"),
               &batch);
    for (const auto& s : e->placement.shares) {
      mesa::v1::Assignment a = MakeAssignment(*e, s.worker_id);
      batch.PutAttempt(
          AttemptRow{e->row.id, e->job.attempts(), s.worker_id, a.SerializeAsString()});
      WorkerEntry* w = workers_.at(s.worker_id).get();
      w->jobs.insert(e->row.id);
      deliveries.push_back({w, std::move(a)});
    }
    PutJob(e, &batch);
    touched.push_back(e);
  }
  const uint64_t ticket = Commit(std::move(batch), touched);
  for (auto& [w, a] : deliveries) {
    w->assignments.push_back(std::move(a));
    w->outbox_ticket = ticket;
    w->cv.SignalAll();
  }
  UpdateWorkerMetrics();
  return static_cast<int>(touched.size());
}

void Coordinator::CheckLeases() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  WriteBatch batch;
  std::vector<JobEntry*> touched;
  bool changed = false;
  for (auto& [id, w] : workers_) {
    if (w->state == WorkerEntry::State::kLost || now < w->lease_expiry) continue;
    const bool awaiting = w->state == WorkerEntry::State::kAwaiting;
    w->state = WorkerEntry::State::kLost;
    w->lost_at = now;
    if (metrics_ != nullptr) metrics_->CountLeaseExpiry();
    w->assignments.clear();
    w->cancellations.clear();
    w->unconfirmed.clear();
    w->cv.SignalAll();
    scheduler_.RemoveWorker(id);
    changed = true;
    std::vector<std::string> jobs(w->jobs.begin(), w->jobs.end());
    w->jobs.clear();
    for (const std::string& job_id : jobs) {
      JobEntry* e = FindJob(job_id);
      if (e == nullptr || !IsActive(e->row.state)) continue;
      FailAttemptInfra(
          e,
          absl::StrCat("worker ", id, " lost (", awaiting ? "did not re-register" : "no heartbeat",
                       " within the ", absl::FormatDuration(options_.lease_ttl), " lease)"),
          id, &batch);
      touched.push_back(e);
    }
    batch.PutWorker(id, w->hostname, w->resources.SerializeAsString(), static_cast<int>(w->state),
                    absl::ToUnixMillis(now), w->drain);
  }
  if (!changed) return;
  Commit(std::move(batch), touched);
  UpdateWorkerMetrics();
  KickScheduler();
}

void Coordinator::CheckRunningJobs() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  const double tick_seconds = last_usage_tick_ == absl::InfinitePast()
                                  ? 0.0
                                  : absl::ToDoubleSeconds(now - last_usage_tick_);
  last_usage_tick_ = now;
  WriteBatch batch;
  std::vector<JobEntry*> touched;
  absl::flat_hash_set<std::string> seen;
  for (auto& [id, w] : workers_) {
    for (const std::string& job_id : w->jobs) {
      if (!seen.insert(job_id).second) continue;
      JobEntry* e = FindJob(job_id);
      if (e == nullptr) continue;
      // GPU time of every placed job (its GPUs are held from SCHEDULED on), since the last tick.
      if (metrics_ != nullptr && tick_seconds > 0) {
        size_t gpus = 0;
        for (const WorkerShare& s : e->placement.shares) gpus += s.gpu_indices.size();
        if (gpus > 0) {
          metrics_->AddGpuSeconds(e->job.owner(), e->job.spec().queue(),
                                  static_cast<double>(gpus) * tick_seconds);
        }
      }
      if (e->row.state != mesa::v1::JOB_STATE_RUNNING || !e->row.cancel_reason.empty()) {
        continue;
      }
      const int64_t limit = e->job.spec().max_run_seconds();
      if (limit <= 0 || now - e->running_since < absl::Seconds(limit)) continue;
      touched.push_back(e);
    }
  }
  if (touched.empty()) return;
  for (JobEntry* e : touched) {
    // After the loop: FinishCancelled (inside CancelLocked) edits the workers' job sets.
    CancelLocked(
        e,
        absl::StrCat("time limit: attempt ", e->job.attempts(), " ran ",
                     absl::FormatDuration(absl::Trunc(now - e->running_since, absl::Seconds(1))),
                     ", max_run_seconds ", e->job.spec().max_run_seconds()),
        &batch);
    PutJob(e, &batch);
  }
  Commit(std::move(batch), touched);
}

absl::Duration Coordinator::last_pass_duration() const {
  absl::MutexLock lock(&mu_);
  return last_pass_;
}

void Coordinator::SchedulerLoop() {
  absl::MutexLock lock(&mu_);
  while (!shutdown_) {
    if (!sched_dirty_) sched_cv_.WaitWithTimeout(&mu_, absl::Seconds(1));
    if (shutdown_) break;
    if (sched_dirty_) RunSchedulingPassLocked();
  }
}

void Coordinator::LeaseLoop() {
  absl::Time next_sweep = absl::Now();
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      // Sleeps on a condition so Shutdown() wakes it at once.
      mu_.AwaitWithTimeout(absl::Condition(&shutdown_), absl::Milliseconds(200));
      if (shutdown_) return;
    }
    CheckLeases();
    CheckRunningJobs();
    if (absl::Now() < next_sweep) continue;
    absl::StatusOr<RetentionSweep> swept = SweepRetention();
    if (swept.ok() && (swept->jobs > 0 || swept->workers > 0)) {
      std::cerr << "mesa-coordinator: retention: deleted " << swept->jobs
                << " finished job(s), forgot " << swept->workers << " lost worker(s)" << std::endl;
    }
    // A sweep that stopped at its bound continues soon; the lock is free in between.
    next_sweep = absl::Now() +
                 (swept.ok() && swept->more ? absl::Seconds(1) : options_.retention_sweep_interval);
  }
}

}  // namespace mesa::coordinator
