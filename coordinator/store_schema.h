// The job store's schema as numbered migrations (docs/coordinator.md, "Store"): migration i takes
// a database from version i to i + 1, in SQLite's and in PostgreSQL's dialect — the same tables,
// columns and keys in both. Never edit a released entry; append a new one.
#ifndef MESANET_COORDINATOR_STORE_SCHEMA_H_
#define MESANET_COORDINATOR_STORE_SCHEMA_H_

#include <span>

namespace mesa::coordinator {

struct Migration {
  const char* sqlite;
  const char* postgres;
};

std::span<const Migration> StoreMigrations();

// The index columns of a jobs row, selected in this order as columns 0-9 by both backends; a
// query that also reads the blob selects it next, as column kJobBlobColumn.
inline constexpr char kJobRowColumns[] =
    "num, id, client_job_id, state, queue, priority, log_seq, cancel_reason, end_unix_ms, "
    "retention_ms";
inline constexpr int kJobBlobColumn = 10;

}  // namespace mesa::coordinator

#endif  // MESANET_COORDINATOR_STORE_SCHEMA_H_
