// The audit log in the store (docs/coordinator.md, Audit log).
#include <string>
#include <utility>
#include <vector>

#include "coordinator/coordinator.h"

namespace mesa::coordinator {

absl::Status Coordinator::RecordAudit(AuditRow record) {
  uint64_t ticket;
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return absl::UnavailableError("coordinator is shutting down");
    record.time_unix_ms = absl::ToUnixMillis(clock_->Now());
    WriteBatch batch;
    batch.AddAudit(record);
    ticket = Commit(std::move(batch), {});
  }
  return WaitCommitted(ticket);
}

absl::StatusOr<std::vector<AuditRow>> Coordinator::ReadAudit(int64_t after_id, int limit,
                                                             const std::string& caller,
                                                             const std::string& target) {
  return store_->ReadAudit(after_id, limit, caller, target);
}

}  // namespace mesa::coordinator
