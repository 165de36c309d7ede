// Durable job store, on SQLite (WAL; the default) or PostgreSQL.
//
// Writes are queued as batches and committed by one writer thread. Whatever accumulates while a
// transaction commits goes into the next one (group commit), so many concurrent submissions share
// one fsync. Enqueue() returns a ticket; WaitDurable(ticket) returns once the batch has committed.
// Batches commit in the order they were enqueued, so a caller that enqueues under its own lock
// gets the store's order equal to its own.
//
// Reads use a second connection, so they run while the writer commits. The tables, migrations and
// durability argument are described in docs/coordinator.md.
#ifndef MESANET_COORDINATOR_STORE_H_
#define MESANET_COORDINATOR_STORE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "mesa/v1/job.pb.h"

namespace mesa::coordinator {

// One row of the jobs table without the job blob (what a restart loads for finished jobs).
struct JobRow {
  int64_t num = 0;  // submission number: FIFO order within a priority level
  std::string id;
  std::string client_job_id;
  mesa::v1::JobState state = mesa::v1::JOB_STATE_UNSPECIFIED;
  std::string queue;
  int32_t priority = 0;
  int64_t log_seq = 0;        // last log line sequence of the job
  std::string cancel_reason;  // non-empty: cancellation requested, not yet confirmed by workers
  int64_t end_unix_ms = 0;    // when the job finished (terminal states); 0 = not finished
  // JobSpec.retention_seconds in ms: 0 = the coordinator's job_retention, -1 = kept for ever.
  int64_t retention_ms = 0;
};

// A job loaded in full (non-terminal jobs at restart).
struct StoredJob {
  JobRow row;
  mesa::v1::Job job;
};

// Placement of one attempt on one worker: an opaque serialized mesa.v1.Assignment.
struct AttemptRow {
  std::string job_id;
  int32_t attempt = 0;
  std::string worker_id;
  std::string assignment;  // serialized mesa.v1.Assignment
};

// One audit record (docs/coordinator.md, Audit log): a mutating call, who made it and its result.
struct AuditRow {
  int64_t id = 0;  // assigned by the store, increasing
  int64_t time_unix_ms = 0;
  std::string method, caller, target, result, message;
};

struct LoadedState {
  std::vector<StoredJob> active;     // not terminal: loaded with the full Job
  std::vector<JobRow> finished;      // terminal: compact rows only, blobs read on demand
  std::vector<AttemptRow> attempts;  // current attempts of SCHEDULED/RUNNING jobs
  // Highest event sequence and job number ever used, also of jobs that retention deleted since
  // (the counters table), so that neither is handed out twice.
  int64_t max_sequence = 0;
  int64_t max_job_num = 0;
  // Workers cordoned by an operator (ClusterService.DrainWorker), from schema v5.
  // With their mesa.v1.DrainReason numbers (1, an operator's, for rows before the reasons).
  std::vector<std::pair<std::string, int>> draining_workers;
};

// A group of writes committed atomically.
class WriteBatch {
 public:
  void PutJob(const JobRow& row, const mesa::v1::Job& job);
  void AddEvent(const mesa::v1::JobEvent& event);
  void AddLog(const std::string& job_id, const mesa::v1::LogLine& line);
  void PutAttempt(const AttemptRow& attempt);
  void PutWorker(const std::string& worker_id, const std::string& hostname,
                 const std::string& resources_blob, int state, int64_t last_seen_unix_ms,
                 int drain_reason = 0);
  // Retention: deletes the job's row, events, log lines and attempts.
  void DeleteJob(const std::string& job_id);
  // Retention: deletes the rows of workers last seen before `cutoff_unix_ms`.
  void DeleteWorkersSeenBefore(int64_t cutoff_unix_ms);
  // A worker deregistered or forgotten by an operator: deletes its row.
  void DeleteWorker(const std::string& worker_id);
  // The audit log: appends a record; retention deletes those older than `cutoff_unix_ms`.
  void AddAudit(const AuditRow& record);
  void DeleteAuditBefore(int64_t cutoff_unix_ms);
  // Records the highest job number and event sequence used so far (kept as maxima), so that
  // deleting the newest jobs never makes a restart hand out their ids or sequences again.
  void KeepCounters(int64_t max_job_num, int64_t max_sequence);
  bool empty() const { return ops_.empty(); }
  size_t size() const { return ops_.size(); }

  // The writes, in order, as the store backends apply them.
  struct JobOp {
    JobRow row;
    std::string blob;
  };
  struct EventOp {
    int64_t sequence;
    std::string job_id;
    std::string blob;
  };
  struct LogOp {
    std::string job_id;
    int64_t sequence;
    std::string blob;
  };
  struct WorkerOp {
    std::string id, hostname, resources;
    int state;
    int64_t last_seen;
    int drain_reason;  // mesa.v1.DrainReason; 0: not cordoned
  };
  struct DeleteJobOp {
    std::string job_id;
  };
  struct DeleteWorkersOp {
    int64_t cutoff;
    std::string worker_id;  // non-empty: this worker's row only (cutoff unused)
  };
  struct CountersOp {
    int64_t job_num, sequence;
  };
  struct DeleteAuditOp {
    int64_t cutoff;
  };
  using Op = std::variant<JobOp, EventOp, LogOp, AttemptRow, WorkerOp, DeleteJobOp, DeleteWorkersOp,
                          CountersOp, AuditRow, DeleteAuditOp>;

 private:
  friend class Store;
  std::vector<Op> ops_;
};

class StoreBackend;

// The job store: batches of writes queued by any thread and committed in order by one writer
// thread (group commit), and reads of what is committed, on a database backend — an SQLite file
// (the default) or a PostgreSQL server (store_backend.h).
class Store {
 public:
  struct Options {
    // Where the database is: a file path (SQLite, created if missing) or a PostgreSQL connection
    // URI, postgresql://[user@]host[:port]/dbname[?...] (libpq's; also postgres://).
    std::string path;
    // SQLite only. FULL: every commit fsyncs the WAL, so acknowledged writes survive an OS crash
    // or power loss. NORMAL: the WAL is fsynced only at checkpoints; survives a crash of the
    // process (SIGKILL) but an OS crash may lose the latest commits. (PostgreSQL: the server's
    // synchronous_commit decides.)
    bool synchronous_full = true;
    // Apply migrations only up to this version (tests of the migration path); -1 = latest.
    int max_schema_version = -1;
    // Called once, from the writer thread, when the first commit fails (errors are sticky: the
    // store then accepts no more writes). mesa-coordinator exits on it, so that a restart
    // reloads the committed state instead of serving memory the store no longer follows.
    std::function<void(const absl::Status&)> on_failure;
  };

  static absl::StatusOr<std::unique_ptr<Store>> Open(const Options& options);
  ~Store();  // commits what is queued, stops the writer, closes the database

  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  static int LatestSchemaVersion();
  int schema_version() const;
  // Whether `path` names a PostgreSQL database (a postgresql:// or postgres:// URI).
  static bool IsPostgresUri(const std::string& path);

  // Queues `batch`; returns its ticket. Never blocks on I/O.
  uint64_t Enqueue(WriteBatch batch);
  // Blocks until the batch with `ticket` (and all before it) committed. Errors are sticky: once a
  // commit failed the store accepts no more writes.
  absl::Status WaitDurable(uint64_t ticket);
  // Ticket of the latest enqueued batch (0 if none).
  uint64_t LastTicket();
  // Ticket of the latest batch known committed (every batch up to it is in the database).
  uint64_t DurableTicket();
  absl::Status Flush() { return WaitDurable(LastTicket()); }

  // Commits statistics, for the benchmark: transactions and batches committed so far.
  int64_t transactions() const;

  absl::StatusOr<LoadedState> Load();
  // A committed job, NOT_FOUND if absent.
  absl::StatusOr<StoredJob> ReadJob(const std::string& id);
  // Committed events of `job_id` with after < sequence <= upto (upto < 0: no bound), ascending.
  absl::StatusOr<std::vector<mesa::v1::JobEvent>> ReadEvents(const std::string& job_id,
                                                             int64_t after, int64_t upto);
  // Committed log lines with after < sequence <= upto (upto < 0: no bound), at most `limit`.
  absl::StatusOr<std::vector<mesa::v1::LogLine>> ReadLogs(const std::string& job_id, int64_t after,
                                                          int64_t upto, int limit);

  // Committed audit records with id > after_id, oldest first, at most `limit`; `caller` and
  // `target` non-empty: only those matching.
  absl::StatusOr<std::vector<AuditRow>> ReadAudit(int64_t after_id, int limit,
                                                  const std::string& caller,
                                                  const std::string& target);

  // Leadership among coordinators sharing one database (docs/coordinator.md, "Replicated
  // coordinators"), by the database's clock. TryAcquireLeadership takes the leader row for
  // `holder` (a name unique to this process) when the last holder's lease has ended, with the next
  // epoch: that epoch, or nullopt while another's lease runs. RenewLeadership extends the lease
  // of (holder, epoch) by `ttl` from now; FailedPrecondition once another took over.
  absl::StatusOr<std::optional<int64_t>> TryAcquireLeadership(const std::string& holder,
                                                              absl::Duration ttl);
  absl::Status RenewLeadership(const std::string& holder, int64_t epoch, absl::Duration ttl);
  // Fences every later commit by (holder, epoch): each transaction first checks, inside itself,
  // that the leader row still names them (and holds a takeover off until it commits), and is
  // refused — as a failed commit: sticky — once it does not. Call before enqueueing writes.
  void SetFence(const std::string& holder, int64_t epoch);

  // Bulk insert for benchmarks and tests: writes rows directly in one transaction.
  absl::Status BulkInsertForTest(const std::vector<std::pair<JobRow, mesa::v1::Job>>& jobs);

 private:
  Store(const Options& options, std::unique_ptr<StoreBackend> backend);
  void WriterLoop();

  Options options_;
  std::unique_ptr<StoreBackend> backend_;

  mutable absl::Mutex mu_;
  absl::CondVar work_cv_;
  absl::CondVar durable_cv_;
  std::vector<WriteBatch::Op> pending_ ABSL_GUARDED_BY(mu_);
  uint64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t durable_ticket_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int64_t transactions_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread writer_;
};

}  // namespace mesa::coordinator

#endif  // MESANET_COORDINATOR_STORE_H_
