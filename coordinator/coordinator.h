// The coordinator's core: jobs, workers, events and scheduling, behind one lock. The gRPC services
// (service.h) are thin adapters over this class; tests drive it directly or over gRPC.
//
// Every mutation is applied in memory under `mu_`, appended to a store WriteBatch, enqueued while
// still holding the lock (so the store's commit order equals the in-memory order), and the caller
// waits for durability after releasing the lock. Watchers and workers only see committed data:
// WatchJob reads events back from the store after they are durable, and Heartbeat waits for the
// commit of the assignments it hands out.
//
// One class over several files: coordinator.cc (loading, the lifecycle helpers the RPCs share,
// scheduling passes, leases), coordinator_jobs.cc (JobService), coordinator_workers.cc
// (RegisterWorker, Heartbeat, UpdateAttempt), coordinator_rendezvous.cc,
// coordinator_retention.cc (deleting old finished jobs and lost workers), coordinator_quotas.cc
// (per user and per queue limits), coordinator_arrays.cc (array jobs), coordinator_audit.cc,
// coordinator_cluster.cc (listing, cordoning, deregistering and forgetting workers);
// coordinator_internal.h holds what they share besides the class.
#ifndef MESANET_COORDINATOR_COORDINATOR_H_
#define MESANET_COORDINATOR_COORDINATOR_H_

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "coordinator/clock.h"
#include "coordinator/metrics.h"
#include "coordinator/owner_paths.h"
#include "coordinator/preemption.h"
#include "coordinator/quotas.h"
#include "coordinator/scheduler.h"
#include "coordinator/store.h"
#include "mesa/v1/cluster_service.pb.h"
#include "mesa/v1/job.pb.h"
#include "mesa/v1/job_service.pb.h"
#include "mesa/v1/worker_service.pb.h"
#include "proto/worker_api_limits.h"

namespace mesa::coordinator {

struct CoordinatorOptions {
  // A worker whose heartbeats stop for this long is lost; its attempts are retried.
  absl::Duration lease_ttl = absl::Seconds(15);
  absl::Duration heartbeat_interval = absl::Seconds(5);
  // At most one stored PROGRESS event per job per interval (Job.progress is always current).
  absl::Duration progress_event_interval = absl::Seconds(1);
  // Upper bounds of the long polls.
  absl::Duration max_heartbeat_wait = absl::Seconds(30);
  absl::Duration max_rendezvous_wait = absl::Seconds(600);
  // Start the scheduling and lease threads. Tests that want full control call
  // RunSchedulingPass() and CheckLeases() themselves.
  bool background_threads = true;
  // Finished jobs whose full Job (spec, result, ...) stays in memory once read or finished; older
  // ones keep only their index row and are read back from the store when asked for.
  int64_t max_loaded_finished_jobs = 10000;
  // Shared storage under which each job without a checkpoint.dir gets <root>/<job_id>, sent to
  // every attempt (Assignment.checkpoint_dir). Empty: each worker's own --checkpoint_root.
  std::string checkpoint_root;
  // Confined paths (docs/coordinator.md): directories jobs may read. Non-empty: every data path of
  // a spec must lie inside one of them (checkpoint reads: or inside checkpoint_root), and a
  // non-empty checkpoint_root confines checkpoint.dir; both go to the workers with each attempt.
  std::vector<std::string> data_roots;
  // checkpoint_root (when set) and every data root.
  std::vector<std::string*> ConfinementRoots() {
    std::vector<std::string*> roots;
    if (!checkpoint_root.empty()) roots.push_back(&checkpoint_root);
    for (std::string& root : data_roots) roots.push_back(&root);
    return roots;
  }
  // Log text stored per job over all attempts (Job.log_bytes); tests lower it.
  int64_t max_log_bytes_per_job = kMaxLogBytesPerJob;
  // Retention (docs/coordinator.md): a finished job (SUCCEEDED, FAILED, CANCELLED) that ended
  // longer than job_retention ago is deleted from memory and the store, with its events, log lines
  // and attempts; a worker lost longer than worker_retention ago is forgotten. Zero keeps them
  // for ever. The background thread sweeps every retention_sweep_interval.
  absl::Duration job_retention = absl::Hours(24 * 30);
  absl::Duration worker_retention = absl::Hours(24 * 7);
  absl::Duration retention_sweep_interval = absl::Minutes(10);
  // Audit records older than this are deleted by the retention sweep; zero keeps them for ever.
  absl::Duration audit_retention = absl::Hours(24 * 90);
  // Per user and per queue limits (coordinator/quotas.h, docs/coordinator.md "Quotas").
  Quotas quotas;
  // By queue: may its pending jobs preempt running jobs of lower priority (preemption.h).
  PreemptionPolicy preemption;
};

class Coordinator {
 public:
  // Loads every job from `store` and rebuilds the in-memory indexes. `metrics` may be null.
  static absl::StatusOr<std::unique_ptr<Coordinator>> Create(Store* store, const Clock* clock,
                                                             Metrics* metrics,
                                                             const CoordinatorOptions& options);
  ~Coordinator();

  // Wakes every waiting call, stops the threads and flushes the store. Idempotent.
  void Shutdown();

  // Returns true to keep streaming; false when the client went away.
  using EventSink = std::function<bool(const mesa::v1::JobEvent&)>;
  using LogSink = std::function<bool(const mesa::v1::LogLine&)>;
  using Cancelled = std::function<bool()>;

  // JobService.
  // `owner`: the authenticated user, recorded as Job.owner; a client_job_id is reused only by
  // the same owner (another's answers ALREADY_EXISTS without naming the job). With an owner
  // that is not `admin` and a checkpoint root, the spec's checkpoint paths are owner-scoped
  // (owner_paths.h).
  absl::StatusOr<mesa::v1::Job> SubmitJob(const mesa::v1::SubmitJobRequest& request,
                                          const std::string& owner = "", bool admin = false);
  absl::StatusOr<mesa::v1::Job> GetJob(const std::string& id);
  // `owner` non-empty: only that user's jobs.
  absl::StatusOr<mesa::v1::ListJobsResponse> ListJobs(const mesa::v1::ListJobsRequest& request,
                                                      const std::string& owner = "");
  absl::StatusOr<mesa::v1::Job> CancelJob(const mesa::v1::CancelJobRequest& request);
  absl::Status WatchJob(const mesa::v1::WatchJobRequest& request, const EventSink& sink,
                        const Cancelled& cancelled);
  absl::Status GetJobLogs(const mesa::v1::GetJobLogsRequest& request, const LogSink& sink,
                          const Cancelled& cancelled);
  absl::StatusOr<mesa::v1::ExplainJobResponse> ExplainJob(
      const mesa::v1::ExplainJobRequest& request);

  // WorkerService.
  absl::StatusOr<mesa::v1::RegisterWorkerResponse> RegisterWorker(
      const mesa::v1::RegisterWorkerRequest& request);
  absl::StatusOr<mesa::v1::HeartbeatResponse> Heartbeat(const mesa::v1::HeartbeatRequest& request,
                                                        const Cancelled& cancelled);
  absl::StatusOr<mesa::v1::UpdateAttemptResponse> UpdateAttempt(
      const mesa::v1::UpdateAttemptRequest& request);
  absl::Status PutRendezvous(const mesa::v1::PutRendezvousRequest& request);
  absl::StatusOr<mesa::v1::GetRendezvousResponse> GetRendezvous(
      const mesa::v1::GetRendezvousRequest& request, const Cancelled& cancelled);
  // A clean goodbye (coordinator_cluster.cc): forgets the worker without counting a lost lease;
  // attempts still recorded on it are retried elsewhere. ABORTED for a stale lease.
  absl::Status DeregisterWorker(const mesa::v1::DeregisterWorkerRequest& request);
  // A leased agent's own drain (WorkerService.DrainSelf): with eviction before it stops, or
  // without when it follows its Kubernetes node's cordon.
  absl::StatusOr<mesa::v1::WorkerInfo> DrainSelf(const mesa::v1::DrainSelfRequest& request);
  // Lifts the agent's own node cordon (WorkerService.UncordonSelf); other cordons stay.
  absl::StatusOr<mesa::v1::WorkerInfo> UncordonSelf(const mesa::v1::UncordonSelfRequest& request);

  // ClusterService (coordinator_cluster.cc). Authorization is the service's.
  absl::StatusOr<mesa::v1::ListWorkersResponse> ListWorkers();
  // Cordons (draining = true) or uncordons a worker: a cordoned worker takes no new attempts,
  // those it runs continue. NOT_FOUND for an unknown worker. The cordon is stored
  // (workers.draining, with `reason`) and outlives a restart and the worker's re-registrations.
  // Of an existing cordon's reason and `reason`, the stronger stays: an operator's, then a
  // stopping agent's, then the Kubernetes node's.
  // Uncordoning (draining = false) with a reason other than an operator's lifts only a cordon of
  // that reason.
  // Deregistering or
  // forgetting the worker drops it. With `evict` (draining only), the attempts running there are
  // stopped (cancellations: their trainers checkpoint) and, once the worker reports them stopped,
  // rescheduled without counting against max_retries (Job.evictions); undelivered ones are
  // rescheduled at once.
  absl::StatusOr<mesa::v1::WorkerInfo> SetWorkerDraining(
      const std::string& id, bool draining, bool evict = false,
      mesa::v1::DrainReason reason = mesa::v1::DRAIN_REASON_OPERATOR);
  // Forgets a worker that holds no live lease (lost or awaiting): FAILED_PRECONDITION for a live
  // one. Attempts still recorded on it are retried elsewhere.
  absl::Status ForgetWorker(const std::string& id);

  // The audit log (coordinator_audit.cc): stores one record, stamped with the clock's time, and
  // waits until it is durable; reads committed records back (Store::ReadAudit).
  absl::Status RecordAudit(AuditRow record);
  absl::StatusOr<std::vector<AuditRow>> ReadAudit(int64_t after_id, int limit,
                                                  const std::string& caller,
                                                  const std::string& target);

  // One scheduling pass (the background thread runs these when something changed). Returns the
  // number of jobs started.
  int RunSchedulingPass();
  // Marks workers whose lease ran out (by the injected clock) as lost and retries their attempts.
  void CheckLeases();
  // The lease loop's tick over placed jobs: counts their GPU time (Metrics::AddGpuSeconds) and
  // cancels attempts that have run past their JobSpec.max_run_seconds.
  void CheckRunningJobs();
  // One retention sweep (the background thread runs one every retention_sweep_interval): deletes
  // finished jobs past job_retention and forgets workers lost for longer than worker_retention.
  // Waits until the deletions are committed.
  struct RetentionSweep {
    int jobs = 0;        // finished jobs deleted
    int workers = 0;     // lost workers forgotten
    bool audit = false;  // audit records older than audit_retention were deleted
    bool more = false;   // stopped at the per-sweep bound: sweep again soon
  };
  absl::StatusOr<RetentionSweep> SweepRetention();

  // Duration of the last scheduling pass's Scheduler::Pass (benchmarks).
  absl::Duration last_pass_duration() const;
  // Finished jobs whose full Job is in memory (tests of the bound).
  int64_t loaded_finished_jobs() const;

 private:
  struct JobEntry {
    JobRow row;
    bool loaded = false;             // `job` is valid (always for jobs that are not finished)
    bool in_finished_cache = false;  // listed in finished_loaded_
    mesa::v1::Job job;
    Placement placement;  // current attempt (SCHEDULED / RUNNING)
    // Per worker of the current attempt: the latest phase it reported.
    absl::flat_hash_map<std::string, mesa::v1::AttemptPhase> phases;
    absl::Time last_progress_event = absl::InfinitePast();
    absl::Time queued_since;
    uint64_t ticket = 0;  // store ticket of the latest write touching this job
    // A finished job's labels, kept when its `job` is dropped from memory (labels_kept), so that
    // listing by label does not read it back from the store.
    std::vector<std::pair<std::string, std::string>> kept_labels;
    bool labels_kept = false;
    // The worker whose eviction stopped the current attempt (SetWorkerDraining with evict); its
    // STOPPED report reschedules the job without using a retry. In memory only.
    std::string evicted_from;
    // When the current attempt became RUNNING (or, for a job loaded running, when this
    // coordinator loaded it): JobSpec.max_run_seconds counts from here. In memory only.
    absl::Time running_since = absl::InfinitePast();
    // The job whose placement stopped the current attempt (preemption, coordinator_preemption.cc);
    // its STOPPED reports reschedule the job without using a retry. In memory only.
    std::string preempted_by;
  };
  struct WorkerEntry {
    std::string id;
    std::string hostname;
    std::string lease_id;
    mesa::v1::WorkerResources resources;
    enum class State { kAwaiting, kLive, kLost } state = State::kAwaiting;
    // Cordoned (not NONE): out of the scheduler while set (SetWorkerDraining); who cordoned it.
    mesa::v1::DrainReason drain = mesa::v1::DRAIN_REASON_NONE;
    bool leaving = false;  // deregistering: waiting heartbeats answer at once
    absl::Time lease_expiry;
    absl::Time lost_at;  // when it became kLost (retention forgets it worker_retention later)
    int waiters = 0;     // heartbeats waiting on `cv`: the entry is not forgotten while > 0
    std::deque<mesa::v1::Assignment> assignments;
    std::deque<mesa::v1::Cancellation> cancellations;
    uint64_t outbox_ticket = 0;
    // Assignments handed out in a heartbeat answer whose arrival is not confirmed yet (listed in
    // `running`, acked, or reported): re-delivered when a later heartbeat shows the answer was
    // lost. By job id; reset with every new lease, like `delivery_seq`.
    struct Delivery {
      int attempt = 0;
      int64_t seq = 0;
      absl::Time at;
    };
    absl::flat_hash_map<std::string, Delivery> unconfirmed;
    int64_t delivery_seq = 0;               // last HeartbeatResponse.delivery_seq of this lease
    absl::flat_hash_set<std::string> jobs;  // jobs with a share on this worker
    absl::CondVar cv;                       // long-polling heartbeats wait here
  };

  Coordinator(Store* store, const Clock* clock, Metrics* metrics,
              const CoordinatorOptions& options);
  absl::Status Load();

  JobEntry* FindJob(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The worker if it is live and `lease_id` is its current lease; null otherwise.
  WorkerEntry* FindLeasedWorker(const std::string& worker_id, const std::string& lease_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // FindLeasedWorker, or ABORTED (register again) for an unknown or stale lease.
  absl::StatusOr<WorkerEntry*> LeasedWorker(const std::string& worker_id,
                                            const std::string& lease_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A worker call about attempt `e` must come from a live worker of that attempt with its current
  // lease: ABORTED (register again, then retry) for an unknown or stale lease, FAILED_PRECONDITION
  // for a worker that does not run the attempt. Returns the worker.
  absl::StatusOr<WorkerEntry*> AuthorizeWorkerCall(const std::string& worker_id,
                                                   const std::string& lease_id, const JobEntry& e)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits until the store committed `ticket`; UNAVAILABLE if the store failed. An RPC answers only
  // after its change (or what it hands out) is durable.
  absl::Status WaitCommitted(uint64_t ticket) ABSL_LOCKS_EXCLUDED(mu_);
  // The job with its full Job, read back from the store if it was dropped from memory. The pointer
  // and its `job` stay valid until the lock is released: only DropFinishedJobs unloads, and it
  // runs at the start of API calls, before they hold any entry; retention (SweepRetention)
  // deletes entries under its own hold of the lock, and no call keeps an entry across a wait.
  absl::StatusOr<JobEntry*> FindLoadedJob(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A finished job whose full Job is in memory joins the bounded cache (oldest first out).
  void NoteFinishedLoaded(JobEntry* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Unloads the oldest finished jobs beyond options_.max_loaded_finished_jobs whose last write is
  // durable (the store then has everything memory had).
  void DropFinishedJobs() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // PERMISSION_DENIED when `owner` may not read one of the per-job directories (owner_paths.h).
  absl::Status CheckJobDirReads(const std::vector<JobDirRead>& reads, const std::string& owner)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Where a follower (WatchJob, GetJobLogs) stands: the job's latest sequence of the followed kind,
  // the store ticket that makes it durable, and whether the job has ended.
  struct FollowPoint {
    int64_t upto;
    uint64_t ticket;
    bool terminal;
  };
  // With `wait`, blocks up to 500 ms until `last_seq` of the job passes `sent`, the job ends or the
  // coordinator shuts down (UNAVAILABLE).
  absl::StatusOr<FollowPoint> WaitToFollow(const std::string& id, int64_t sent, bool wait,
                                           int64_t (*last_seq)(const JobEntry&));
  void AppendEvent(JobEntry* e, mesa::v1::JobEvent event, WriteBatch* batch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A note in the job's history: a STATE_CHANGED event that keeps the state (state ==
  // previous_state), e.g. "dependencies met", "cancellation requested", a preemption.
  void AppendNoteEvent(JobEntry* e, std::string message, WriteBatch* batch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A PROGRESS event of the job's current progress, sent at `now` (the rate limit's clock).
  void AppendProgressEvent(JobEntry* e, absl::Time now, WriteBatch* batch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves the job to `to` with a STATE_CHANGED event. Callers establish that the change is in
  // the table (state_machine.h) from the job's state; an invalid one is a bug and aborts.
  void Transition(JobEntry* e, mesa::v1::JobState to, const std::string& message, WriteBatch* batch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PutJob(JobEntry* e, WriteBatch* batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Enqueues the batch, stamps its ticket on the touched jobs, wakes followers; returns the ticket.
  uint64_t Commit(WriteBatch batch, absl::Span<JobEntry* const> touched)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees the attempt's resources; tells the workers other than `except` to stop it.
  void EndAttempt(JobEntry* e, const std::string& reason, const std::string& except)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the attempt of a job whose cancellation (row.cancel_reason) is complete: CANCELLED.
  // The job must be SCHEDULED or RUNNING, as for FailAttemptInfra.
  void FinishCancelled(JobEntry* e, const std::string& except, WriteBatch* batch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // An infrastructure failure of the current attempt (the job is SCHEDULED or RUNNING):
  // RETRYING (re-queued), FAILED (no retries left) or CANCELLED (cancellation requested).
  // `evicted`: the attempt ended for an eviction (drain --evict): counted in Job.evictions, not
  // against max_retries.
  void FailAttemptInfra(JobEntry* e, const std::string& reason, const std::string& except,
                        WriteBatch* batch, bool evicted = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Enqueue(JobEntry* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds a new job to jobs_ and its indexes (by number, by client job id).
  JobEntry* AddJob(std::unique_ptr<JobEntry> e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job, if `attempt` is its current attempt (SCHEDULED / RUNNING); FAILED_PRECONDITION if not.
  absl::StatusOr<JobEntry*> FindCurrentAttempt(const std::string& job_id, int attempt)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes the job's undelivered assignments from the worker's outbox; true if there were any.
  static bool WithdrawAssignments(WorkerEntry* w, const std::string& job_id);
  void KickScheduler() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends, as infrastructure failures, the attempts this worker received (delivered and confirmed)
  // but no longer lists in its heartbeat without having reported their end; returns the store
  // ticket of the change (0 if none).
  uint64_t EndUnlistedAttempts(WorkerEntry* w, const mesa::v1::HeartbeatRequest& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Re-queues assignments this heartbeat shows were lost (see WorkerEntry::unconfirmed); returns
  // the store ticket of any state change it made (0 if none).
  uint64_t RedeliverLost(WorkerEntry* w, const mesa::v1::HeartbeatRequest& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `grace`: the trainers' time between SIGTERM and SIGKILL; zero: the agent's own.
  void PushCancellation(WorkerEntry* w, const std::string& job_id, int attempt,
                        const std::string& reason, absl::Duration grace = absl::ZeroDuration())
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int RunSchedulingPassLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateWorkerMetrics() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The worker as ListWorkers shows it (coordinator_cluster.cc).
  mesa::v1::WorkerInfo DescribeWorker(const WorkerEntry& w) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stops (or, undelivered, reschedules) the attempts on `w` for an eviction; returns the store
  // ticket of any change (0 if none).
  uint64_t EvictAttempts(WorkerEntry* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After a scheduling pass: the first pending job (in scheduling order) of a queue whose policy
  // is lower_priority stops the fewest running jobs of lower priority that make room for it,
  // unless the victims of an earlier preemption are still stopping (coordinator_preemption.cc).
  void PreemptForPendingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes a worker that is leaving for good (deregistration, ForgetWorker): its attempts fail
  // as infrastructure (retried elsewhere), its row and metric series go. Returns the ticket.
  uint64_t RemoveWorkerLocked(WorkerEntry* w, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetStateCount(mesa::v1::JobState state, int delta) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  mesa::v1::Assignment MakeAssignment(const JobEntry& e, const std::string& worker_id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Retention: removes a finished job from memory and adds its deletion to `batch`.
  void ForgetJob(JobEntry* e, WriteBatch* batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Quotas (coordinator_quotas.cc). At submit: RESOURCE_EXHAUSTED when the job alone needs more
  // GPUs than a GPU quota, when the owner or queue already has its maximum of queued jobs, or when
  // its submission bucket is empty; takes a submission token of each bucket only when all pass.
  absl::Status CheckSubmitQuotas(const std::string& owner, const std::string& queue,
                                 const Demand& demand) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The GPU quotas as a scheduler admission (null when none is set): a job whose owner or queue
  // would exceed its GPU quota stays queued until their running jobs free enough.
  struct GpuUse {
    absl::flat_hash_map<std::string, int64_t> by_user, by_queue;
  };
  GpuUse CountGpusInUse() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Why a pending job is held by a GPU quota now; empty if it is not.
  std::string QuotaHoldReason(const JobEntry& e) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A new job entry (no state yet) with its id, owner and creation time, added to the indexes.
  JobEntry* NewJobLocked(const mesa::v1::JobSpec& spec, const std::string& client_job_id,
                         const std::string& owner, bool admin) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Cancels a plain job: a pending one at once, an active one by asking its workers to stop.
  void CancelLocked(JobEntry* e, const std::string& reason, WriteBatch* batch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Array jobs (coordinator_arrays.cc; docs/evaluation.md "Array jobs"). The parent holds no
  // resources and never enters the scheduler; its children are plain EVAL jobs labelled with its
  // id, at most array.max_parallel of them admitted to the scheduler at once (the rest wait,
  // QUEUED, in `held`). The parent's state follows its children's; when the last ends it gets
  // JobResult.array.
  struct ArrayEntry {
    std::vector<std::string> children;  // in the product's order
    int max_parallel = 0;               // 0: no limit
    std::deque<std::string> held;       // QUEUED children not yet admitted
  };
  // Creates the parent and its children in one batch; returns the parent and the batch's ticket.
  absl::StatusOr<JobEntry*> SubmitArrayLocked(const mesa::v1::SubmitJobRequest& request,
                                              const std::string& owner, bool admin,
                                              uint64_t* ticket) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A child of an array changed state (called by Transition): the parent follows, a held child
  // is admitted when one ends, and the last to end finishes the parent.
  void NoteArrayChild(JobEntry* child, mesa::v1::JobState to, WriteBatch* batch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // An unfinished parent as GetJob and ListJobs show it: its table's children with their states
  // now (the stored table has them from the parent's end on).
  void FillArrayChildStates(mesa::v1::Job* job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Cancels every unfinished child; the parent ends CANCELLED with the last of them.
  void CancelArrayLocked(JobEntry* parent, const std::string& reason, WriteBatch* batch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // At load: the unfinished parents' entries, and their children beyond max_parallel held again.
  void LoadArraysLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Pipelines (coordinator_pipelines.cc, JobSpec.depends_on). At submit: every dependency exists
  // and is the owner's (an admin's: anyone's); returns the spec with each job:<id> reference
  // replaced by that job's checkpoint root, for the submit checks of the paths.
  absl::StatusOr<mesa::v1::JobSpec> SpecForSubmitChecks(const mesa::v1::JobSpec& spec,
                                                        const std::string& owner, bool admin)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A QUEUED job with dependencies: waits for those not ended (Job.waiting_for), fails when one
  // ended against its condition, else is released: references resolved to the dependencies'
  // latest checkpoints, the resolved spec checked as at submit, and queued for placement.
  void ReleaseOrWait(JobEntry* e, WriteBatch* batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Transition's hook when `ended` reaches a terminal state: its waiting dependants move on.
  void NoteDependencyEnded(const std::string& ended, WriteBatch* batch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `spec`, submitted again under e's client_job_id, is the spec e was submitted with
  // (a released pipeline job's references resolved as they were).
  bool SameSubmittedSpec(const JobEntry& e, const mesa::v1::JobSpec& spec)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The submit checks of a spec's paths and tokenizer (coordinator_jobs.cc), with the lock held.
  absl::Status CheckSpecPathsLocked(const mesa::v1::JobSpec& spec, const std::string& owner,
                                    bool admin) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SchedulerLoop();
  // Checks leases every 200 ms and sweeps retention every retention_sweep_interval.
  void LeaseLoop();

  Store* const store_;
  const Clock* const clock_;
  Metrics* const metrics_;
  const CoordinatorOptions options_;

  mutable absl::Mutex mu_;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  absl::CondVar activity_cv_;  // any event / log line / shutdown: watchers re-check
  absl::CondVar sched_cv_;
  bool sched_dirty_ ABSL_GUARDED_BY(mu_) = false;
  int64_t last_sequence_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_job_num_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t lease_counter_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, std::unique_ptr<JobEntry>> jobs_ ABSL_GUARDED_BY(mu_);
  absl::btree_map<int64_t, JobEntry*> by_num_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, JobEntry*> by_client_id_ ABSL_GUARDED_BY(mu_);
  std::deque<JobEntry*> finished_loaded_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::unique_ptr<WorkerEntry>> workers_ ABSL_GUARDED_BY(mu_);
  // Ids of the cordoned workers (also those not registered since a restart): stored, so a cordon
  // outlives a coordinator restart; a worker registering under one of these ids starts drained.
  absl::flat_hash_map<std::string, mesa::v1::DrainReason> cordoned_ ABSL_GUARDED_BY(mu_);
  int64_t state_counts_[8] ABSL_GUARDED_BY(mu_) = {};
  Scheduler scheduler_ ABSL_GUARDED_BY(mu_);
  absl::Duration last_pass_ ABSL_GUARDED_BY(mu_);
  // When CheckRunningJobs last counted GPU time (InfinitePast: not yet).
  absl::Time last_usage_tick_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // Rendezvous values by (job, attempt, key); dropped when the attempt ends.
  absl::flat_hash_map<std::string, absl::flat_hash_map<std::string, std::string>> rendezvous_
      ABSL_GUARDED_BY(mu_);

  // Unfinished array parents by id, and their children's parent.
  absl::flat_hash_map<std::string, ArrayEntry> arrays_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::string> array_parent_ ABSL_GUARDED_BY(mu_);
  // Parents changed by a child's transition, dependants released or failed by a dependency's
  // end: the next Commit stamps its ticket on them too.
  std::vector<JobEntry*> also_touched_ ABSL_GUARDED_BY(mu_);
  // Waiting dependants (Job.waiting_for) by the id of a job they wait for. Rebuilt at load.
  absl::flat_hash_map<std::string, std::vector<std::string>> dependants_ ABSL_GUARDED_BY(mu_);
  // Jobs preempted whose attempts have not ended yet: no new preemption while any is stopping.
  absl::flat_hash_set<std::string> preempting_ ABSL_GUARDED_BY(mu_);

  SubmitBuckets user_buckets_ ABSL_GUARDED_BY(mu_);
  SubmitBuckets queue_buckets_ ABSL_GUARDED_BY(mu_);

  std::thread scheduler_thread_;
  std::thread lease_thread_;
};

}  // namespace mesa::coordinator

#endif  // MESANET_COORDINATOR_COORDINATOR_H_
