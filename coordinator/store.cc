#include "coordinator/store.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "coordinator/postgres_store.h"
#include "coordinator/sqlite_store.h"
#include "coordinator/state_machine.h"
#include "coordinator/store_backend.h"
#include "coordinator/store_schema.h"

namespace mesa::coordinator {

using ::mesa::v1::Job;
using ::mesa::v1::JobEvent;
using ::mesa::v1::LogLine;

void WriteBatch::PutJob(const JobRow& row, const Job& job) {
  ops_.push_back(JobOp{row, job.SerializeAsString()});
}
void WriteBatch::AddEvent(const JobEvent& event) {
  ops_.push_back(EventOp{event.sequence(), event.job_id(), event.SerializeAsString()});
}
void WriteBatch::AddLog(const std::string& job_id, const LogLine& line) {
  ops_.push_back(LogOp{job_id, line.sequence(), line.SerializeAsString()});
}
void WriteBatch::PutAttempt(const AttemptRow& attempt) { ops_.push_back(attempt); }
void WriteBatch::PutWorker(const std::string& worker_id, const std::string& hostname,
                           const std::string& resources_blob, int state, int64_t last_seen,
                           int drain_reason) {
  ops_.push_back(WorkerOp{worker_id, hostname, resources_blob, state, last_seen, drain_reason});
}
void WriteBatch::DeleteJob(const std::string& job_id) { ops_.push_back(DeleteJobOp{job_id}); }
void WriteBatch::DeleteWorkersSeenBefore(int64_t cutoff_unix_ms) {
  ops_.push_back(DeleteWorkersOp{cutoff_unix_ms, ""});
}
void WriteBatch::DeleteWorker(const std::string& worker_id) {
  ops_.push_back(DeleteWorkersOp{0, worker_id});
}
void WriteBatch::KeepCounters(int64_t max_job_num, int64_t max_sequence) {
  ops_.push_back(CountersOp{max_job_num, max_sequence});
}

void WriteBatch::AddAudit(const AuditRow& record) { ops_.push_back(record); }

void WriteBatch::DeleteAuditBefore(int64_t cutoff_unix_ms) {
  ops_.push_back(DeleteAuditOp{cutoff_unix_ms});
}

absl::Status AddLoadedJob(JobRow row, bool parsed, Job job, LoadedState& out) {
  out.max_job_num = std::max(out.max_job_num, row.num);
  if (IsTerminal(row.state)) {
    if (row.end_unix_ms == 0 && parsed && job.has_end_time()) {
      row.end_unix_ms = job.end_time().seconds() * 1000 + job.end_time().nanos() / 1000000;
    }
    out.finished.push_back(std::move(row));
    return absl::OkStatus();
  }
  if (!parsed) return absl::DataLossError(absl::StrCat("job ", row.id, ": corrupt blob"));
  out.active.push_back(StoredJob{std::move(row), std::move(job)});
  return absl::OkStatus();
}

absl::Status NewerSchemaError(int version, int latest) {
  return absl::FailedPreconditionError(absl::StrCat(
      "database schema version ", version, " is newer than this binary supports (", latest,
      "): run the newer mesa-coordinator, or restore a backup taken before the upgrade"));
}

absl::Status OldSchemaWriteError(int version) {
  return absl::FailedPreconditionError(
      absl::StrCat("the store was opened at schema version ", version, " (older than ",
                   Store::LatestSchemaVersion(), "): it takes no writes"));
}

absl::Status DeposedError(const std::string& holder, int64_t epoch) {
  return absl::FailedPreconditionError(absl::StrCat(
      "this coordinator (", holder, ") is no longer the leader of epoch ", epoch,
      ": another took over, and its write is refused; it stops, and starts again as a follower"));
}

absl::Status LeadershipLostError(const std::string& holder, int64_t epoch) {
  return absl::FailedPreconditionError(absl::StrCat("leadership of epoch ", epoch, " (", holder,
                                                    ") was taken over by another coordinator"));
}

int Store::LatestSchemaVersion() { return static_cast<int>(StoreMigrations().size()); }

bool Store::IsPostgresUri(const std::string& path) {
  return absl::StartsWith(path, "postgresql://") || absl::StartsWith(path, "postgres://");
}

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const Options& options) {
  std::unique_ptr<StoreBackend> backend;
  if (IsPostgresUri(options.path)) {
    absl::StatusOr<std::unique_ptr<PostgresBackend>> pg = PostgresBackend::Open(options.path);
    if (!pg.ok()) return pg.status();
    backend = *std::move(pg);
  } else {
    absl::StatusOr<std::unique_ptr<SqliteBackend>> lite =
        SqliteBackend::Open(options.path, options.synchronous_full);
    if (!lite.ok()) return lite.status();
    backend = *std::move(lite);
  }
  if (absl::Status s = backend->Migrate(options.max_schema_version); !s.ok()) return s;
  return std::unique_ptr<Store>(new Store(options, std::move(backend)));
}

Store::Store(const Options& options, std::unique_ptr<StoreBackend> backend)
    : options_(options), backend_(std::move(backend)) {
  // A store left at an older schema (migration tests) takes no writes: no writer.
  if (backend_->schema_version() == LatestSchemaVersion()) {
    writer_ = std::thread([this] { WriterLoop(); });
  }
}

Store::~Store() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    work_cv_.SignalAll();
  }
  if (writer_.joinable()) writer_.join();
}

int Store::schema_version() const { return backend_->schema_version(); }

uint64_t Store::Enqueue(WriteBatch batch) {
  absl::MutexLock lock(&mu_);
  for (auto& op : batch.ops_) pending_.push_back(std::move(op));
  ++next_ticket_;
  work_cv_.Signal();
  return next_ticket_;
}

uint64_t Store::LastTicket() {
  absl::MutexLock lock(&mu_);
  return next_ticket_;
}

uint64_t Store::DurableTicket() {
  absl::MutexLock lock(&mu_);
  return error_.ok() ? durable_ticket_ : 0;
}

int64_t Store::transactions() const {
  absl::MutexLock lock(&mu_);
  return transactions_;
}

absl::Status Store::WaitDurable(uint64_t ticket) {
  absl::MutexLock lock(&mu_);
  while (durable_ticket_ < ticket && error_.ok()) durable_cv_.Wait(&mu_);
  return error_;
}

void Store::WriterLoop() {
  std::vector<WriteBatch::Op> ops;
  while (true) {
    uint64_t upto;
    bool failed;
    {
      absl::MutexLock lock(&mu_);
      while (durable_ticket_ == next_ticket_ && !stop_) work_cv_.Wait(&mu_);
      if (durable_ticket_ == next_ticket_ && stop_) return;
      ops.swap(pending_);
      upto = next_ticket_;
      failed = !error_.ok();
    }
    // After a failed commit nothing more is written: later batches build on the rolled-back one
    // (a job's SCHEDULED row on its QUEUED row), so the database stays a prefix of the history.
    absl::Status s = (ops.empty() || failed) ? absl::OkStatus() : backend_->Apply(ops);
    ops.clear();
    // Only this thread sets error_, so !failed means this is the first failure. The callback runs
    // before the error is published: whoever sees a write refused also sees the callback done.
    if (!s.ok() && !failed && options_.on_failure) options_.on_failure(s);
    absl::MutexLock lock(&mu_);
    if (!s.ok() && error_.ok()) error_ = s;
    durable_ticket_ = upto;
    ++transactions_;
    durable_cv_.SignalAll();
  }
}

absl::StatusOr<LoadedState> Store::Load() { return backend_->Load(); }

absl::StatusOr<StoredJob> Store::ReadJob(const std::string& id) { return backend_->ReadJob(id); }

absl::StatusOr<std::vector<JobEvent>> Store::ReadEvents(const std::string& job_id, int64_t after,
                                                        int64_t upto) {
  return backend_->ReadEvents(job_id, after, upto);
}

absl::StatusOr<std::vector<LogLine>> Store::ReadLogs(const std::string& job_id, int64_t after,
                                                     int64_t upto, int limit) {
  return backend_->ReadLogs(job_id, after, upto, limit);
}

absl::StatusOr<std::vector<AuditRow>> Store::ReadAudit(int64_t after_id, int limit,
                                                       const std::string& caller,
                                                       const std::string& target) {
  return backend_->ReadAudit(after_id, limit, caller, target);
}

absl::StatusOr<std::optional<int64_t>> Store::TryAcquireLeadership(const std::string& holder,
                                                                   absl::Duration ttl) {
  return backend_->TryAcquireLeadership(holder, ttl);
}

absl::Status Store::RenewLeadership(const std::string& holder, int64_t epoch, absl::Duration ttl) {
  return backend_->RenewLeadership(holder, epoch, ttl);
}

void Store::SetFence(const std::string& holder, int64_t epoch) {
  backend_->SetFence(holder, epoch);
}

absl::Status Store::BulkInsertForTest(const std::vector<std::pair<JobRow, Job>>& jobs) {
  WriteBatch batch;
  for (const auto& [row, job] : jobs) batch.PutJob(row, job);
  return WaitDurable(Enqueue(std::move(batch)));
}

}  // namespace mesa::coordinator
