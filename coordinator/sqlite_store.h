// The job store on an SQLite file (store_backend.h): WAL mode, one connection for the writer
// thread and one for reads (WAL lets reads run while the writer commits).
#ifndef MESANET_COORDINATOR_SQLITE_STORE_H_
#define MESANET_COORDINATOR_SQLITE_STORE_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/store_backend.h"

struct sqlite3;
struct sqlite3_stmt;

namespace mesa::coordinator {

class SqliteBackend : public StoreBackend {
 public:
  // Opens (creating if missing) the database file at `path`; synchronous_full as in
  // Store::Options.
  static absl::StatusOr<std::unique_ptr<SqliteBackend>> Open(const std::string& path,
                                                             bool synchronous_full);
  ~SqliteBackend() override;

  absl::Status Migrate(int max_version) override;
  int schema_version() const override { return schema_version_; }
  absl::Status Apply(const std::vector<WriteBatch::Op>& ops) override;
  absl::StatusOr<LoadedState> Load() override;
  absl::StatusOr<StoredJob> ReadJob(const std::string& id) override;
  absl::StatusOr<std::vector<mesa::v1::JobEvent>> ReadEvents(const std::string& job_id,
                                                             int64_t after, int64_t upto) override;
  absl::StatusOr<std::vector<mesa::v1::LogLine>> ReadLogs(const std::string& job_id, int64_t after,
                                                          int64_t upto, int limit) override;
  absl::StatusOr<std::vector<AuditRow>> ReadAudit(int64_t after_id, int limit,
                                                  const std::string& caller,
                                                  const std::string& target) override;
  absl::StatusOr<std::optional<int64_t>> TryAcquireLeadership(const std::string& holder,
                                                              absl::Duration ttl) override;
  absl::Status RenewLeadership(const std::string& holder, int64_t epoch,
                               absl::Duration ttl) override;
  void SetFence(const std::string& holder, int64_t epoch) override;

 private:
  SqliteBackend() = default;
  absl::Status PrepareWrites();

  int schema_version_ = 0;
  sqlite3* writer_db_ = nullptr;  // used only by the writer thread (and Migrate)
  sqlite3_stmt* put_job_ = nullptr;
  sqlite3_stmt* add_event_ = nullptr;
  sqlite3_stmt* add_log_ = nullptr;
  sqlite3_stmt* put_attempt_ = nullptr;
  sqlite3_stmt* put_worker_ = nullptr;
  sqlite3_stmt* delete_job_[4] = {};  // jobs, events, logs, attempts of one job
  sqlite3_stmt* delete_workers_ = nullptr;
  sqlite3_stmt* delete_worker_ = nullptr;
  sqlite3_stmt* put_counter_ = nullptr;
  sqlite3_stmt* add_audit_ = nullptr;
  sqlite3_stmt* delete_audit_ = nullptr;
  sqlite3_stmt* check_fence_ = nullptr;  // the leader row still names (holder, epoch)

  absl::Mutex read_mu_;
  sqlite3* reader_db_ ABSL_GUARDED_BY(read_mu_) = nullptr;
  // The reads that follow polls repeat, prepared once (lazily) and reset after each use.
  sqlite3_stmt* read_job_ ABSL_GUARDED_BY(read_mu_) = nullptr;
  sqlite3_stmt* read_events_ ABSL_GUARDED_BY(read_mu_) = nullptr;
  sqlite3_stmt* read_logs_ ABSL_GUARDED_BY(read_mu_) = nullptr;
  sqlite3_stmt* read_audit_ ABSL_GUARDED_BY(read_mu_) = nullptr;
  absl::StatusOr<sqlite3_stmt*> ReaderStatement(sqlite3_stmt** slot, const char* sql)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(read_mu_);

  absl::Mutex lease_mu_;
  sqlite3* lease_db_ ABSL_GUARDED_BY(lease_mu_) = nullptr;  // leadership's own connection
  WriteFence fence_;
};

}  // namespace mesa::coordinator

#endif  // MESANET_COORDINATOR_SQLITE_STORE_H_
