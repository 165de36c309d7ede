// The job store on a PostgreSQL server (store_backend.h), through Debian's libpq: one connection
// for the writer thread, one for reads and one for leadership; each reconnects when it broke while
// idle (a server restart; the writer keeps trying for 10 s before the batch fails). A connection
// lost inside a write transaction fails the commit.
// Several coordinators may share one database; schema migrations are serialised among them by an
// advisory lock.
//
// Text columns hold valid UTF-8 without NUL (PostgreSQL's text type refuses both): text is stored
// with invalid sequences and NUL bytes replaced by U+FFFD (identifiers are validated before they
// get here, so only free text — messages, reasons — can change).
#ifndef MESANET_COORDINATOR_POSTGRES_STORE_H_
#define MESANET_COORDINATOR_POSTGRES_STORE_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/store_backend.h"

typedef struct pg_conn PGconn;

namespace mesa::coordinator {

class PostgresBackend : public StoreBackend {
 public:
  // Connects twice to `uri` (postgresql://user@host:port/dbname, libpq's connection URI).
  static absl::StatusOr<std::unique_ptr<PostgresBackend>> Open(const std::string& uri);
  ~PostgresBackend() override;

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
  PostgresBackend() = default;
  absl::Status PrepareWrites();
  absl::Status ApplyOps(const std::vector<WriteBatch::Op>& ops);
  // BEGIN on the writer connection, reconnecting (for up to 10 s) when it broke while idle.
  absl::Status BeginWrite();
  absl::StatusOr<LoadedState> LoadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(read_mu_);
  // Runs `read` on the reader connection; when it failed because the connection broke (a server
  // restart), reconnects and runs it once more.
  template <typename T>
  absl::StatusOr<T> Read(const std::function<absl::StatusOr<T>()>& read)
      ABSL_LOCKS_EXCLUDED(read_mu_);

  int schema_version_ = 0;
  bool writes_prepared_ = false;
  PGconn* writer_ = nullptr;  // the writer thread's (and Migrate's)
  absl::Mutex read_mu_;
  PGconn* reader_ ABSL_GUARDED_BY(read_mu_) = nullptr;
  absl::Mutex lease_mu_;
  PGconn* lease_ ABSL_GUARDED_BY(lease_mu_) = nullptr;  // leadership's own connection
  WriteFence fence_;
};

}  // namespace mesa::coordinator

#endif  // MESANET_COORDINATOR_POSTGRES_STORE_H_
