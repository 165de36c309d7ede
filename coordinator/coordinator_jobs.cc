// JobService: SubmitJob, GetJob, ListJobs, CancelJob, WatchJob, GetJobLogs, ExplainJob.
#include <algorithm>
#include <filesystem>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/coordinator.h"
#include "coordinator/coordinator_internal.h"
#include "coordinator/owner_paths.h"
#include "coordinator/state_machine.h"
#include "coordinator/validation.h"
#include "google/protobuf/message.h"
#include "google/protobuf/util/message_differencer.h"
#include "spec/confined_paths.h"
#include "spec/job_refs.h"
#include "spec/tokenizer_record.h"
#include "spec/validate_job_spec.h"

namespace mesa::coordinator {
namespace {

using internal::SetTime;
using ::mesa::v1::Job;
using ::mesa::v1::JobEvent;

// *out = `message` without its fields numbered `left_out`, which are never copied: they are moved
// aside (swapped, not copied) while the rest is copied, then put back, so `message` is as it was.
void CopyAllBut(google::protobuf::Message& message, std::initializer_list<int> left_out,
                google::protobuf::Message* out) {
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  for (int number : left_out) fields.push_back(message.GetDescriptor()->FindFieldByNumber(number));
  std::unique_ptr<google::protobuf::Message> aside(message.New());
  const google::protobuf::Reflection* reflection = message.GetReflection();
  reflection->SwapFields(&message, aside.get(), fields);
  out->CopyFrom(message);
  reflection->SwapFields(&message, aside.get(), fields);
}

// A job as ListJobs returns it: all of it but the per-position curves and a generation's
// completions, which can be megabytes per job (GetJob has them) and are not copied at all. `job`
// is unchanged on return (callers hold mu_).
void CopyForListing(Job& job, Job* out) {
  using ::mesa::v1::CgSweepPoint;
  using ::mesa::v1::DatasetResult;
  using ::mesa::v1::JobResult;
  CopyAllBut(job, {Job::kResultFieldNumber}, out);
  if (!job.has_result()) return;
  JobResult& result = *job.mutable_result();
  JobResult* listed = out->mutable_result();
  CopyAllBut(result,
             {JobResult::kDatasetsFieldNumber, JobResult::kCgSweepFieldNumber,
              JobResult::kCompletionsFieldNumber, JobResult::kAveragedCurveFieldNumber},
             listed);
  for (DatasetResult& d : *result.mutable_datasets()) {
    CopyAllBut(d,
               {DatasetResult::kNllAtPositionFieldNumber, DatasetResult::kMeanNllSoFarFieldNumber,
                DatasetResult::kCountAtPositionFieldNumber},
               listed->add_datasets());
  }
  for (CgSweepPoint& point : *result.mutable_cg_sweep()) {
    CopyAllBut(point, {CgSweepPoint::kCgStepsAtPositionFieldNumber}, listed->add_cg_sweep());
  }
}

std::string EffectiveQueue(const mesa::v1::JobSpec& spec) {
  return spec.queue().empty() ? "default" : spec.queue();
}

// Whether every data root is a directory here (the coordinator shares the workers' storage).
bool DataRootsHere(const CoordinatorOptions& options) {
  std::error_code error;
  bool here = !options.data_roots.empty();
  for (const std::string& root : options.data_roots) {
    here &= std::filesystem::is_directory(root, error);
  }
  return here;
}

// Confined paths, resolved on the coordinator's own file system where it holds the roots (the
// same shared storage as the workers): a symbolic link out of a root is refused at submit too.
// Roots it does not hold are left to the worker, which checks again at use.
absl::Status CheckResolvedAtSubmit(const mesa::v1::JobSpec& spec,
                                   const CoordinatorOptions& options) {
  spec::ConfinementRoots roots;
  if (DataRootsHere(options)) roots.data_roots = options.data_roots;
  std::error_code error;
  if (!options.checkpoint_root.empty() &&
      std::filesystem::is_directory(options.checkpoint_root, error)) {
    roots.checkpoint_root = options.checkpoint_root;
  }
  if (roots.data_roots.empty() && roots.checkpoint_root.empty()) return absl::OkStatus();
  return spec::CheckResolvedPaths(spec, roots, /*job_id=*/"", spec.checkpoint().dir());
}

// The tokenizer the job names must be the one of its shards (mesa_data.json) and of the
// checkpoints it starts from (docs/formats.md, "Tokenizer records"). Only where the data roots are
// held here (the spec's paths are then confined to them), and only once the caller may read
// every checkpoint the spec names: the answer tells something about them.
absl::Status CheckTokenizerAtSubmit(const mesa::v1::JobSpec& spec,
                                    const CoordinatorOptions& options) {
  if (spec.type() == mesa::v1::JOB_TYPE_GENERATE || !DataRootsHere(options)) {
    return absl::OkStatus();
  }
  absl::StatusOr<spec::TokenizerRecord> tokenizer = spec::CheckJobTokenizer(spec);
  return tokenizer.ok() ? absl::OkStatus() : tokenizer.status();
}

}  // namespace

absl::Status Coordinator::CheckJobDirReads(const std::vector<JobDirRead>& reads,
                                           const std::string& owner) {
  for (const JobDirRead& read : reads) {
    absl::StatusOr<JobEntry*> read_job = FindLoadedJob(read.job_id);
    if (absl::Status s = JobDirReadDenied(read, owner, read_job.ok(),
                                          read_job.ok() ? (*read_job)->job.owner() : "");
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

Coordinator::JobEntry* Coordinator::NewJobLocked(const mesa::v1::JobSpec& spec,
                                                 const std::string& client_job_id,
                                                 const std::string& owner, bool admin) {
  auto e = std::make_unique<JobEntry>();
  JobEntry* p = e.get();
  p->loaded = true;
  p->row.num = ++last_job_num_;
  p->row.id = absl::StrCat("job-", p->row.num);
  p->row.client_job_id = client_job_id;
  p->row.queue = EffectiveQueue(spec);
  p->row.priority = spec.priority();
  p->row.retention_ms =
      spec.retention_seconds() > 0 ? spec.retention_seconds() * 1000 : spec.retention_seconds();
  p->row.state = mesa::v1::JOB_STATE_UNSPECIFIED;
  Job& job = p->job;
  job.set_id(p->row.id);
  *job.mutable_spec() = spec;
  job.set_client_job_id(client_job_id);
  job.set_owner(owner);
  job.set_owner_is_admin(!owner.empty() && admin);
  SetTime(clock_->Now(), job.mutable_create_time());
  AddJob(std::move(e));
  return p;
}

bool Coordinator::SameSubmittedSpec(const JobEntry& e, const mesa::v1::JobSpec& spec) {
  using google::protobuf::util::MessageDifferencer;
  if (MessageDifferencer::Equals(e.job.spec(), spec)) return true;
  // A released pipeline job keeps its spec with the job:<id> references resolved: the same
  // submission resolves to it.
  if (spec.depends_on_size() == 0 || !e.job.waiting_for().empty()) return false;
  absl::StatusOr<mesa::v1::JobSpec> resolved =
      spec::ResolveJobRefs(spec, [&](const std::string& id) -> absl::StatusOr<std::string> {
        absl::StatusOr<JobEntry*> dep = FindLoadedJob(id);
        if (!dep.ok()) return dep.status();
        return (*dep)->job.latest_checkpoint();
      });
  return resolved.ok() && MessageDifferencer::Equals(e.job.spec(), *resolved);
}

absl::Status Coordinator::CheckSpecPathsLocked(const mesa::v1::JobSpec& spec,
                                               const std::string& owner, bool admin) {
  if (absl::Status s = spec::ValidateJobSpec(spec, {.require_absolute_paths = true,
                                                    .data_roots = options_.data_roots,
                                                    .checkpoint_root = options_.checkpoint_root});
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckResolvedAtSubmit(spec, options_); !s.ok()) return s;
  if (!owner.empty() && !admin && !options_.checkpoint_root.empty()) {
    absl::StatusOr<std::vector<JobDirRead>> reads =
        CheckOwnerPaths(spec, owner, options_.checkpoint_root);
    if (!reads.ok()) return reads.status();
    if (absl::Status s = CheckJobDirReads(*reads, owner); !s.ok()) return s;
  }
  return CheckTokenizerAtSubmit(spec, options_);
}

absl::StatusOr<Job> Coordinator::SubmitJob(const mesa::v1::SubmitJobRequest& request,
                                           const std::string& owner, bool admin) {
  // The checks below see the dependencies' checkpoint roots where the spec has job:<id>
  // references; they run again on the resolved spec when the job is released.
  mesa::v1::JobSpec checked_spec;
  if (request.spec().depends_on_size() > 0) {
    if (absl::Status s = spec::ValidateJobSpec(request.spec()); !s.ok()) return s;
    absl::MutexLock lock(&mu_);
    absl::StatusOr<mesa::v1::JobSpec> with_roots =
        SpecForSubmitChecks(request.spec(), owner, admin);
    if (!with_roots.ok()) return with_roots.status();
    checked_spec = *std::move(with_roots);
  }
  const mesa::v1::JobSpec& checked =
      request.spec().depends_on_size() > 0 ? checked_spec : request.spec();
  if (absl::Status s =
          spec::ValidateJobSpec(checked, {.require_absolute_paths = true,
                                          .data_roots = options_.data_roots,
                                          .checkpoint_root = options_.checkpoint_root});
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckResolvedAtSubmit(checked, options_); !s.ok()) return s;
  std::vector<JobDirRead> job_dir_reads;
  if (!owner.empty() && !admin && !options_.checkpoint_root.empty()) {
    absl::StatusOr<std::vector<JobDirRead>> reads =
        CheckOwnerPaths(checked, owner, options_.checkpoint_root);
    if (!reads.ok()) return reads.status();
    job_dir_reads = std::move(*reads);
  }
  if (!job_dir_reads.empty()) {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = CheckJobDirReads(job_dir_reads, owner); !s.ok()) return s;
  }
  if (absl::Status s = CheckTokenizerAtSubmit(checked, options_); !s.ok()) return s;
  if (!request.client_job_id().empty() && !IsValidIdentifier(request.client_job_id())) {
    return absl::InvalidArgumentError(
        absl::StrCat("client_job_id: must be 1 to 128 of [A-Za-z0-9._-], got \"",
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
        if ((*e)->job.owner() != owner) {
          return absl::AlreadyExistsError(absl::StrCat("client_job_id \"", request.client_job_id(),
                                                       "\" is used by another user's job"));
        }
        if (!SameSubmittedSpec(**e, request.spec())) {
          return absl::AlreadyExistsError(absl::StrCat("client_job_id \"", request.client_job_id(),
                                                       "\" was already used for job ", (*e)->row.id,
                                                       " with a different spec"));
        }
        out = (*e)->job;
        ticket = (*e)->ticket;  // a concurrent duplicate may still be committing
        lock.Release();
        if (absl::Status s = WaitCommitted(ticket); !s.ok()) return s;
        return out;
      }
    }
    // Again under this lock: the job table may have changed since.
    if (absl::Status s = CheckJobDirReads(job_dir_reads, owner); !s.ok()) return s;
    if (absl::Status s = CheckSubmitQuotas(owner, EffectiveQueue(request.spec()),
                                           Demand{.gpus = request.spec().resources().gpus()});
        !s.ok()) {
      return s;
    }
    if (request.spec().has_array()) {
      // The parent and all its children in one batch (coordinator_arrays.cc).
      absl::StatusOr<JobEntry*> parent = SubmitArrayLocked(request, owner, admin, &ticket);
      if (!parent.ok()) return parent.status();
      out = (*parent)->job;
    } else {
      JobEntry* p = NewJobLocked(request.spec(), request.client_job_id(), owner, admin);
      WriteBatch batch;
      Transition(p, mesa::v1::JOB_STATE_QUEUED, "submitted", &batch);
      PutJob(p, &batch);
      if (request.spec().depends_on_size() > 0) {
        ReleaseOrWait(p, &batch);  // queues it, or leaves it waiting, or fails it
      } else {
        Enqueue(p);
      }
      ticket = Commit(std::move(batch), {p});
      out = p->job;
    }
  }
  if (absl::Status s = WaitCommitted(ticket); !s.ok()) {
    return absl::UnavailableError(absl::StrCat("job store: ", s.message()));
  }
  return out;
}

absl::StatusOr<Job> Coordinator::GetJob(const std::string& id) {
  absl::MutexLock lock(&mu_);
  DropFinishedJobs();
  absl::StatusOr<JobEntry*> e = FindLoadedJob(id);
  if (!e.ok()) return e.status();
  Job out = (*e)->job;
  FillArrayChildStates(&out);
  return out;
}

absl::StatusOr<mesa::v1::ListJobsResponse> Coordinator::ListJobs(
    const mesa::v1::ListJobsRequest& request, const std::string& owner) {
  if (absl::Status s = CheckListJobsRequest(request); !s.ok()) return s;
  if (request.page_size() < 0 || request.page_size() > 1000) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size: must be between 0 and 1000, got ", request.page_size()));
  }
  const int page_size = request.page_size() == 0 ? 100 : request.page_size();
  int64_t after = 0;
  if (!request.page_token().empty() && !absl::SimpleAtoi(request.page_token(), &after)) {
    return absl::InvalidArgumentError("page_token: not a token this coordinator issued");
  }
  bool state_filter[mesa::v1::JobState_ARRAYSIZE] = {};
  for (int s : request.states()) {
    if (s <= 0 || s >= mesa::v1::JobState_ARRAYSIZE) {
      return absl::InvalidArgumentError(absl::StrCat("states: unknown job state ", s));
    }
    state_filter[s] = true;
  }
  const bool any_state = request.states().empty();
  auto has_labels = [&](const auto& labels) {
    for (const auto& wanted : request.labels()) {
      const std::string& k = wanted.first;
      const std::string& v = wanted.second;
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
  // One pass in either order; it stops at a full page or at the read budget, leaving a token.
  auto visit = [&](auto it, auto end) -> absl::Status {
    for (; it != end; ++it) {
      JobEntry* e = it->second;
      if (out.jobs_size() == page_size) {
        out.set_next_page_token(absl::StrCat(out.jobs(page_size - 1).id().substr(4)));
        return absl::OkStatus();
      }
      // The filters that need no store read first.
      const bool candidate =
          // A state read back from a damaged store row may be out of range: it matches no filter.
          (any_state || (e->row.state > 0 && e->row.state < mesa::v1::JobState_ARRAYSIZE &&
                         state_filter[e->row.state])) &&
          (request.queue().empty() || e->row.queue == request.queue()) &&
          (request.labels().empty() || e->loaded || !e->labels_kept || has_labels(e->kept_labels));
      if (candidate && !e->loaded) {
        if (store_reads == kMaxStoreReadsPerList) {
          out.set_next_page_token(absl::StrCat(last_examined));
          return absl::OkStatus();
        }
        ++store_reads;
        absl::StatusOr<JobEntry*> l = FindLoadedJob(e->row.id);
        if (!l.ok()) return l.status();
      }
      last_examined = it->first;
      if (candidate && has_labels(e->job.spec().labels()) &&
          (owner.empty() || e->job.owner() == owner)) {
        CopyForListing(e->job, out.add_jobs());
        FillArrayChildStates(out.mutable_jobs(out.jobs_size() - 1));
      }
    }
    return absl::OkStatus();
  };
  absl::Status visited =
      request.newest_first()
          ? visit(after == 0 ? by_num_.rbegin()
                             : std::make_reverse_iterator(by_num_.lower_bound(after)),
                  by_num_.rend())
          : visit(by_num_.upper_bound(after), by_num_.end());
  if (!visited.ok()) return visited;
  return out;
}

absl::StatusOr<Job> Coordinator::CancelJob(const mesa::v1::CancelJobRequest& request) {
  if (absl::Status s = CheckCancelJobRequest(request); !s.ok()) return s;
  Job out;
  uint64_t ticket;
  {
    absl::MutexLock lock(&mu_);
    DropFinishedJobs();
    absl::StatusOr<JobEntry*> found = FindLoadedJob(request.id());
    if (!found.ok()) return found.status();
    JobEntry* e = *found;
    if (IsTerminal(e->row.state)) {
      return absl::FailedPreconditionError(absl::StrCat("job ", e->row.id, " already finished (",
                                                        ShortStateName(e->row.state), ")"));
    }
    if (!IsPending(e->row.state) && !IsActive(e->row.state)) {
      // Only a store row this coordinator did not write can hold such a state; the branches below
      // would make a transition the state machine forbids.
      return absl::InternalError(
          absl::StrCat("job ", e->row.id, " has unknown state ", static_cast<int>(e->row.state)));
    }
    const std::string reason = request.reason().empty() ? "cancelled by user" : request.reason();
    WriteBatch batch;
    if (e->job.spec().has_array()) {
      CancelArrayLocked(e, reason, &batch);
    } else {
      CancelLocked(e, reason, &batch);
    }
    PutJob(e, &batch);
    ticket = Commit(std::move(batch), {e});
    out = e->job;
  }
  if (absl::Status s = WaitCommitted(ticket); !s.ok()) return s;
  return out;
}

void Coordinator::CancelLocked(JobEntry* e, const std::string& reason, WriteBatch* batch) {
  if (IsPending(e->row.state)) {
    scheduler_.RemovePending(e->row.id);
    e->job.set_failure_reason(absl::StrCat("cancelled: ", reason));
    Transition(e, mesa::v1::JOB_STATE_CANCELLED, reason, batch);
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
      FinishCancelled(e, "", batch);
    } else {
      AppendNoteEvent(e, absl::StrCat("cancellation requested: ", reason), batch);
    }
  }
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
      if (absl::Status s = WaitCommitted(at->ticket); !s.ok()) return s;
      absl::StatusOr<std::vector<JobEvent>> events =
          store_->ReadEvents(request.id(), sent, at->upto);
      if (!events.ok()) return events.status();
      for (const JobEvent& ev : *events) {
        if (!sink(ev)) return absl::CancelledError("client went away");
      }
      sent = at->upto;
    }
    if (at->terminal && sent >= at->upto) return absl::OkStatus();
  }
}

absl::Status Coordinator::GetJobLogs(const mesa::v1::GetJobLogsRequest& request,
                                     const LogSink& sink, const Cancelled& cancelled) {
  int64_t sent = std::max<int64_t>(request.from_sequence(), 0);
  bool first = true;
  while (true) {
    absl::StatusOr<FollowPoint> at = WaitToFollow(request.id(), sent, /*wait=*/!first,
                                                  [](const JobEntry& e) { return e.row.log_seq; });
    if (!at.ok()) return at.status();
    first = false;
    if (cancelled && cancelled()) return absl::CancelledError("logs cancelled");
    while (at->upto > sent) {
      if (absl::Status s = WaitCommitted(at->ticket); !s.ok()) return s;
      absl::StatusOr<std::vector<mesa::v1::LogLine>> lines =
          store_->ReadLogs(request.id(), sent, at->upto, 1000);
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

absl::StatusOr<mesa::v1::ExplainJobResponse> Coordinator::ExplainJob(
    const mesa::v1::ExplainJobRequest& request) {
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
      if (!e->job.waiting_for().empty()) {
        out.set_reason(absl::StrCat("waiting for ", absl::StrJoin(e->job.waiting_for(), ", "),
                                    " to end (depends_on)"));
        break;
      }
      Scheduler::Explanation x = scheduler_.Explain(e->row.id);
      out.set_queue_position(x.position);
      if (std::string held = QuotaHoldReason(*e); !held.empty()) x.reason = held;
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
                                  e->job.failure_reason().empty() ? "" : ": ",
                                  e->job.failure_reason()));
  }
  return out;
}

}  // namespace mesa::coordinator
