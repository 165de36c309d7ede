#include "coordinator/store_schema.h"

namespace mesa::coordinator {
namespace {

// SQLite: INTEGER is 64-bit, BLOB holds bytes. PostgreSQL: BIGINT everywhere (one integer width,
// so reads decode every integer column the same way), BYTEA for bytes.
constexpr Migration kMigrations[] = {
    // v1: jobs and their events.
    {R"sql(
CREATE TABLE jobs (
  num INTEGER PRIMARY KEY,            -- submission number, FIFO order
  id TEXT NOT NULL UNIQUE,
  client_job_id TEXT,
  state INTEGER NOT NULL,
  queue TEXT NOT NULL,
  priority INTEGER NOT NULL,
  log_seq INTEGER NOT NULL DEFAULT 0,
  cancel_reason TEXT NOT NULL DEFAULT '',
  job BLOB NOT NULL                    -- serialized mesa.v1.Job (spec included)
);
CREATE UNIQUE INDEX jobs_client_job_id ON jobs(client_job_id) WHERE client_job_id IS NOT NULL;
CREATE INDEX jobs_state ON jobs(state);
CREATE TABLE events (
  sequence INTEGER PRIMARY KEY,       -- global, monotonically increasing
  job_id TEXT NOT NULL,
  event BLOB NOT NULL                  -- serialized mesa.v1.JobEvent
);
CREATE INDEX events_job ON events(job_id, sequence);
)sql",
     R"sql(
CREATE TABLE jobs (
  num BIGINT PRIMARY KEY,             -- submission number, FIFO order
  id TEXT NOT NULL UNIQUE,
  client_job_id TEXT,
  state BIGINT NOT NULL,
  queue TEXT NOT NULL,
  priority BIGINT NOT NULL,
  log_seq BIGINT NOT NULL DEFAULT 0,
  cancel_reason TEXT NOT NULL DEFAULT '',
  job BYTEA NOT NULL                   -- serialized mesa.v1.Job (spec included)
);
CREATE UNIQUE INDEX jobs_client_job_id ON jobs(client_job_id) WHERE client_job_id IS NOT NULL;
CREATE INDEX jobs_state ON jobs(state);
CREATE TABLE events (
  sequence BIGINT PRIMARY KEY,        -- global, monotonically increasing
  job_id TEXT NOT NULL,
  event BYTEA NOT NULL                 -- serialized mesa.v1.JobEvent
);
CREATE INDEX events_job ON events(job_id, sequence);
)sql"},
    // v2: logs, attempts (placements, for reconciling after a restart) and workers.
    {R"sql(
CREATE TABLE logs (
  job_id TEXT NOT NULL,
  sequence INTEGER NOT NULL,
  line BLOB NOT NULL,                  -- serialized mesa.v1.LogLine
  PRIMARY KEY (job_id, sequence)
) WITHOUT ROWID;
CREATE TABLE attempts (
  job_id TEXT NOT NULL,
  attempt INTEGER NOT NULL,
  worker_id TEXT NOT NULL,
  assignment BLOB NOT NULL,            -- serialized mesa.v1.Assignment
  PRIMARY KEY (job_id, attempt, worker_id)
) WITHOUT ROWID;
CREATE TABLE workers (
  worker_id TEXT PRIMARY KEY,
  hostname TEXT NOT NULL,
  resources BLOB NOT NULL,             -- serialized mesa.v1.WorkerResources
  state INTEGER NOT NULL,
  last_seen_unix_ms INTEGER NOT NULL
);
)sql",
     R"sql(
CREATE TABLE logs (
  job_id TEXT NOT NULL,
  sequence BIGINT NOT NULL,
  line BYTEA NOT NULL,                 -- serialized mesa.v1.LogLine
  PRIMARY KEY (job_id, sequence)
);
CREATE TABLE attempts (
  job_id TEXT NOT NULL,
  attempt BIGINT NOT NULL,
  worker_id TEXT NOT NULL,
  assignment BYTEA NOT NULL,           -- serialized mesa.v1.Assignment
  PRIMARY KEY (job_id, attempt, worker_id)
);
CREATE TABLE workers (
  worker_id TEXT PRIMARY KEY,
  hostname TEXT NOT NULL,
  resources BYTEA NOT NULL,            -- serialized mesa.v1.WorkerResources
  state BIGINT NOT NULL,
  last_seen_unix_ms BIGINT NOT NULL
);
)sql"},
    // v3: retention. When a job finished (finished jobs before v3 keep 0: a restart reads their
    // end time from the blob), and the highest job number and event sequence ever used.
    {R"sql(
ALTER TABLE jobs ADD COLUMN end_unix_ms INTEGER NOT NULL DEFAULT 0;
CREATE TABLE counters (
  name TEXT PRIMARY KEY,               -- 'job_num', 'sequence'
  value INTEGER NOT NULL
);
)sql",
     R"sql(
ALTER TABLE jobs ADD COLUMN end_unix_ms BIGINT NOT NULL DEFAULT 0;
CREATE TABLE counters (
  name TEXT PRIMARY KEY,               -- 'job_num', 'sequence'
  value BIGINT NOT NULL
);
)sql"},
    // v4: the audit log: one row per mutating call.
    {R"sql(
CREATE TABLE audit (
  id INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused, also after retention deleted the newest
  time_unix_ms INTEGER NOT NULL,
  method TEXT NOT NULL,
  caller TEXT NOT NULL,
  target TEXT NOT NULL,
  result TEXT NOT NULL,
  message TEXT NOT NULL
);
CREATE INDEX audit_time ON audit(time_unix_ms);
)sql",
     R"sql(
CREATE TABLE audit (
  id BIGSERIAL PRIMARY KEY,            -- never reused, also after retention deleted the newest
  time_unix_ms BIGINT NOT NULL,
  method TEXT NOT NULL,
  caller TEXT NOT NULL,
  target TEXT NOT NULL,
  result TEXT NOT NULL,
  message TEXT NOT NULL
);
CREATE INDEX audit_time ON audit(time_unix_ms);
)sql"},
    // v5: cordons: a worker drained by an operator stays drained across a restart.
    {R"sql(
ALTER TABLE workers ADD COLUMN draining INTEGER NOT NULL DEFAULT 0;
)sql",
     R"sql(
ALTER TABLE workers ADD COLUMN draining BIGINT NOT NULL DEFAULT 0;
)sql"},
    // v6: leadership among coordinators sharing the database (docs/coordinator.md, "Replicated
    // coordinators"): one row, its holder, the epoch every write of the holder is fenced by, and
    // when the holder's lease ends (the database's clock, in ms since the epoch).
    {R"sql(
CREATE TABLE leader (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  holder TEXT NOT NULL,
  epoch INTEGER NOT NULL,
  expires_unix_ms INTEGER NOT NULL
);
INSERT INTO leader(id, holder, epoch, expires_unix_ms) VALUES(1, '', 0, 0);
)sql",
     R"sql(
CREATE TABLE leader (
  id BIGINT PRIMARY KEY CHECK (id = 1),
  holder TEXT NOT NULL,
  epoch BIGINT NOT NULL,
  expires_unix_ms BIGINT NOT NULL
);
INSERT INTO leader(id, holder, epoch, expires_unix_ms) VALUES(1, '', 0, 0);
)sql"},
    // v7: a job's own retention (JobSpec.retention_seconds, in ms; 0 = the coordinator's, -1 =
    // for ever), read by the retention sweep without the job's blob.
    {R"sql(
ALTER TABLE jobs ADD COLUMN retention_ms INTEGER NOT NULL DEFAULT 0;
)sql",
     R"sql(
ALTER TABLE jobs ADD COLUMN retention_ms BIGINT NOT NULL DEFAULT 0;
)sql"},
};

}  // namespace

std::span<const Migration> StoreMigrations() { return kMigrations; }

}  // namespace mesa::coordinator
