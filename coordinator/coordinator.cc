#include "coordinator/coordinator.h"

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/state_machine.h"
#include "coordinator/validation.h"
#include "google/protobuf/util/message_differencer.h"

namespace mesa::coordinator {
namespace {

// Bounds on what workers send, so that a misbehaving agent or trainer cannot grow the
// coordinator's memory or the store without limit (the 16 MiB gRPC message limit is per call).
constexpr size_t kMaxCheckpointPathBytes = 4096;
constexpr size_t kMaxAttemptMessageBytes = 16384;
constexpr size_t kMaxRendezvousKeys = 4096;  // per attempt: a few keys per rank

using ::mesa::v1::AttemptPhase;
using ::mesa::v1::FailureKind;
using ::mesa::v1::Job;
using ::mesa::v1::JobEvent;
using ::mesa::v1::JobEventType;
using ::mesa::v1::JobState;

void SetTime(absl::Time t, google::protobuf::Timestamp* ts) {
  int64_t us = absl::ToUnixMicros(t);
  int64_t s = us >= 0 ? us / 1000000 : -((-us + 999999) / 1000000);
  ts->set_seconds(s);
  ts->set_nanos(static_cast<int32_t>((us - s * 1000000) * 1000));
}

Demand DemandOf(const mesa::v1::JobSpec& spec) {
  Demand d;
  d.gpus = spec.resources().gpus();
  d.max_gpus_per_node = spec.resources().max_gpus_per_node();
  d.cpu_threads = std::max(spec.resources().cpu_threads(), 1);
  d.cpu_ranks = std::max(spec.resources().cpu_ranks(), 1);
  return d;
}

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
  return s;
}

// True if every worker of the attempt last reported phase `p`.
bool AllIn(const absl::flat_hash_map<std::string, AttemptPhase>& phases, AttemptPhase p) {
  for (const auto& [worker, phase] : phases) {
    if (phase != p) return false;
  }
  return true;
}

std::string EffectiveQueue(const mesa::v1::JobSpec& spec) {
  return spec.queue().empty() ? "default" : spec.queue();
}

}  // namespace

Coordinator::Coordinator(Store* store, const Clock* clock, Metrics* metrics, const CoordinatorOptions& options)
    : store_(store), clock_(clock), metrics_(metrics), options_(options) {}

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(Store* store, const Clock* clock,
                                                                 Metrics* metrics,
                                                                 const CoordinatorOptions& options) {
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
  for (const AttemptRow& a : loaded->attempts) attempts[a.job_id].push_back(&a);
  for (StoredJob& sj : loaded->active) {
    auto e = std::make_unique<JobEntry>();
    e->row = std::move(sj.row);
    e->job = std::move(sj.job);
    e->loaded = true;
    e->queued_since = now;
    SetStateCount(e->row.state, +1);
    JobEntry* p = AddJob(std::move(e));
    if (IsPending(p->row.state)) {
      scheduler_.AddPending(p->row.id, p->row.priority, p->row.num, DemandOf(p->job.spec()));
    } else if (IsActive(p->row.state)) {
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

void Coordinator::UpdateWorkerMetrics() {
  if (metrics_ == nullptr) return;
  int64_t n[3] = {0, 0, 0};
  for (const auto& [id, w] : workers_) ++n[static_cast<int>(w->state)];
  metrics_->SetWorkers("awaiting", n[0]);
  metrics_->SetWorkers("live", n[1]);
  metrics_->SetWorkers("lost", n[2]);
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

absl::Status Coordinator::Transition(JobEntry* e, JobState to, const std::string& message, WriteBatch* batch) {
  const JobState from = e->row.state;
  if (absl::Status s = CheckTransition(from, to); !s.ok()) return s;
  const absl::Time now = clock_->Now();
  e->row.state = to;
  e->job.set_state(to);
  SetTime(now, e->job.mutable_update_time());
  SetStateCount(from, -1);
  SetStateCount(to, +1);
  if (to == mesa::v1::JOB_STATE_RUNNING && !e->job.has_start_time()) SetTime(now, e->job.mutable_start_time());
  if (IsTerminal(to)) {
    SetTime(now, e->job.mutable_end_time());
    scheduler_.RemovePending(e->row.id);
    NoteFinishedLoaded(e);
  }
  JobEvent ev;
  ev.set_type(mesa::v1::JOB_EVENT_TYPE_STATE_CHANGED);
  ev.set_state(to);
  ev.set_previous_state(from);
  ev.set_message(message);
  AppendEvent(e, std::move(ev), batch);
  return absl::OkStatus();
}

void Coordinator::PutJob(JobEntry* e, WriteBatch* batch) { batch->PutJob(e->row, e->job); }

uint64_t Coordinator::Commit(WriteBatch batch, absl::Span<JobEntry* const> touched) {
  uint64_t t = store_->Enqueue(std::move(batch));
  for (JobEntry* e : touched) {
    if (e != nullptr) e->ticket = t;
  }
  activity_cv_.SignalAll();
  return t;
}

void Coordinator::KickScheduler() {
  sched_dirty_ = true;
  sched_cv_.Signal();
}

void Coordinator::PushCancellation(WorkerEntry* w, const std::string& job_id, int attempt, const std::string& reason) {
  mesa::v1::Cancellation c;
  c.set_job_id(job_id);
  c.set_attempt(attempt);
  c.set_reason(reason);
  w->cancellations.push_back(std::move(c));
  w->cv.SignalAll();
}

bool Coordinator::WithdrawAssignments(WorkerEntry* w, const std::string& job_id) {
  auto& q = w->assignments;
  const size_t before = q.size();
  q.erase(std::remove_if(q.begin(), q.end(), [&](const auto& a) { return a.job_id() == job_id; }), q.end());
  return q.size() != before;
}

void Coordinator::Enqueue(JobEntry* e) {
  e->queued_since = clock_->Now();
  scheduler_.AddPending(e->row.id, e->row.priority, e->row.num, DemandOf(e->job.spec()));
  KickScheduler();
}

void Coordinator::EndAttempt(JobEntry* e, const std::string& reason, const std::string& except) {
  scheduler_.Release(e->placement);
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
  Transition(e, mesa::v1::JOB_STATE_CANCELLED, e->row.cancel_reason, batch).IgnoreError();
}

void Coordinator::FailAttemptInfra(JobEntry* e, const std::string& reason, const std::string& except,
                                   WriteBatch* batch) {
  EndAttempt(e, reason, except);
  if (!e->row.cancel_reason.empty()) {
    // Cancelled while the infrastructure failed: the user asked for it to end anyway.
    e->job.set_failure_reason(absl::StrCat("cancelled: ", e->row.cancel_reason));
    Transition(e, mesa::v1::JOB_STATE_CANCELLED, e->job.failure_reason(), batch).IgnoreError();
  } else if (e->job.attempts() <= e->job.spec().max_retries()) {
    Transition(e, mesa::v1::JOB_STATE_RETRYING,
               absl::StrCat(reason, "; retry ", e->job.attempts(), " of ", e->job.spec().max_retries(),
                            e->job.latest_checkpoint().empty()
                                ? " from the start"
                                : absl::StrCat(" from checkpoint ", e->job.latest_checkpoint())),
               batch)
        .IgnoreError();
    Enqueue(e);
  } else {
    e->job.set_failure_reason(absl::StrCat(reason, "; no retries left (", e->job.attempts(),
                                           " attempt(s), max_retries ", e->job.spec().max_retries(), ")"));
    Transition(e, mesa::v1::JOB_STATE_FAILED, e->job.failure_reason(), batch).IgnoreError();
  }
  PutJob(e, batch);
}

// ---------------------------------------------------------------------------------------------
// JobService

absl::StatusOr<Job> Coordinator::SubmitJob(const mesa::v1::SubmitJobRequest& request) {
  if (absl::Status s = ValidateJobSpec(request.spec()); !s.ok()) return s;
  if (!request.client_job_id().empty() && !IsValidIdentifier(request.client_job_id())) {
    return absl::InvalidArgumentError(absl::StrCat("client_job_id: must be 1 to 128 of [A-Za-z0-9._-], got \"",
                                                   request.client_job_id(), "\""));
  }
  Job out;
  uint64_t ticket;
  {
    absl::ReleasableMutexLock lock(&mu_);
    if (shutdown_) return absl::UnavailableError("coordinator is shutting down");
    DropFinishedJobs();
    if (!request.client_job_id().empty()) {
      auto it = by_client_id_.find(request.client_job_id());
      if (it != by_client_id_.end()) {
        absl::StatusOr<JobEntry*> e = FindLoadedJob(it->second->row.id);
        if (!e.ok()) return e.status();
        if (!google::protobuf::util::MessageDifferencer::Equals((*e)->job.spec(), request.spec())) {
          return absl::AlreadyExistsError(absl::StrCat("client_job_id \"", request.client_job_id(),
                                                       "\" was already used for job ", (*e)->row.id,
                                                       " with a different spec"));
        }
        out = (*e)->job;
        ticket = (*e)->ticket;  // a concurrent duplicate may still be committing
        lock.Release();
        if (absl::Status s = store_->WaitDurable(ticket); !s.ok()) return absl::UnavailableError(s.message());
        return out;
      }
    }
    auto e = std::make_unique<JobEntry>();
    JobEntry* p = e.get();
    p->loaded = true;
    p->row.num = ++last_job_num_;
    p->row.id = absl::StrCat("job-", p->row.num);
    p->row.client_job_id = request.client_job_id();
    p->row.queue = EffectiveQueue(request.spec());
    p->row.priority = request.spec().priority();
    p->row.state = mesa::v1::JOB_STATE_UNSPECIFIED;
    Job& job = p->job;
    job.set_id(p->row.id);
    *job.mutable_spec() = request.spec();
    job.set_client_job_id(request.client_job_id());
    SetTime(clock_->Now(), job.mutable_create_time());
    AddJob(std::move(e));
    WriteBatch batch;
    Transition(p, mesa::v1::JOB_STATE_QUEUED, "submitted", &batch).IgnoreError();
    PutJob(p, &batch);
    ticket = Commit(std::move(batch), {p});
    Enqueue(p);
    out = job;
  }
  if (absl::Status s = store_->WaitDurable(ticket); !s.ok()) {
    return absl::UnavailableError(absl::StrCat("job store: ", s.message()));
  }
  return out;
}

absl::StatusOr<Job> Coordinator::GetJob(const std::string& id) {
  absl::MutexLock lock(&mu_);
  DropFinishedJobs();
  absl::StatusOr<JobEntry*> e = FindLoadedJob(id);
  if (!e.ok()) return e.status();
  return (*e)->job;
}

absl::StatusOr<mesa::v1::ListJobsResponse> Coordinator::ListJobs(const mesa::v1::ListJobsRequest& request) {
  if (request.page_size() < 0 || request.page_size() > 1000) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size: must be between 0 and 1000, got ", request.page_size()));
  }
  const int page_size = request.page_size() == 0 ? 100 : request.page_size();
  int64_t after = 0;
  if (!request.page_token().empty() && !absl::SimpleAtoi(request.page_token(), &after)) {
    return absl::InvalidArgumentError(absl::StrCat("page_token: invalid token \"", request.page_token(), "\""));
  }
  bool state_filter[8] = {};
  for (int s : request.states()) {
    if (s <= 0 || s >= 8) return absl::InvalidArgumentError(absl::StrCat("states: unknown job state ", s));
    state_filter[s] = true;
  }
  const bool any_state = request.states().empty();
  auto has_labels = [&](const auto& labels) {
    for (const auto& [k, v] : request.labels()) {
      auto lit = std::find_if(labels.begin(), labels.end(),
                              [&k](const auto& kv) { return kv.first == k; });
      if (lit == labels.end() || lit->second != v) return false;
    }
    return true;
  };
  mesa::v1::ListJobsResponse out;
  absl::MutexLock lock(&mu_);
  DropFinishedJobs();
  // Finished jobs no longer in memory are read back from the store, under mu_: a call stops after
  // kMaxStoreReadsPerList of them and hands out a token to continue (a page may then be short).
  constexpr int kMaxStoreReadsPerList = 256;
  int store_reads = 0;
  int64_t last_examined = after;
  for (auto it = by_num_.upper_bound(after); it != by_num_.end(); ++it) {
    JobEntry* e = it->second;
    if (out.jobs_size() == page_size) {
      out.set_next_page_token(absl::StrCat(out.jobs(page_size - 1).id().substr(4)));
      break;
    }
    // The filters that need no store read first.
    const bool candidate =
        (any_state || state_filter[e->row.state]) &&
        (request.queue().empty() || e->row.queue == request.queue()) &&
        (request.labels().empty() || e->loaded || !e->labels_kept || has_labels(e->kept_labels));
    if (candidate && !e->loaded) {
      if (store_reads == kMaxStoreReadsPerList) {
        out.set_next_page_token(absl::StrCat(last_examined));
        break;
      }
      ++store_reads;
      absl::StatusOr<JobEntry*> l = FindLoadedJob(e->row.id);
      if (!l.ok()) return l.status();
    }
    last_examined = it->first;
    if (candidate && has_labels(e->job.spec().labels())) *out.add_jobs() = e->job;
  }
  return out;
}

absl::StatusOr<Job> Coordinator::CancelJob(const mesa::v1::CancelJobRequest& request) {
  Job out;
  uint64_t ticket;
  {
    absl::MutexLock lock(&mu_);
    DropFinishedJobs();
    absl::StatusOr<JobEntry*> found = FindLoadedJob(request.id());
    if (!found.ok()) return found.status();
    JobEntry* e = *found;
    if (IsTerminal(e->row.state)) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", e->row.id, " already finished (", ShortStateName(e->row.state), ")"));
    }
    const std::string reason = request.reason().empty() ? "cancelled by user" : request.reason();
    WriteBatch batch;
    if (IsPending(e->row.state)) {
      scheduler_.RemovePending(e->row.id);
      e->job.set_failure_reason(absl::StrCat("cancelled: ", reason));
      Transition(e, mesa::v1::JOB_STATE_CANCELLED, reason, &batch).IgnoreError();
    } else if (e->row.cancel_reason.empty()) {
      e->row.cancel_reason = reason;
      // Withdraw undelivered assignments; ask workers that have it to stop.
      bool any_running = false;
      for (const WorkerShare& s : e->placement.shares) {
        auto wit = workers_.find(s.worker_id);
        if (wit == workers_.end()) continue;
        WorkerEntry* w = wit->second.get();
        if (WithdrawAssignments(w, e->row.id)) {
          e->phases[s.worker_id] = mesa::v1::ATTEMPT_PHASE_STOPPED;
          continue;
        }
        any_running = true;
        if (w->state == WorkerEntry::State::kLive) {
          PushCancellation(w, e->row.id, e->job.attempts(), reason);
        }
      }
      if (!any_running) {
        FinishCancelled(e, "", &batch);
      } else {
        JobEvent ev;
        ev.set_type(mesa::v1::JOB_EVENT_TYPE_STATE_CHANGED);
        ev.set_state(e->row.state);
        ev.set_previous_state(e->row.state);
        ev.set_message(absl::StrCat("cancellation requested: ", reason));
        AppendEvent(e, std::move(ev), &batch);
      }
    }
    PutJob(e, &batch);
    ticket = Commit(std::move(batch), {e});
    out = e->job;
  }
  if (absl::Status s = store_->WaitDurable(ticket); !s.ok()) return absl::UnavailableError(s.message());
  return out;
}

absl::StatusOr<Coordinator::FollowPoint> Coordinator::WaitToFollow(
    const std::string& id, int64_t sent, bool wait, int64_t (*last_seq)(const JobEntry&)) {
  absl::MutexLock lock(&mu_);
  const absl::Time deadline = absl::Now() + absl::Milliseconds(500);
  while (true) {
    // Found again after every wait: another call may have dropped a finished job's details.
    DropFinishedJobs();
    absl::StatusOr<JobEntry*> found = FindLoadedJob(id);
    if (!found.ok()) return found.status();
    JobEntry* e = *found;
    if (shutdown_) return absl::UnavailableError("coordinator is shutting down");
    if (!wait || last_seq(*e) > sent || IsTerminal(e->row.state)) {
      return FollowPoint{last_seq(*e), e->ticket, IsTerminal(e->row.state)};
    }
    if (activity_cv_.WaitWithDeadline(&mu_, deadline)) wait = false;  // timed out: a last look
  }
}

absl::Status Coordinator::WatchJob(const mesa::v1::WatchJobRequest& request, const EventSink& sink,
                                   const Cancelled& cancelled) {
  int64_t sent = std::max<int64_t>(request.from_sequence(), 0);
  while (true) {
    absl::StatusOr<FollowPoint> at = WaitToFollow(
        request.id(), sent, /*wait=*/true, [](const JobEntry& e) { return e.job.last_sequence(); });
    if (!at.ok()) return at.status();
    if (cancelled && cancelled()) return absl::CancelledError("watch cancelled");
    if (at->upto > sent) {
      // Only committed events are sent: a watcher never sees what a crash could take back.
      if (absl::Status s = store_->WaitDurable(at->ticket); !s.ok()) return absl::UnavailableError(s.message());
      absl::StatusOr<std::vector<JobEvent>> events = store_->ReadEvents(request.id(), sent, at->upto);
      if (!events.ok()) return events.status();
      for (const JobEvent& ev : *events) {
        if (!sink(ev)) return absl::CancelledError("client went away");
      }
      sent = at->upto;
    }
    if (at->terminal && sent >= at->upto) return absl::OkStatus();
  }
}

absl::Status Coordinator::GetJobLogs(const mesa::v1::GetJobLogsRequest& request, const LogSink& sink,
                                     const Cancelled& cancelled) {
  int64_t sent = std::max<int64_t>(request.from_sequence(), 0);
  bool first = true;
  while (true) {
    absl::StatusOr<FollowPoint> at = WaitToFollow(request.id(), sent, /*wait=*/!first,
                                                  [](const JobEntry& e) { return e.row.log_seq; });
    if (!at.ok()) return at.status();
    first = false;
    if (cancelled && cancelled()) return absl::CancelledError("logs cancelled");
    while (at->upto > sent) {
      if (absl::Status s = store_->WaitDurable(at->ticket); !s.ok()) return absl::UnavailableError(s.message());
      absl::StatusOr<std::vector<mesa::v1::LogLine>> lines = store_->ReadLogs(request.id(), sent, at->upto, 1000);
      if (!lines.ok()) return lines.status();
      if (lines->empty()) break;
      for (const auto& l : *lines) {
        if (!sink(l)) return absl::CancelledError("client went away");
        sent = l.sequence();
      }
    }
    sent = std::max(sent, at->upto);
    if (!request.follow() || at->terminal) return absl::OkStatus();
  }
}

absl::StatusOr<mesa::v1::ExplainJobResponse> Coordinator::ExplainJob(const mesa::v1::ExplainJobRequest& request) {
  absl::MutexLock lock(&mu_);
  DropFinishedJobs();
  absl::StatusOr<JobEntry*> found = FindLoadedJob(request.id());
  if (!found.ok()) return found.status();
  JobEntry* e = *found;
  mesa::v1::ExplainJobResponse out;
  out.set_state(e->row.state);
  out.set_pending_jobs(scheduler_.pending_size());
  out.set_free_gpus(scheduler_.free_gpus());
  out.set_free_cpu_slots(scheduler_.free_cpu_slots());
  out.set_live_workers(scheduler_.live_workers());
  std::vector<std::string> workers;
  for (const auto& s : e->placement.shares) workers.push_back(s.worker_id);
  switch (e->row.state) {
    case mesa::v1::JOB_STATE_QUEUED:
    case mesa::v1::JOB_STATE_RETRYING: {
      Scheduler::Explanation x = scheduler_.Explain(e->row.id);
      out.set_queue_position(x.position);
      out.set_reason(e->row.state == mesa::v1::JOB_STATE_RETRYING
                         ? absl::StrCat("retrying after an infrastructure failure; ", x.reason)
                         : x.reason);
      break;
    }
    case mesa::v1::JOB_STATE_SCHEDULED:
      out.set_reason(absl::StrCat("assigned to worker(s) [", absl::StrJoin(workers, ", "),
                                  "], waiting for them to start attempt ", e->job.attempts()));
      break;
    case mesa::v1::JOB_STATE_RUNNING:
      out.set_reason(absl::StrCat("running attempt ", e->job.attempts(), " on worker(s) [",
                                  absl::StrJoin(workers, ", "), "]",
                                  e->row.cancel_reason.empty() ? "" : "; cancellation requested"));
      break;
    default:
      out.set_reason(absl::StrCat("finished: ", ShortStateName(e->row.state),
                                  e->job.failure_reason().empty() ? "" : ": ", e->job.failure_reason()));
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// WorkerService

mesa::v1::Assignment Coordinator::MakeAssignment(const JobEntry& e, const std::string& worker_id) const {
  mesa::v1::Assignment a;
  a.set_job_id(e.row.id);
  a.set_attempt(e.job.attempts());
  *a.mutable_spec() = e.job.spec();
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
  if (!IsValidIdentifier(request.worker_id())) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker_id: must be 1 to 128 of [A-Za-z0-9._-], got \"", request.worker_id(), "\""));
  }
  const auto& res = request.resources();
  if (res.gpus_size() > 1024) return absl::InvalidArgumentError("resources.gpus: at most 1024 GPUs");
  if (res.cpu_slots() < 0 || res.cpu_slots() > 1 << 20) {
    return absl::InvalidArgumentError(absl::StrCat("resources.cpu_slots: must be between 0 and 1048576, got ",
                                                   res.cpu_slots()));
  }
  std::vector<int> gpu_indices;
  for (int i = 0; i < res.gpus_size(); ++i) {
    int g = res.gpus(i).index();
    if (g < 0 || std::find(gpu_indices.begin(), gpu_indices.end(), g) != gpu_indices.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("resources.gpus[", i, "].index: must be unique and >= 0, got ", g));
    }
    gpu_indices.push_back(g);
  }
  mesa::v1::RegisterWorkerResponse out;
  uint64_t ticket;
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return absl::UnavailableError("coordinator is shutting down");
    auto& slot = workers_[request.worker_id()];
    if (!slot) {
      slot = std::make_unique<WorkerEntry>();
      slot->id = request.worker_id();
    }
    WorkerEntry* w = slot.get();
    const absl::Time now = clock_->Now();
    w->hostname = request.hostname();
    w->resources = res;
    w->state = WorkerEntry::State::kLive;
    w->lease_id = absl::StrCat(request.worker_id(), "-", absl::ToUnixMicros(absl::Now()), "-", ++lease_counter_);
    w->lease_expiry = now + options_.lease_ttl;
    w->assignments.clear();
    w->cancellations.clear();
    // The agent acks per lease; the re-delivery below covers anything still unconfirmed.
    w->unconfirmed.clear();
    w->delivery_seq = 0;
    scheduler_.UpsertWorker(w->id, gpu_indices, res.cpu_slots());

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
        if (!e->row.cancel_reason.empty()) PushCancellation(w, job_id, e->job.attempts(), e->row.cancel_reason);
      } else if (e->row.state == mesa::v1::JOB_STATE_SCHEDULED &&
                 phase == mesa::v1::ATTEMPT_PHASE_UNSPECIFIED && e->row.cancel_reason.empty()) {
        // Never started here (the assignment may have been lost with a restart): deliver again.
        w->assignments.push_back(MakeAssignment(*e, w->id));
      } else if (phase == mesa::v1::ATTEMPT_PHASE_UNSPECIFIED || phase == mesa::v1::ATTEMPT_PHASE_RUNNING) {
        w->jobs.erase(job_id);
        FailAttemptInfra(e,
                         absl::StrCat("worker ", w->id, " re-registered without attempt ", e->job.attempts()),
                         w->id, &batch);
        touched.push_back(e);
      }
    }
    for (const auto& [job_id, attempt] : reported) {
      mesa::v1::RunningAttempt* s = out.add_stop();
      s->set_job_id(job_id);
      s->set_attempt(attempt);
    }
    batch.PutWorker(w->id, w->hostname, res.SerializeAsString(), static_cast<int>(w->state),
                    absl::ToUnixMillis(now));
    ticket = Commit(std::move(batch), touched);
    w->outbox_ticket = ticket;
    out.set_lease_id(w->lease_id);
    out.set_lease_ttl_ms(absl::ToInt64Milliseconds(options_.lease_ttl));
    out.set_heartbeat_interval_ms(absl::ToInt64Milliseconds(options_.heartbeat_interval));
    UpdateWorkerMetrics();
    KickScheduler();
  }
  if (absl::Status s = store_->WaitDurable(ticket); !s.ok()) return absl::UnavailableError(s.message());
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

absl::StatusOr<mesa::v1::HeartbeatResponse> Coordinator::Heartbeat(const mesa::v1::HeartbeatRequest& request,
                                                                   const Cancelled& cancelled) {
  mesa::v1::HeartbeatResponse out;
  uint64_t ticket;
  {
    absl::MutexLock lock(&mu_);
    auto it = workers_.find(request.worker_id());
    if (it == workers_.end() || it->second->state != WorkerEntry::State::kLive ||
        it->second->lease_id != request.lease_id()) {
      out.set_reregister(true);
      return out;
    }
    WorkerEntry* w = it->second.get();
    w->lease_expiry = clock_->Now() + options_.lease_ttl;
    // Attempts the worker runs that the coordinator does not run there: stop them.
    for (const auto& r : request.running()) {
      JobEntry* e = FindJob(r.job_id());
      bool ours = e != nullptr && e->loaded && IsActive(e->row.state) && e->job.attempts() == r.attempt() &&
                  w->jobs.contains(r.job_id());
      if (!ours) {
        bool already = false;
        for (const auto& c : w->cancellations) already |= c.job_id() == r.job_id() && c.attempt() == r.attempt();
        if (!already) PushCancellation(w, r.job_id(), r.attempt(), "the coordinator does not run this attempt here");
      }
    }
    const uint64_t redelivery_ticket = RedeliverLost(w, request);
    const absl::Duration wait =
        std::min(absl::Milliseconds(std::max<int64_t>(request.max_wait_ms(), 0)), options_.max_heartbeat_wait);
    const absl::Time deadline = absl::Now() + wait;
    while (w->assignments.empty() && w->cancellations.empty() && !shutdown_ &&
           w->state == WorkerEntry::State::kLive && absl::Now() < deadline) {
      // Wake at least every 500 ms to notice a client that went away.
      w->cv.WaitWithDeadline(&mu_, std::min(deadline, absl::Now() + absl::Milliseconds(500)));
      if (cancelled && cancelled()) break;
    }
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
  if (absl::Status s = store_->WaitDurable(ticket); !s.ok()) return absl::UnavailableError(s.message());
  if (cancelled && cancelled() && (out.assignments_size() > 0 || out.cancellations_size() > 0)) {
    // The caller gave up (its deadline passed during the wait or the commit): gRPC drops this
    // answer, and nothing else would ever deliver these assignments again (the job would stay
    // SCHEDULED while the worker keeps its lease). Put them back for the next heartbeat.
    absl::MutexLock lock(&mu_);
    auto it = workers_.find(request.worker_id());
    if (it != workers_.end() && it->second->state == WorkerEntry::State::kLive &&
        it->second->lease_id == request.lease_id()) {
      WorkerEntry* w = it->second.get();
      for (int i = out.assignments_size() - 1; i >= 0; --i) {
        const mesa::v1::Assignment& a = out.assignments(i);
        JobEntry* e = FindJob(a.job_id());
        // Only if still undelivered: same attempt, still SCHEDULED here, not cancelled meanwhile.
        if (e == nullptr || e->row.state != mesa::v1::JOB_STATE_SCHEDULED || e->job.attempts() != a.attempt() ||
            !e->row.cancel_reason.empty() || !w->jobs.contains(a.job_id())) {
          continue;
        }
        // A later heartbeat may have found it lost and queued it again already.
        auto u = w->unconfirmed.find(a.job_id());
        if (u == w->unconfirmed.end() || u->second.seq != out.delivery_seq()) continue;
        w->unconfirmed.erase(u);
        w->assignments.push_front(a);
      }
      for (int i = out.cancellations_size() - 1; i >= 0; --i) w->cancellations.push_front(out.cancellations(i));
    }
    return absl::CancelledError("heartbeat cancelled by the client");
  }
  return out;
}

absl::StatusOr<mesa::v1::UpdateAttemptResponse> Coordinator::UpdateAttempt(
    const mesa::v1::UpdateAttemptRequest& request) {
  if (request.checkpoint_path().size() > kMaxCheckpointPathBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint_path: at most ", kMaxCheckpointPathBytes, " bytes"));
  }
  // A failing trainer's message is kept (it is the job's failure reason), but bounded.
  std::string message = request.message();
  if (message.size() > kMaxAttemptMessageBytes) {
    message.resize(kMaxAttemptMessageBytes);
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
    if (!e->phases.contains(request.worker_id())) {
      return absl::FailedPreconditionError(absl::StrCat("worker ", request.worker_id(), " does not run attempt ",
                                                        request.attempt(), " of job ", e->row.id));
    }
    const absl::Time now = clock_->Now();
    auto wit = workers_.find(request.worker_id());
    if (wit != workers_.end() && wit->second->state == WorkerEntry::State::kLive &&
        wit->second->lease_id == request.lease_id()) {
      wit->second->lease_expiry = now + options_.lease_ttl;  // any sign of life renews the lease
    }
    WriteBatch batch;
    bool persist = false;
    for (const auto& in : request.logs()) {
      mesa::v1::LogLine line = in;
      line.set_sequence(++e->row.log_seq);
      if (!line.has_time()) SetTime(now, line.mutable_time());
      line.set_attempt(request.attempt());
      if (line.text().size() > 65536) line.mutable_text()->resize(65536);
      batch.AddLog(e->row.id, line);
      persist = true;
    }
    if (!request.checkpoint_path().empty() && request.checkpoint_path() != e->job.latest_checkpoint()) {
      e->job.set_latest_checkpoint(request.checkpoint_path());
      JobEvent ev;
      ev.set_type(mesa::v1::JOB_EVENT_TYPE_CHECKPOINT);
      ev.set_message(request.checkpoint_path());
      AppendEvent(e, std::move(ev), &batch);
      persist = true;
    }
    if (request.has_progress()) {
      *e->job.mutable_progress() = request.progress();
      SetTime(now, e->job.mutable_progress()->mutable_update_time());
      if (now - e->last_progress_event >= options_.progress_event_interval) {
        e->last_progress_event = now;
        JobEvent ev;
        ev.set_type(mesa::v1::JOB_EVENT_TYPE_PROGRESS);
        *ev.mutable_progress() = e->job.progress();
        AppendEvent(e, std::move(ev), &batch);
        persist = true;
      }
    }
    switch (request.phase()) {
      case mesa::v1::ATTEMPT_PHASE_RUNNING:
        e->phases[request.worker_id()] = mesa::v1::ATTEMPT_PHASE_RUNNING;
        if (e->row.state == mesa::v1::JOB_STATE_SCHEDULED) {
          Transition(e, mesa::v1::JOB_STATE_RUNNING, absl::StrCat("started on ", request.worker_id()), &batch)
              .IgnoreError();
          persist = true;
        }
        break;
      case mesa::v1::ATTEMPT_PHASE_SUCCEEDED:
        e->phases[request.worker_id()] = mesa::v1::ATTEMPT_PHASE_SUCCEEDED;
        if (request.has_result()) *e->job.mutable_result() = request.result();
        if (AllIn(e->phases, mesa::v1::ATTEMPT_PHASE_SUCCEEDED)) {
          EndAttempt(e, "job succeeded", request.worker_id());
          JobEvent ev;
          ev.set_type(mesa::v1::JOB_EVENT_TYPE_RESULT);
          *ev.mutable_result() = e->job.result();
          AppendEvent(e, std::move(ev), &batch);
          Transition(e, mesa::v1::JOB_STATE_SUCCEEDED, message.empty() ? "succeeded" : message,
                     &batch)
              .IgnoreError();
        }
        persist = true;
        break;
      case mesa::v1::ATTEMPT_PHASE_FAILED:
        e->phases[request.worker_id()] = mesa::v1::ATTEMPT_PHASE_FAILED;
        if (request.failure_kind() == mesa::v1::FAILURE_KIND_INFRA) {
          FailAttemptInfra(e, absl::StrCat("infrastructure failure on ", request.worker_id(), ": ", message),
                           request.worker_id(), &batch);
        } else {
          // The job's own spec or data: retrying would fail the same way.
          EndAttempt(e, "job failed", request.worker_id());
          e->job.set_failure_reason(message.empty() ? "the trainer failed" : message);
          Transition(e, mesa::v1::JOB_STATE_FAILED, e->job.failure_reason(), &batch).IgnoreError();
        }
        persist = true;
        break;
      case mesa::v1::ATTEMPT_PHASE_STOPPED:
        e->phases[request.worker_id()] = mesa::v1::ATTEMPT_PHASE_STOPPED;
        if (!e->row.cancel_reason.empty()) {
          if (AllIn(e->phases, mesa::v1::ATTEMPT_PHASE_STOPPED)) FinishCancelled(e, request.worker_id(), &batch);
        } else {
          // Stopped without being asked (agent shutdown, preemption): an infrastructure failure.
          FailAttemptInfra(e, absl::StrCat("attempt stopped by worker ", request.worker_id(),
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
  if (absl::Status s = store_->WaitDurable(ticket); !s.ok()) return absl::UnavailableError(s.message());
  return out;
}

absl::StatusOr<Coordinator::JobEntry*> Coordinator::FindCurrentAttempt(const std::string& job_id, int attempt) {
  absl::StatusOr<JobEntry*> found = FindLoadedJob(job_id);
  if (!found.ok()) return found.status();
  JobEntry* e = *found;
  if (!IsActive(e->row.state) || e->job.attempts() != attempt) {
    return absl::FailedPreconditionError(absl::StrCat("attempt ", attempt, " of job ", e->row.id,
                                                      " is not current (current ", e->job.attempts(), ")"));
  }
  return e;
}

absl::Status Coordinator::PutRendezvous(const mesa::v1::PutRendezvousRequest& request) {
  if (request.key().empty() || request.key().size() > 256) {
    return absl::InvalidArgumentError("key: must be 1 to 256 bytes");
  }
  if (request.value().size() > 65536) return absl::InvalidArgumentError("value: at most 65536 bytes");
  absl::MutexLock lock(&mu_);
  absl::StatusOr<JobEntry*> found = FindCurrentAttempt(request.job_id(), request.attempt());
  if (!found.ok()) return found.status();
  JobEntry* e = *found;
  auto& values = rendezvous_[e->row.id];  // the current attempt's only (cleared per attempt)
  const std::string key = absl::StrCat(request.attempt(), "/", request.key());
  if (!values.contains(key) && values.size() >= kMaxRendezvousKeys) {
    return absl::ResourceExhaustedError(absl::StrCat("attempt ", request.attempt(), " of job ", e->row.id,
                                                     " already has ", kMaxRendezvousKeys, " rendezvous keys"));
  }
  values[key] = request.value();
  activity_cv_.SignalAll();
  return absl::OkStatus();
}

absl::StatusOr<mesa::v1::GetRendezvousResponse> Coordinator::GetRendezvous(
    const mesa::v1::GetRendezvousRequest& request, const Cancelled& cancelled) {
  const absl::Duration wait =
      std::min(absl::Milliseconds(std::max<int64_t>(request.wait_ms(), 0)), options_.max_rendezvous_wait);
  const absl::Time deadline = absl::Now() + wait;
  const std::string key = absl::StrCat(request.attempt(), "/", request.key());
  absl::MutexLock lock(&mu_);
  while (true) {
    absl::StatusOr<JobEntry*> found = FindCurrentAttempt(request.job_id(), request.attempt());
    if (!found.ok()) return found.status();
    JobEntry* e = *found;
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
      return absl::DeadlineExceededError(absl::StrCat("rendezvous key \"", request.key(), "\" of job ", e->row.id,
                                                      " attempt ", request.attempt(), " not published within ",
                                                      absl::ToInt64Milliseconds(wait), " ms"));
    }
    activity_cv_.WaitWithDeadline(&mu_, std::min(deadline, absl::Now() + absl::Milliseconds(500)));
    if (cancelled && cancelled()) return absl::CancelledError("cancelled");
  }
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
  std::vector<Scheduler::Decision> decisions = scheduler_.Pass();
  last_pass_ = absl::Now() - start;
  if (metrics_ != nullptr) metrics_->ObserveSchedulingPass(absl::ToDoubleSeconds(last_pass_));
  if (decisions.empty()) return 0;
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
    if (metrics_ != nullptr) metrics_->ObserveQueueWait(absl::ToDoubleSeconds(now - e->queued_since));
    Transition(e, mesa::v1::JOB_STATE_SCHEDULED,
               absl::StrCat("attempt ", e->job.attempts(), " placed on [", absl::StrJoin(e->job.workers(), ", "), "]"),
               &batch)
        .IgnoreError();
    for (const auto& s : e->placement.shares) {
      mesa::v1::Assignment a = MakeAssignment(*e, s.worker_id);
      batch.PutAttempt(AttemptRow{e->row.id, e->job.attempts(), s.worker_id, a.SerializeAsString()});
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
      FailAttemptInfra(e,
                       absl::StrCat("worker ", id, " lost (", awaiting ? "did not re-register" : "no heartbeat",
                                    " within the ", absl::FormatDuration(options_.lease_ttl), " lease)"),
                       id, &batch);
      touched.push_back(e);
    }
    batch.PutWorker(id, w->hostname, w->resources.SerializeAsString(), static_cast<int>(w->state),
                    absl::ToUnixMillis(now));
  }
  if (!changed) return;
  Commit(std::move(batch), touched);
  UpdateWorkerMetrics();
  KickScheduler();
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
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      // Sleeps on a condition so Shutdown() wakes it at once.
      mu_.AwaitWithTimeout(absl::Condition(&shutdown_), absl::Milliseconds(200));
      if (shutdown_) return;
    }
    CheckLeases();
  }
}

}  // namespace mesa::coordinator
