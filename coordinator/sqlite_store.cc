#include "coordinator/sqlite_store.h"

#include <sqlite3.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "coordinator/state_machine.h"
#include "coordinator/store_schema.h"

namespace mesa::coordinator {
namespace {

using ::mesa::v1::Job;
using ::mesa::v1::JobEvent;
using ::mesa::v1::JobState;
using ::mesa::v1::LogLine;

absl::Status SqlError(sqlite3* db, absl::string_view what) {
  return absl::InternalError(absl::StrCat("sqlite: ", what, ": ", sqlite3_errmsg(db)));
}

absl::Status Exec(sqlite3* db, const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    return absl::InternalError(absl::StrCat("sqlite: ", msg, " in: ", sql));
  }
  return absl::OkStatus();
}

absl::StatusOr<sqlite3_stmt*> Prepare(sqlite3* db, const char* sql) {
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db, sql, -1, &stmt, nullptr) != SQLITE_OK) {
    return SqlError(db, absl::StrCat("prepare ", sql));
  }
  return stmt;
}

// Finalizes a statement when it goes out of scope.
struct StmtGuard {
  sqlite3_stmt* stmt;
  ~StmtGuard() { sqlite3_finalize(stmt); }
};

// Resets a kept statement when it goes out of scope (ends its read transaction, drops bindings).
struct StmtReset {
  sqlite3_stmt* stmt;
  ~StmtReset() {
    sqlite3_reset(stmt);
    sqlite3_clear_bindings(stmt);
  }
};

void BindText(sqlite3_stmt* s, int i, const std::string& v) {
  sqlite3_bind_text(s, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
}
void BindBlob(sqlite3_stmt* s, int i, const std::string& v) {
  sqlite3_bind_blob(s, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
}
std::string ColumnString(sqlite3_stmt* s, int i) {
  const void* p = sqlite3_column_blob(s, i);
  int n = sqlite3_column_bytes(s, i);
  return p ? std::string(static_cast<const char*>(p), n) : std::string();
}

JobRow ColumnJobRow(sqlite3_stmt* s) {
  JobRow row;
  row.num = sqlite3_column_int64(s, 0);
  row.id = ColumnString(s, 1);
  row.client_job_id = ColumnString(s, 2);
  row.state = static_cast<JobState>(sqlite3_column_int(s, 3));
  row.queue = ColumnString(s, 4);
  row.priority = sqlite3_column_int(s, 5);
  row.log_seq = sqlite3_column_int64(s, 6);
  row.cancel_reason = ColumnString(s, 7);
  row.end_unix_ms = sqlite3_column_int64(s, 8);
  row.retention_ms = sqlite3_column_int64(s, 9);
  return row;
}

absl::StatusOr<sqlite3*> OpenDb(const std::string& path, bool synchronous_full) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(
      path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    absl::Status s = absl::UnavailableError(absl::StrCat(
        "cannot open database ", path, ": ", db ? sqlite3_errmsg(db) : "out of memory"));
    sqlite3_close(db);
    return s;
  }
  sqlite3_busy_timeout(db, 10000);
  std::string pragmas = absl::StrCat(
      "PRAGMA journal_mode=WAL; PRAGMA synchronous=", synchronous_full ? "FULL" : "NORMAL",
      "; PRAGMA cache_size=-65536; PRAGMA temp_store=MEMORY;");
  absl::Status s = Exec(db, pragmas.c_str());
  if (!s.ok()) {
    sqlite3_close(db);
    return s;
  }
  return db;
}

}  // namespace

SqliteBackend::~SqliteBackend() {
  for (sqlite3_stmt* s : {put_job_, add_event_, add_log_, put_attempt_, put_worker_, delete_job_[0],
                          delete_job_[1], delete_job_[2], delete_job_[3], delete_workers_,
                          delete_worker_, put_counter_, add_audit_, delete_audit_, check_fence_}) {
    sqlite3_finalize(s);
  }
  if (writer_db_) sqlite3_close(writer_db_);
  {
    absl::MutexLock lock(&read_mu_);
    for (sqlite3_stmt* s : {read_job_, read_events_, read_logs_, read_audit_}) sqlite3_finalize(s);
    if (reader_db_) sqlite3_close(reader_db_);
  }
  absl::MutexLock lock(&lease_mu_);
  if (lease_db_) sqlite3_close(lease_db_);
}

absl::StatusOr<std::unique_ptr<SqliteBackend>> SqliteBackend::Open(const std::string& path,
                                                                   bool synchronous_full) {
  std::unique_ptr<SqliteBackend> b(new SqliteBackend());
  absl::StatusOr<sqlite3*> db = OpenDb(path, synchronous_full);
  if (!db.ok()) return db.status();
  b->writer_db_ = *db;
  absl::StatusOr<sqlite3*> reader = OpenDb(path, synchronous_full);
  if (!reader.ok()) return reader.status();
  {
    absl::MutexLock lock(&b->read_mu_);
    b->reader_db_ = *reader;
  }
  absl::StatusOr<sqlite3*> lease = OpenDb(path, synchronous_full);
  if (!lease.ok()) return lease.status();
  absl::MutexLock lock(&b->lease_mu_);
  b->lease_db_ = *lease;
  return b;
}

absl::Status SqliteBackend::PrepareWrites() {
  struct {
    sqlite3_stmt** stmt;
    const char* sql;
  } statements[] = {
      {&put_job_,
       "INSERT INTO jobs(num, id, client_job_id, state, queue, priority, log_seq, cancel_reason, "
       "job, end_unix_ms, retention_ms) "
       "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) ON CONFLICT(num) DO UPDATE SET "
       "state = ?4, priority = ?6, log_seq = ?7, cancel_reason = ?8, job = ?9, end_unix_ms = "
       "?10, retention_ms = ?11"},
      {&add_event_, "INSERT INTO events(sequence, job_id, event) VALUES(?1, ?2, ?3)"},
      {&add_log_, "INSERT OR REPLACE INTO logs(job_id, sequence, line) VALUES(?1, ?2, ?3)"},
      {&put_attempt_,
       "INSERT OR REPLACE INTO attempts(job_id, attempt, worker_id, assignment) VALUES(?1, ?2, "
       "?3, ?4)"},
      {&put_worker_,
       "INSERT OR REPLACE INTO workers(worker_id, hostname, resources, state, "
       "last_seen_unix_ms, draining) VALUES(?1, ?2, ?3, ?4, ?5, ?6)"},
      {&delete_job_[0], "DELETE FROM jobs WHERE id = ?1"},
      {&delete_job_[1], "DELETE FROM events WHERE job_id = ?1"},
      {&delete_job_[2], "DELETE FROM logs WHERE job_id = ?1"},
      {&delete_job_[3], "DELETE FROM attempts WHERE job_id = ?1"},
      {&delete_workers_, "DELETE FROM workers WHERE last_seen_unix_ms < ?1"},
      {&delete_worker_, "DELETE FROM workers WHERE worker_id = ?1"},
      {&put_counter_,
       "INSERT INTO counters(name, value) VALUES(?1, ?2) ON CONFLICT(name) DO UPDATE SET "
       "value = max(value, ?2)"},
      {&add_audit_,
       "INSERT INTO audit(time_unix_ms, method, caller, target, result, message) "
       "VALUES(?1, ?2, ?3, ?4, ?5, ?6)"},
      {&delete_audit_, "DELETE FROM audit WHERE time_unix_ms < ?1"},
      {&check_fence_, "SELECT 1 FROM leader WHERE id = 1 AND holder = ?1 AND epoch = ?2"},
  };
  for (auto& st : statements) {
    absl::StatusOr<sqlite3_stmt*> p = Prepare(writer_db_, st.sql);
    if (!p.ok()) return p.status();
    *st.stmt = *p;
  }
  return absl::OkStatus();
}

absl::Status SqliteBackend::Migrate(int max_version) {
  if (absl::Status s =
          Exec(writer_db_, "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);");
      !s.ok()) {
    return s;
  }
  int version = 0;
  {
    absl::StatusOr<sqlite3_stmt*> st =
        Prepare(writer_db_, "SELECT MAX(version) FROM schema_version");
    if (!st.ok()) return st.status();
    StmtGuard g{*st};
    if (sqlite3_step(*st) == SQLITE_ROW) version = sqlite3_column_int(*st, 0);
  }
  const int latest = static_cast<int>(StoreMigrations().size());
  if (version > latest) return NewerSchemaError(version, latest);
  const int target = max_version < 0 ? latest : std::min(max_version, latest);
  for (int v = version; v < target; ++v) {
    // Each migration and its version bump commit together: a crash leaves the old or new schema.
    std::string sql =
        absl::StrCat("BEGIN IMMEDIATE;", StoreMigrations()[v].sqlite,
                     "INSERT INTO schema_version(version) VALUES(", v + 1, "); COMMIT;");
    if (absl::Status s = Exec(writer_db_, sql.c_str()); !s.ok()) {
      Exec(writer_db_, "ROLLBACK;").IgnoreError();
      return s;
    }
  }
  schema_version_ = std::max(version, target);
  // Writes only to a database of the latest schema (an older one is a migration test's).
  return schema_version_ == latest ? PrepareWrites() : absl::OkStatus();
}

absl::StatusOr<sqlite3_stmt*> SqliteBackend::ReaderStatement(sqlite3_stmt** slot, const char* sql) {
  if (*slot == nullptr) {
    absl::StatusOr<sqlite3_stmt*> st = Prepare(reader_db_, sql);
    if (!st.ok()) return st.status();
    *slot = *st;
  }
  return *slot;
}

absl::Status SqliteBackend::Apply(const std::vector<WriteBatch::Op>& ops) {
  if (put_job_ == nullptr) return OldSchemaWriteError(schema_version_);
  if (absl::Status s = Exec(writer_db_, "BEGIN IMMEDIATE;"); !s.ok()) return s;
  // The fence: inside the transaction, whose write lock holds a takeover off until it ends.
  const auto [holder, epoch] = fence_.Get();
  if (epoch >= 0) {
    StmtReset g{check_fence_};
    BindText(check_fence_, 1, holder);
    sqlite3_bind_int64(check_fence_, 2, epoch);
    if (sqlite3_step(check_fence_) != SQLITE_ROW) {
      Exec(writer_db_, "ROLLBACK;").IgnoreError();
      return DeposedError(holder, epoch);
    }
  }
  auto run = [this](sqlite3_stmt* st) -> absl::Status {
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    if (rc != SQLITE_DONE) return SqlError(writer_db_, "write");
    return absl::OkStatus();
  };
  absl::Status status;
  for (const auto& op : ops) {
    if (const auto* j = std::get_if<WriteBatch::JobOp>(&op)) {
      sqlite3_bind_int64(put_job_, 1, j->row.num);
      BindText(put_job_, 2, j->row.id);
      if (j->row.client_job_id.empty()) {
        sqlite3_bind_null(put_job_, 3);
      } else {
        BindText(put_job_, 3, j->row.client_job_id);
      }
      sqlite3_bind_int(put_job_, 4, j->row.state);
      BindText(put_job_, 5, j->row.queue);
      sqlite3_bind_int(put_job_, 6, j->row.priority);
      sqlite3_bind_int64(put_job_, 7, j->row.log_seq);
      BindText(put_job_, 8, j->row.cancel_reason);
      BindBlob(put_job_, 9, j->blob);
      sqlite3_bind_int64(put_job_, 10, j->row.end_unix_ms);
      sqlite3_bind_int64(put_job_, 11, j->row.retention_ms);
      status = run(put_job_);
    } else if (const auto* e = std::get_if<WriteBatch::EventOp>(&op)) {
      sqlite3_bind_int64(add_event_, 1, e->sequence);
      BindText(add_event_, 2, e->job_id);
      BindBlob(add_event_, 3, e->blob);
      status = run(add_event_);
    } else if (const auto* l = std::get_if<WriteBatch::LogOp>(&op)) {
      BindText(add_log_, 1, l->job_id);
      sqlite3_bind_int64(add_log_, 2, l->sequence);
      BindBlob(add_log_, 3, l->blob);
      status = run(add_log_);
    } else if (const auto* a = std::get_if<AttemptRow>(&op)) {
      BindText(put_attempt_, 1, a->job_id);
      sqlite3_bind_int(put_attempt_, 2, a->attempt);
      BindText(put_attempt_, 3, a->worker_id);
      BindBlob(put_attempt_, 4, a->assignment);
      status = run(put_attempt_);
    } else if (const auto* w = std::get_if<WriteBatch::WorkerOp>(&op)) {
      BindText(put_worker_, 1, w->id);
      BindText(put_worker_, 2, w->hostname);
      BindBlob(put_worker_, 3, w->resources);
      sqlite3_bind_int(put_worker_, 4, w->state);
      sqlite3_bind_int64(put_worker_, 5, w->last_seen);
      sqlite3_bind_int(put_worker_, 6, w->drain_reason);
      status = run(put_worker_);
    } else if (const auto* d = std::get_if<WriteBatch::DeleteJobOp>(&op)) {
      for (sqlite3_stmt* st : delete_job_) {
        BindText(st, 1, d->job_id);
        if (status = run(st); !status.ok()) break;
      }
    } else if (const auto* dw = std::get_if<WriteBatch::DeleteWorkersOp>(&op)) {
      if (dw->worker_id.empty()) {
        sqlite3_bind_int64(delete_workers_, 1, dw->cutoff);
        status = run(delete_workers_);
      } else {
        BindText(delete_worker_, 1, dw->worker_id);
        status = run(delete_worker_);
      }
    } else if (const auto* c = std::get_if<WriteBatch::CountersOp>(&op)) {
      for (const auto& [name, value] :
           {std::pair<const char*, int64_t>{"job_num", c->job_num}, {"sequence", c->sequence}}) {
        sqlite3_bind_text(put_counter_, 1, name, -1, SQLITE_STATIC);
        sqlite3_bind_int64(put_counter_, 2, value);
        if (status = run(put_counter_); !status.ok()) break;
      }
    } else if (const auto* r = std::get_if<AuditRow>(&op)) {
      sqlite3_bind_int64(add_audit_, 1, r->time_unix_ms);
      int i = 2;
      for (const std::string* v : {&r->method, &r->caller, &r->target, &r->result, &r->message}) {
        BindText(add_audit_, i++, *v);
      }
      status = run(add_audit_);
    } else if (const auto* da = std::get_if<WriteBatch::DeleteAuditOp>(&op)) {
      sqlite3_bind_int64(delete_audit_, 1, da->cutoff);
      status = run(delete_audit_);
    }
    if (!status.ok()) break;
  }
  if (!status.ok()) {
    Exec(writer_db_, "ROLLBACK;").IgnoreError();
    return status;
  }
  absl::Status committed = Exec(writer_db_, "COMMIT;");
  // A COMMIT that failed (SQLITE_BUSY, I/O error) may leave the transaction open.
  if (!committed.ok() && !sqlite3_get_autocommit(writer_db_))
    Exec(writer_db_, "ROLLBACK;").IgnoreError();
  return committed;
}

absl::StatusOr<LoadedState> SqliteBackend::Load() {
  absl::MutexLock lock(&read_mu_);
  LoadedState out;
  {
    // One scan; the blob is read only for jobs that are not finished, and for finished jobs
    // stored before v3 (their end time is only in the blob).
    const std::string sql =
        absl::StrCat("SELECT ", kJobRowColumns,
                     ", CASE WHEN state IN (4, 5, 6) AND end_unix_ms > 0 THEN NULL ELSE job END "
                     "FROM jobs ORDER BY num");
    absl::StatusOr<sqlite3_stmt*> st = Prepare(reader_db_, sql.c_str());
    if (!st.ok()) return st.status();
    StmtGuard g{*st};
    int rc;
    while ((rc = sqlite3_step(*st)) == SQLITE_ROW) {
      JobRow row = ColumnJobRow(*st);
      mesa::v1::Job job;
      const bool parsed = sqlite3_column_type(*st, kJobBlobColumn) != SQLITE_NULL &&
                          job.ParseFromArray(sqlite3_column_blob(*st, kJobBlobColumn),
                                             sqlite3_column_bytes(*st, kJobBlobColumn));
      if (absl::Status s = AddLoadedJob(std::move(row), parsed, std::move(job), out); !s.ok()) {
        return s;
      }
    }
    if (rc != SQLITE_DONE) return SqlError(reader_db_, "load jobs");
  }
  {
    absl::StatusOr<sqlite3_stmt*> st = Prepare(reader_db_, "SELECT MAX(sequence) FROM events");
    if (!st.ok()) return st.status();
    StmtGuard g{*st};
    if (sqlite3_step(*st) == SQLITE_ROW) out.max_sequence = sqlite3_column_int64(*st, 0);
  }
  {
    absl::StatusOr<sqlite3_stmt*> st = Prepare(reader_db_, "SELECT name, value FROM counters");
    if (!st.ok()) return st.status();
    StmtGuard g{*st};
    while (sqlite3_step(*st) == SQLITE_ROW) {
      const std::string name = ColumnString(*st, 0);
      int64_t* counter = name == "job_num"    ? &out.max_job_num
                         : name == "sequence" ? &out.max_sequence
                                              : nullptr;
      if (counter != nullptr) *counter = std::max<int64_t>(*counter, sqlite3_column_int64(*st, 1));
    }
  }
  {
    absl::StatusOr<sqlite3_stmt*> st = Prepare(reader_db_,
                                               "SELECT job_id, attempt, worker_id, assignment FROM "
                                               "attempts WHERE job_id = ?1 AND attempt = ?2");
    if (!st.ok()) return st.status();
    StmtGuard g{*st};
    for (const StoredJob& sj : out.active) {
      if (!IsActive(sj.row.state)) continue;
      BindText(*st, 1, sj.row.id);
      sqlite3_bind_int(*st, 2, sj.job.attempts());
      while (sqlite3_step(*st) == SQLITE_ROW) {
        out.attempts.push_back(AttemptRow{ColumnString(*st, 0), sqlite3_column_int(*st, 1),
                                          ColumnString(*st, 2), ColumnString(*st, 3)});
      }
      sqlite3_reset(*st);
    }
  }
  if (schema_version_ >= 5) {
    absl::StatusOr<sqlite3_stmt*> st =
        Prepare(reader_db_, "SELECT worker_id, draining FROM workers WHERE draining != 0");
    if (!st.ok()) return st.status();
    StmtGuard g{*st};
    while (sqlite3_step(*st) == SQLITE_ROW) {
      out.draining_workers.emplace_back(ColumnString(*st, 0), sqlite3_column_int(*st, 1));
    }
  }
  return out;
}

absl::StatusOr<StoredJob> SqliteBackend::ReadJob(const std::string& id) {
  absl::MutexLock lock(&read_mu_);
  static const std::string sql =
      absl::StrCat("SELECT ", kJobRowColumns, ", job FROM jobs WHERE id = ?1");
  absl::StatusOr<sqlite3_stmt*> st = ReaderStatement(&read_job_, sql.c_str());
  if (!st.ok()) return st.status();
  StmtReset g{*st};
  BindText(*st, 1, id);
  if (sqlite3_step(*st) != SQLITE_ROW)
    return absl::NotFoundError(absl::StrCat("job ", id, " not found"));
  StoredJob sj;
  sj.row = ColumnJobRow(*st);
  if (!sj.job.ParseFromArray(sqlite3_column_blob(*st, kJobBlobColumn),
                             sqlite3_column_bytes(*st, kJobBlobColumn))) {
    return absl::DataLossError(absl::StrCat("job ", id, ": corrupt blob"));
  }
  return sj;
}

absl::StatusOr<std::vector<JobEvent>> SqliteBackend::ReadEvents(const std::string& job_id,
                                                                int64_t after, int64_t upto) {
  absl::MutexLock lock(&read_mu_);
  absl::StatusOr<sqlite3_stmt*> st =
      ReaderStatement(&read_events_,
                      "SELECT event FROM events WHERE job_id = ?1 AND sequence > ?2 AND sequence "
                      "<= ?3 ORDER BY sequence");
  if (!st.ok()) return st.status();
  StmtReset g{*st};
  BindText(*st, 1, job_id);
  sqlite3_bind_int64(*st, 2, after);
  sqlite3_bind_int64(*st, 3, upto < 0 ? INT64_MAX : upto);
  std::vector<JobEvent> out;
  while (sqlite3_step(*st) == SQLITE_ROW) {
    JobEvent e;
    if (!e.ParseFromArray(sqlite3_column_blob(*st, 0), sqlite3_column_bytes(*st, 0))) {
      return absl::DataLossError("corrupt event");
    }
    out.push_back(std::move(e));
  }
  return out;
}

absl::StatusOr<std::vector<LogLine>> SqliteBackend::ReadLogs(const std::string& job_id,
                                                             int64_t after, int64_t upto,
                                                             int limit) {
  absl::MutexLock lock(&read_mu_);
  absl::StatusOr<sqlite3_stmt*> st =
      ReaderStatement(&read_logs_,
                      "SELECT line FROM logs WHERE job_id = ?1 AND sequence > ?2 AND sequence <= "
                      "?3 ORDER BY sequence LIMIT ?4");
  if (!st.ok()) return st.status();
  StmtReset g{*st};
  BindText(*st, 1, job_id);
  sqlite3_bind_int64(*st, 2, after);
  sqlite3_bind_int64(*st, 3, upto < 0 ? INT64_MAX : upto);
  sqlite3_bind_int(*st, 4, limit);
  std::vector<LogLine> out;
  while (sqlite3_step(*st) == SQLITE_ROW) {
    LogLine l;
    if (!l.ParseFromArray(sqlite3_column_blob(*st, 0), sqlite3_column_bytes(*st, 0))) {
      return absl::DataLossError("corrupt log line");
    }
    out.push_back(std::move(l));
  }
  return out;
}

absl::StatusOr<std::vector<AuditRow>> SqliteBackend::ReadAudit(int64_t after_id, int limit,
                                                               const std::string& caller,
                                                               const std::string& target) {
  absl::MutexLock lock(&read_mu_);
  absl::StatusOr<sqlite3_stmt*> st = ReaderStatement(
      &read_audit_,
      "SELECT id, time_unix_ms, method, caller, target, result, message FROM audit WHERE id > ?1 "
      "AND (?2 = '' OR caller = ?2) AND (?3 = '' OR target = ?3) ORDER BY id LIMIT ?4");
  if (!st.ok()) return st.status();
  StmtReset g{*st};
  sqlite3_bind_int64(*st, 1, after_id);
  BindText(*st, 2, caller);
  BindText(*st, 3, target);
  sqlite3_bind_int(*st, 4, limit);
  std::vector<AuditRow> out;
  auto text = [&](int column) {
    const unsigned char* t = sqlite3_column_text(*st, column);
    return t == nullptr ? std::string()
                        : std::string(reinterpret_cast<const char*>(t),
                                      static_cast<size_t>(sqlite3_column_bytes(*st, column)));
  };
  int rc;
  while ((rc = sqlite3_step(*st)) == SQLITE_ROW) {
    out.push_back(AuditRow{.id = sqlite3_column_int64(*st, 0),
                           .time_unix_ms = sqlite3_column_int64(*st, 1),
                           .method = text(2),
                           .caller = text(3),
                           .target = text(4),
                           .result = text(5),
                           .message = text(6)});
  }
  if (rc != SQLITE_DONE) return SqlError(reader_db_, "read audit");
  return out;
}

// The database's clock, for leases: ms since the Unix epoch.
constexpr char kSqliteNowMs[] = "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)";

absl::StatusOr<std::optional<int64_t>> SqliteBackend::TryAcquireLeadership(
    const std::string& holder, absl::Duration ttl) {
  absl::MutexLock lock(&lease_mu_);
  const std::string sql = absl::StrCat(
      "UPDATE leader SET holder = ?1, epoch = epoch + 1, expires_unix_ms = ", kSqliteNowMs,
      " + ?2 WHERE id = 1 AND expires_unix_ms < ", kSqliteNowMs, " RETURNING epoch");
  absl::StatusOr<sqlite3_stmt*> st = Prepare(lease_db_, sql.c_str());
  if (!st.ok()) return st.status();
  StmtGuard g{*st};
  BindText(*st, 1, holder);
  sqlite3_bind_int64(*st, 2, absl::ToInt64Milliseconds(ttl));
  const int rc = sqlite3_step(*st);
  if (rc == SQLITE_ROW) {
    const int64_t epoch = sqlite3_column_int64(*st, 0);
    if (sqlite3_step(*st) != SQLITE_DONE) return SqlError(lease_db_, "acquire leadership");
    return std::optional<int64_t>(epoch);
  }
  if (rc != SQLITE_DONE) return SqlError(lease_db_, "acquire leadership");
  return std::optional<int64_t>();
}

absl::Status SqliteBackend::RenewLeadership(const std::string& holder, int64_t epoch,
                                            absl::Duration ttl) {
  absl::MutexLock lock(&lease_mu_);
  const std::string sql = absl::StrCat("UPDATE leader SET expires_unix_ms = ", kSqliteNowMs,
                                       " + ?3 WHERE id = 1 AND holder = ?1 AND epoch = ?2");
  absl::StatusOr<sqlite3_stmt*> st = Prepare(lease_db_, sql.c_str());
  if (!st.ok()) return st.status();
  StmtGuard g{*st};
  BindText(*st, 1, holder);
  sqlite3_bind_int64(*st, 2, epoch);
  sqlite3_bind_int64(*st, 3, absl::ToInt64Milliseconds(ttl));
  if (sqlite3_step(*st) != SQLITE_DONE) return SqlError(lease_db_, "renew leadership");
  if (sqlite3_changes(lease_db_) != 1) return LeadershipLostError(holder, epoch);
  return absl::OkStatus();
}

void SqliteBackend::SetFence(const std::string& holder, int64_t epoch) {
  fence_.Set(holder, epoch);
}

}  // namespace mesa::coordinator
