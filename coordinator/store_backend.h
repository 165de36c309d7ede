// The database under the job store (store.h): one interface, two implementations — SQLite
// (sqlite_store.h, the embedded default) and PostgreSQL (postgres_store.h, for production and for
// several coordinators sharing one store). Both hold the same tables, brought up to date by the
// same numbered migrations (store_schema.h), and both pass the same tests (store_test.cc).
#ifndef MESANET_COORDINATOR_STORE_BACKEND_H_
#define MESANET_COORDINATOR_STORE_BACKEND_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/store.h"
#include "mesa/v1/job.pb.h"

namespace mesa::coordinator {

// The (holder, epoch) a backend fences its writes by (Store::SetFence): set by the coordinator's
// thread, read by the writer at the start of each transaction.
class WriteFence {
 public:
  void Set(const std::string& holder, int64_t epoch) {
    absl::MutexLock lock(&mu_);
    holder_ = holder;
    epoch_ = epoch;
  }
  // (holder, epoch); epoch -1: writes are not fenced.
  std::pair<std::string, int64_t> Get() const {
    absl::MutexLock lock(&mu_);
    return {holder_, epoch_};
  }

 private:
  mutable absl::Mutex mu_;
  std::string holder_ ABSL_GUARDED_BY(mu_);
  int64_t epoch_ ABSL_GUARDED_BY(mu_) = -1;
};

class StoreBackend {
 public:
  virtual ~StoreBackend() = default;

  // Brings the schema up to version `max_version` (-1: the latest), each migration in its own
  // transaction with its version bump; FailedPrecondition when the database is newer than this
  // binary. Called once, before anything else.
  virtual absl::Status Migrate(int max_version) = 0;
  virtual int schema_version() const = 0;

  // Applies `ops` in one transaction: all of them or none. Called by one thread at a time (the
  // store's writer).
  virtual absl::Status Apply(const std::vector<WriteBatch::Op>& ops) = 0;

  // Reads of committed data (Store's methods of the same names); safe from any thread.
  virtual absl::StatusOr<LoadedState> Load() = 0;
  virtual absl::StatusOr<StoredJob> ReadJob(const std::string& id) = 0;
  virtual absl::StatusOr<std::vector<mesa::v1::JobEvent>> ReadEvents(const std::string& job_id,
                                                                     int64_t after,
                                                                     int64_t upto) = 0;
  virtual absl::StatusOr<std::vector<mesa::v1::LogLine>> ReadLogs(const std::string& job_id,
                                                                  int64_t after, int64_t upto,
                                                                  int limit) = 0;
  virtual absl::StatusOr<std::vector<AuditRow>> ReadAudit(int64_t after_id, int limit,
                                                          const std::string& caller,
                                                          const std::string& target) = 0;

  // Leadership (Store's methods of the same names), on a connection of its own.
  virtual absl::StatusOr<std::optional<int64_t>> TryAcquireLeadership(const std::string& holder,
                                                                      absl::Duration ttl) = 0;
  virtual absl::Status RenewLeadership(const std::string& holder, int64_t epoch,
                                       absl::Duration ttl) = 0;
  // Called before the writer applies anything fenced (Store::SetFence).
  virtual void SetFence(const std::string& holder, int64_t epoch) = 0;
};

// Load's sorting of one jobs row: finished jobs as compact rows (their end time from the blob
// for rows stored before the end_unix_ms column, v3), others with their job (`parsed`: the blob
// was read and parsed; DataLoss if an unfinished job's was not).
absl::Status AddLoadedJob(JobRow row, bool parsed, mesa::v1::Job job, LoadedState& out);
// The errors both backends give for a database newer than this binary and for a write to a
// database left at an older schema (Store::Options::max_schema_version).
absl::Status NewerSchemaError(int version, int latest);
absl::Status OldSchemaWriteError(int version);
// The refusal of a write by a holder the leader row no longer names (a deposed leader).
absl::Status DeposedError(const std::string& holder, int64_t epoch);
absl::Status LeadershipLostError(const std::string& holder, int64_t epoch);

}  // namespace mesa::coordinator

#endif  // MESANET_COORDINATOR_STORE_BACKEND_H_
