#include "coordinator/postgres_store.h"

#include <endian.h>
#include <postgresql/libpq-fe.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/utf8.h"
#include "coordinator/state_machine.h"
#include "coordinator/store_schema.h"

namespace mesa::coordinator {
namespace {

using ::mesa::v1::JobEvent;
using ::mesa::v1::JobState;
using ::mesa::v1::LogLine;

// How long the writer tries to reconnect before a batch fails (a database restart takes seconds).
constexpr absl::Duration kReconnectFor = absl::Seconds(10);

// Serialises schema migrations among coordinators sharing a database (any fixed 64-bit key).
constexpr int64_t kMigrationLockKey = 0x6d657361'73746f72;  // "mesastor"

// Frees a result when it goes out of scope.
struct Result {
  explicit Result(PGresult* result) : r(result) {}
  ~Result() { PQclear(r); }
  Result(const Result&) = delete;
  Result& operator=(const Result&) = delete;
  PGresult* r;
};

std::string ConnError(PGconn* c) {
  std::string m = c ? PQerrorMessage(c) : "out of memory";
  while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
  return m;
}

absl::Status Check(PGconn* c, const Result& res, absl::string_view what) {
  const ExecStatusType st = PQresultStatus(res.r);
  if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) return absl::OkStatus();
  // A refused constraint or statement is the caller's (Internal, like SQLite's); a lost server
  // is Unavailable.
  const std::string msg = absl::StrCat("postgres: ", what, ": ", ConnError(c));
  return PQstatus(c) == CONNECTION_OK ? absl::InternalError(msg) : absl::UnavailableError(msg);
}

absl::Status Exec(PGconn* c, const std::string& sql, absl::string_view what) {
  Result res{PQexec(c, sql.c_str())};
  return Check(c, res, what);
}

// A session's settings, set on every (re)connection. Quiet NOTICEs (CREATE ... IF NOT EXISTS)
// would go to stderr. The writer's: a transaction left open (its coordinator paused or cut off
// between BEGIN and COMMIT) is ended by the server after 5 s, so its share lock on the leader row
// does not hold a takeover off for longer (our transactions never idle: their statements follow
// each other).
enum class Session { kWriter, kOther };
absl::Status ConfigureSession(PGconn* c, Session session) {
  if (absl::Status s = Exec(c, "SET client_min_messages = warning", "settings"); !s.ok()) return s;
  if (session != Session::kWriter) return absl::OkStatus();
  return Exec(c, "SET idle_in_transaction_session_timeout = '5s'", "writer settings");
}

// Reconnects a connection that broke (a server restart, a network cut) and sets it up again.
absl::Status Reconnect(PGconn* c, Session session) {
  PQreset(c);
  if (PQstatus(c) != CONNECTION_OK) {
    return absl::UnavailableError(absl::StrCat("postgres: reconnecting: ", ConnError(c)));
  }
  return ConfigureSession(c, session);
}

absl::StatusOr<PGconn*> Connect(const std::string& uri, Session session) {
  PGconn* c = PQconnectdb(uri.c_str());
  if (c == nullptr || PQstatus(c) != CONNECTION_OK) {
    absl::Status s = absl::UnavailableError(
        absl::StrCat("cannot connect to the PostgreSQL store (", uri, "): ", ConnError(c),
                     "; check that the server runs and the URI's host, port, user and database"));
    PQfinish(c);
    return s;
  }
  if (absl::Status s = ConfigureSession(c, session); !s.ok()) {
    PQfinish(c);
    return s;
  }
  return c;
}

// Statement parameters: integers and text in text format, bytes in binary format.
class Params {
 public:
  Params& Int(int64_t v) { return Add(absl::StrCat(v), 0); }
  // Text columns: valid UTF-8 without NUL (see postgres_store.h).
  Params& Text(const std::string& v) {
    std::string t = base::SanitizeUtf8(v);
    if (t.find('\0') != std::string::npos) {
      t = absl::StrReplaceAll(t, {{absl::string_view("\0", 1), "\xEF\xBF\xBD"}});
    }
    return Add(std::move(t), 0);
  }
  Params& Bytes(const std::string& v) { return Add(v, 1); }
  Params& Null() {
    values_.emplace_back();
    null_.push_back(true);
    formats_.push_back(0);
    return *this;
  }
  PGresult* Run(PGconn* c, const char* statement_name) {
    Collect();
    return PQexecPrepared(c, statement_name, static_cast<int>(values_.size()), ptrs_.data(),
                          lengths_.data(), formats_.data(), /*resultFormat=*/1);
  }
  PGresult* RunSql(PGconn* c, const char* sql) {
    Collect();
    return PQexecParams(c, sql, static_cast<int>(values_.size()), nullptr, ptrs_.data(),
                        lengths_.data(), formats_.data(), /*resultFormat=*/1);
  }

 private:
  Params& Add(std::string v, int format) {
    values_.push_back(std::move(v));
    null_.push_back(false);
    formats_.push_back(format);
    return *this;
  }
  void Collect() {
    ptrs_.clear();
    lengths_.clear();
    for (size_t i = 0; i < values_.size(); ++i) {
      ptrs_.push_back(null_[i] ? nullptr : values_[i].c_str());
      lengths_.push_back(static_cast<int>(values_[i].size()));
    }
  }
  std::vector<std::string> values_;
  std::vector<bool> null_;
  std::vector<int> formats_, lengths_;
  std::vector<const char*> ptrs_;
};

// Binary-format result columns: every integer column is BIGINT (store_schema.cc).
int64_t Int(const PGresult* r, int row, int col) {
  if (PQgetisnull(r, row, col)) return 0;
  const char* v = PQgetvalue(r, row, col);
  if (PQgetlength(r, row, col) == 8) {
    uint64_t u;
    std::memcpy(&u, v, 8);
    return static_cast<int64_t>(be64toh(u));
  }
  uint32_t u = 0;
  std::memcpy(&u, v, std::min(4, PQgetlength(r, row, col)));
  return static_cast<int32_t>(be32toh(u));
}

std::string Str(const PGresult* r, int row, int col) {
  if (PQgetisnull(r, row, col)) return std::string();
  return std::string(PQgetvalue(r, row, col), static_cast<size_t>(PQgetlength(r, row, col)));
}

JobRow RowOf(const PGresult* r, int i) {
  JobRow row;
  row.num = Int(r, i, 0);
  row.id = Str(r, i, 1);
  row.client_job_id = Str(r, i, 2);
  row.state = static_cast<JobState>(Int(r, i, 3));
  row.queue = Str(r, i, 4);
  row.priority = static_cast<int32_t>(Int(r, i, 5));
  row.log_seq = Int(r, i, 6);
  row.cancel_reason = Str(r, i, 7);
  row.end_unix_ms = Int(r, i, 8);
  row.retention_ms = Int(r, i, 9);
  return row;
}

// The writer's statements, prepared once per connection under these names.
struct NamedSql {
  const char* name;
  const char* sql;
};
constexpr NamedSql kWrites[] = {
    {"put_job",
     "INSERT INTO jobs(num, id, client_job_id, state, queue, priority, log_seq, cancel_reason, "
     "job, end_unix_ms, retention_ms) VALUES($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) ON "
     "CONFLICT (num) DO UPDATE SET "
     "state = EXCLUDED.state, priority = EXCLUDED.priority, log_seq = EXCLUDED.log_seq, "
     "cancel_reason = EXCLUDED.cancel_reason, job = EXCLUDED.job, end_unix_ms = "
     "EXCLUDED.end_unix_ms, retention_ms = EXCLUDED.retention_ms"},
    {"add_event", "INSERT INTO events(sequence, job_id, event) VALUES($1, $2, $3)"},
    {"add_log",
     "INSERT INTO logs(job_id, sequence, line) VALUES($1, $2, $3) ON CONFLICT (job_id, sequence) "
     "DO UPDATE SET line = EXCLUDED.line"},
    {"put_attempt",
     "INSERT INTO attempts(job_id, attempt, worker_id, assignment) VALUES($1, $2, $3, $4) ON "
     "CONFLICT (job_id, attempt, worker_id) DO UPDATE SET assignment = EXCLUDED.assignment"},
    {"put_worker",
     "INSERT INTO workers(worker_id, hostname, resources, state, last_seen_unix_ms, draining) "
     "VALUES($1, $2, $3, $4, $5, $6) ON CONFLICT (worker_id) DO UPDATE SET hostname = "
     "EXCLUDED.hostname, resources = EXCLUDED.resources, state = EXCLUDED.state, "
     "last_seen_unix_ms = EXCLUDED.last_seen_unix_ms, draining = EXCLUDED.draining"},
    {"delete_job_jobs", "DELETE FROM jobs WHERE id = $1"},
    {"delete_job_events", "DELETE FROM events WHERE job_id = $1"},
    {"delete_job_logs", "DELETE FROM logs WHERE job_id = $1"},
    {"delete_job_attempts", "DELETE FROM attempts WHERE job_id = $1"},
    {"delete_workers", "DELETE FROM workers WHERE last_seen_unix_ms < $1"},
    {"delete_worker", "DELETE FROM workers WHERE worker_id = $1"},
    {"put_counter",
     "INSERT INTO counters(name, value) VALUES($1, $2) ON CONFLICT (name) DO UPDATE SET value = "
     "GREATEST(counters.value, EXCLUDED.value)"},
    {"add_audit",
     "INSERT INTO audit(time_unix_ms, method, caller, target, result, message) VALUES($1, $2, $3, "
     "$4, $5, $6)"},
    {"delete_audit", "DELETE FROM audit WHERE time_unix_ms < $1"},
    {"check_fence",
     "SELECT epoch FROM leader WHERE id = 1 AND holder = $1 AND epoch = $2 FOR SHARE"},
};

}  // namespace

absl::StatusOr<std::unique_ptr<PostgresBackend>> PostgresBackend::Open(const std::string& uri) {
  std::unique_ptr<PostgresBackend> b(new PostgresBackend());
  absl::StatusOr<PGconn*> writer = Connect(uri, Session::kWriter);
  if (!writer.ok()) return writer.status();
  b->writer_ = *writer;
  absl::StatusOr<PGconn*> reader = Connect(uri, Session::kOther);
  if (!reader.ok()) return reader.status();
  {
    absl::MutexLock lock(&b->read_mu_);
    b->reader_ = *reader;
  }
  absl::StatusOr<PGconn*> lease = Connect(uri, Session::kOther);
  if (!lease.ok()) return lease.status();
  absl::MutexLock lock(&b->lease_mu_);
  b->lease_ = *lease;
  return b;
}

PostgresBackend::~PostgresBackend() {
  PQfinish(writer_);
  {
    absl::MutexLock lock(&read_mu_);
    PQfinish(reader_);
  }
  absl::MutexLock lock(&lease_mu_);
  PQfinish(lease_);
}

absl::Status PostgresBackend::Migrate(int max_version) {
  const int latest = static_cast<int>(StoreMigrations().size());
  // One coordinator at a time: another may be migrating the same database right now.
  if (absl::Status s =
          Exec(writer_, absl::StrCat("SELECT pg_advisory_lock(", kMigrationLockKey, ")"),
               "migration lock");
      !s.ok()) {
    return s;
  }
  auto migrate = [&]() -> absl::Status {
    if (absl::Status s =
            Exec(writer_, "CREATE TABLE IF NOT EXISTS schema_version (version BIGINT NOT NULL)",
                 "schema_version");
        !s.ok()) {
      return s;
    }
    Result res{Params().RunSql(writer_, "SELECT MAX(version) FROM schema_version")};
    if (absl::Status s = Check(writer_, res, "schema version"); !s.ok()) return s;
    const int version = static_cast<int>(Int(res.r, 0, 0));
    if (version > latest) return NewerSchemaError(version, latest);
    const int target = max_version < 0 ? latest : std::min(max_version, latest);
    for (int v = version; v < target; ++v) {
      // Each migration and its version bump commit together (PostgreSQL's DDL is transactional).
      const std::string sql =
          absl::StrCat("BEGIN;", StoreMigrations()[v].postgres,
                       "INSERT INTO schema_version(version) VALUES(", v + 1, "); COMMIT;");
      if (absl::Status s = Exec(writer_, sql, absl::StrCat("migration to v", v + 1)); !s.ok()) {
        Exec(writer_, "ROLLBACK", "rollback").IgnoreError();
        return s;
      }
    }
    schema_version_ = std::max(version, target);
    return absl::OkStatus();
  };
  absl::Status s = migrate();
  Exec(writer_, absl::StrCat("SELECT pg_advisory_unlock(", kMigrationLockKey, ")"), "unlock")
      .IgnoreError();
  if (!s.ok()) return s;
  return schema_version_ == latest ? PrepareWrites() : absl::OkStatus();
}

absl::Status PostgresBackend::PrepareWrites() {
  for (const NamedSql& w : kWrites) {
    Result res{PQprepare(writer_, w.name, w.sql, 0, nullptr)};
    if (absl::Status s = Check(writer_, res, absl::StrCat("prepare ", w.name)); !s.ok()) return s;
  }
  writes_prepared_ = true;
  return absl::OkStatus();
}

absl::Status PostgresBackend::Apply(const std::vector<WriteBatch::Op>& ops) {
  if (!writes_prepared_) return OldSchemaWriteError(schema_version_);
  if (absl::Status s = BeginWrite(); !s.ok()) return s;
  // The fence: checked inside the transaction, and the row locked against a takeover (which
  // updates it) until this transaction ends, so a new leader loads everything this one commits.
  const auto [holder, epoch] = fence_.Get();
  if (epoch >= 0) {
    Params p;
    p.Text(holder).Int(epoch);
    Result res{p.Run(writer_, "check_fence")};
    absl::Status s = Check(writer_, res, "fence");
    if (s.ok() && PQntuples(res.r) == 0) s = DeposedError(holder, epoch);
    if (!s.ok()) {
      Exec(writer_, "ROLLBACK", "rollback").IgnoreError();
      return s;
    }
  }
  absl::Status status = ApplyOps(ops);
  if (!status.ok()) {
    Exec(writer_, "ROLLBACK", "rollback").IgnoreError();
    return status;
  }
  // A COMMIT whose answer is lost (the server or the connection died) may or may not have
  // committed: the error is sticky and the coordinator restarts from what the database holds.
  return Exec(writer_, "COMMIT", "commit");
}

absl::Status PostgresBackend::BeginWrite() {
  absl::Status s = Exec(writer_, "BEGIN", "begin");
  if (s.ok()) return s;
  // The connection broke while idle (a server restart, a network cut; libpq may report the
  // server's goodbye before it marks the connection bad): nothing of this batch was sent, so a new
  // connection may carry it. (One that breaks inside a transaction is a failed commit: its outcome
  // is unknown.)
  // A restart takes a moment: keep trying for a while (the batch waits; nothing is refused).
  const absl::Time give_up = absl::Now() + kReconnectFor;
  absl::Status reconnected = Reconnect(writer_, Session::kWriter);
  while (!reconnected.ok() && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(200));
    reconnected = Reconnect(writer_, Session::kWriter);
  }
  if (!reconnected.ok()) {
    return absl::UnavailableError(absl::StrCat(
        s.message(), "; for ", absl::FormatDuration(kReconnectFor), ": ", reconnected.message()));
  }
  if (absl::Status prepared = PrepareWrites(); !prepared.ok()) return prepared;
  return Exec(writer_, "BEGIN", "begin (reconnected)");
}

absl::Status PostgresBackend::ApplyOps(const std::vector<WriteBatch::Op>& ops) {
  auto run = [this](Params& p, const char* name) {
    Result res{p.Run(writer_, name)};
    return Check(writer_, res, name);
  };
  for (const auto& op : ops) {
    absl::Status status;
    if (const auto* j = std::get_if<WriteBatch::JobOp>(&op)) {
      Params p;
      p.Int(j->row.num).Text(j->row.id);
      if (j->row.client_job_id.empty()) {
        p.Null();
      } else {
        p.Text(j->row.client_job_id);
      }
      p.Int(j->row.state).Text(j->row.queue).Int(j->row.priority).Int(j->row.log_seq);
      p.Text(j->row.cancel_reason).Bytes(j->blob).Int(j->row.end_unix_ms);
      p.Int(j->row.retention_ms);
      status = run(p, "put_job");
    } else if (const auto* e = std::get_if<WriteBatch::EventOp>(&op)) {
      Params p;
      p.Int(e->sequence).Text(e->job_id).Bytes(e->blob);
      status = run(p, "add_event");
    } else if (const auto* l = std::get_if<WriteBatch::LogOp>(&op)) {
      Params p;
      p.Text(l->job_id).Int(l->sequence).Bytes(l->blob);
      status = run(p, "add_log");
    } else if (const auto* a = std::get_if<AttemptRow>(&op)) {
      Params p;
      p.Text(a->job_id).Int(a->attempt).Text(a->worker_id).Bytes(a->assignment);
      status = run(p, "put_attempt");
    } else if (const auto* w = std::get_if<WriteBatch::WorkerOp>(&op)) {
      Params p;
      p.Text(w->id).Text(w->hostname).Bytes(w->resources).Int(w->state).Int(w->last_seen);
      p.Int(w->drain_reason);
      status = run(p, "put_worker");
    } else if (const auto* d = std::get_if<WriteBatch::DeleteJobOp>(&op)) {
      for (const char* name :
           {"delete_job_jobs", "delete_job_events", "delete_job_logs", "delete_job_attempts"}) {
        Params p;
        p.Text(d->job_id);
        if (status = run(p, name); !status.ok()) break;
      }
    } else if (const auto* dw = std::get_if<WriteBatch::DeleteWorkersOp>(&op)) {
      Params p;
      if (dw->worker_id.empty()) {
        p.Int(dw->cutoff);
        status = run(p, "delete_workers");
      } else {
        p.Text(dw->worker_id);
        status = run(p, "delete_worker");
      }
    } else if (const auto* c = std::get_if<WriteBatch::CountersOp>(&op)) {
      for (const auto& [name, value] :
           {std::pair<const char*, int64_t>{"job_num", c->job_num}, {"sequence", c->sequence}}) {
        Params p;
        p.Text(name).Int(value);
        if (status = run(p, "put_counter"); !status.ok()) break;
      }
    } else if (const auto* r = std::get_if<AuditRow>(&op)) {
      Params p;
      p.Int(r->time_unix_ms).Text(r->method).Text(r->caller).Text(r->target).Text(r->result);
      p.Text(r->message);
      status = run(p, "add_audit");
    } else if (const auto* da = std::get_if<WriteBatch::DeleteAuditOp>(&op)) {
      Params p;
      p.Int(da->cutoff);
      status = run(p, "delete_audit");
    }
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

template <typename T>
absl::StatusOr<T> PostgresBackend::Read(const std::function<absl::StatusOr<T>()>& read) {
  absl::MutexLock lock(&read_mu_);
  absl::StatusOr<T> out = read();
  // Any failure: reads are repeatable, and a broken connection may still look fine.
  if (out.ok() || absl::IsNotFound(out.status()) || absl::IsDataLoss(out.status())) return out;
  if (!Reconnect(reader_, Session::kOther).ok()) return out;
  return read();
}

absl::StatusOr<LoadedState> PostgresBackend::Load() {
  return Read<LoadedState>([this]() -> absl::StatusOr<LoadedState> {
    // One snapshot for every table read below.
    if (absl::Status s = Exec(reader_, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", "begin");
        !s.ok()) {
      return s;
    }
    absl::StatusOr<LoadedState> out = LoadLocked();
    Exec(reader_, out.ok() ? "COMMIT" : "ROLLBACK", "end").IgnoreError();
    return out;
  });
}

absl::StatusOr<LoadedState> PostgresBackend::LoadLocked() {
  LoadedState out;
  {
    // The blob only for jobs that are not finished, and for finished ones stored before v3.
    const std::string sql =
        absl::StrCat("SELECT ", kJobRowColumns,
                     ", CASE WHEN state IN (4, 5, 6) AND end_unix_ms > 0 THEN NULL ELSE job END "
                     "FROM jobs ORDER BY num");
    Result res{Params().RunSql(reader_, sql.c_str())};
    if (absl::Status s = Check(reader_, res, "load jobs"); !s.ok()) return s;
    for (int i = 0; i < PQntuples(res.r); ++i) {
      JobRow row = RowOf(res.r, i);
      mesa::v1::Job job;
      const bool parsed = !PQgetisnull(res.r, i, kJobBlobColumn) &&
                          job.ParseFromArray(PQgetvalue(res.r, i, kJobBlobColumn),
                                             PQgetlength(res.r, i, kJobBlobColumn));
      if (absl::Status s = AddLoadedJob(std::move(row), parsed, std::move(job), out); !s.ok()) {
        return s;
      }
    }
  }
  {
    Result res{Params().RunSql(reader_, "SELECT MAX(sequence) FROM events")};
    if (absl::Status s = Check(reader_, res, "max sequence"); !s.ok()) return s;
    out.max_sequence = Int(res.r, 0, 0);
  }
  {
    Result res{Params().RunSql(reader_, "SELECT name, value FROM counters")};
    if (absl::Status s = Check(reader_, res, "counters"); !s.ok()) return s;
    for (int i = 0; i < PQntuples(res.r); ++i) {
      const std::string name = Str(res.r, i, 0);
      int64_t* counter = name == "job_num"    ? &out.max_job_num
                         : name == "sequence" ? &out.max_sequence
                                              : nullptr;
      if (counter != nullptr) *counter = std::max(*counter, Int(res.r, i, 1));
    }
  }
  for (const StoredJob& sj : out.active) {
    if (!IsActive(sj.row.state)) continue;
    Params p;
    p.Text(sj.row.id).Int(sj.job.attempts());
    Result res{p.RunSql(reader_,
                        "SELECT job_id, attempt, worker_id, assignment FROM attempts WHERE job_id "
                        "= $1 AND attempt = $2")};
    if (absl::Status s = Check(reader_, res, "attempts"); !s.ok()) return s;
    for (int i = 0; i < PQntuples(res.r); ++i) {
      out.attempts.push_back(AttemptRow{Str(res.r, i, 0), static_cast<int32_t>(Int(res.r, i, 1)),
                                        Str(res.r, i, 2), Str(res.r, i, 3)});
    }
  }
  if (schema_version_ >= 5) {
    Result res{
        Params().RunSql(reader_, "SELECT worker_id, draining FROM workers WHERE draining != 0")};
    if (absl::Status s = Check(reader_, res, "cordons"); !s.ok()) return s;
    for (int i = 0; i < PQntuples(res.r); ++i) {
      out.draining_workers.emplace_back(Str(res.r, i, 0), static_cast<int>(Int(res.r, i, 1)));
    }
  }
  return out;
}

absl::StatusOr<StoredJob> PostgresBackend::ReadJob(const std::string& id) {
  return Read<StoredJob>([&]() -> absl::StatusOr<StoredJob> {
    static const std::string sql =
        absl::StrCat("SELECT ", kJobRowColumns, ", job FROM jobs WHERE id = $1");
    Params p;
    p.Text(id);
    Result res{p.RunSql(reader_, sql.c_str())};
    if (absl::Status s = Check(reader_, res, "read job"); !s.ok()) return s;
    if (PQntuples(res.r) == 0) return absl::NotFoundError(absl::StrCat("job ", id, " not found"));
    StoredJob sj;
    sj.row = RowOf(res.r, 0);
    if (!sj.job.ParseFromArray(PQgetvalue(res.r, 0, kJobBlobColumn),
                               PQgetlength(res.r, 0, kJobBlobColumn))) {
      return absl::DataLossError(absl::StrCat("job ", id, ": corrupt blob"));
    }
    return sj;
  });
}

absl::StatusOr<std::vector<JobEvent>> PostgresBackend::ReadEvents(const std::string& job_id,
                                                                  int64_t after, int64_t upto) {
  return Read<std::vector<JobEvent>>([&]() -> absl::StatusOr<std::vector<JobEvent>> {
    Params p;
    p.Text(job_id).Int(after).Int(upto < 0 ? INT64_MAX : upto);
    Result res{p.RunSql(reader_,
                        "SELECT event FROM events WHERE job_id = $1 AND sequence > $2 AND sequence "
                        "<= $3 ORDER BY sequence")};
    if (absl::Status s = Check(reader_, res, "read events"); !s.ok()) return s;
    std::vector<JobEvent> out(static_cast<size_t>(PQntuples(res.r)));
    for (int i = 0; i < PQntuples(res.r); ++i) {
      if (!out[i].ParseFromArray(PQgetvalue(res.r, i, 0), PQgetlength(res.r, i, 0))) {
        return absl::DataLossError("corrupt event");
      }
    }
    return out;
  });
}

absl::StatusOr<std::vector<LogLine>> PostgresBackend::ReadLogs(const std::string& job_id,
                                                               int64_t after, int64_t upto,
                                                               int limit) {
  return Read<std::vector<LogLine>>([&]() -> absl::StatusOr<std::vector<LogLine>> {
    Params p;
    p.Text(job_id).Int(after).Int(upto < 0 ? INT64_MAX : upto).Int(limit);
    Result res{p.RunSql(reader_,
                        "SELECT line FROM logs WHERE job_id = $1 AND sequence > $2 AND sequence <= "
                        "$3 ORDER BY sequence LIMIT $4")};
    if (absl::Status s = Check(reader_, res, "read logs"); !s.ok()) return s;
    std::vector<LogLine> out(static_cast<size_t>(PQntuples(res.r)));
    for (int i = 0; i < PQntuples(res.r); ++i) {
      if (!out[i].ParseFromArray(PQgetvalue(res.r, i, 0), PQgetlength(res.r, i, 0))) {
        return absl::DataLossError("corrupt log line");
      }
    }
    return out;
  });
}

absl::StatusOr<std::vector<AuditRow>> PostgresBackend::ReadAudit(int64_t after_id, int limit,
                                                                 const std::string& caller,
                                                                 const std::string& target) {
  return Read<std::vector<AuditRow>>([&]() -> absl::StatusOr<std::vector<AuditRow>> {
    Params p;
    p.Int(after_id).Text(caller).Text(target).Int(limit);
    Result res{p.RunSql(reader_,
                        "SELECT id, time_unix_ms, method, caller, target, result, message FROM "
                        "audit WHERE id > $1 AND ($2 = '' OR caller = $2) AND ($3 = '' OR target = "
                        "$3) ORDER BY id LIMIT $4")};
    if (absl::Status s = Check(reader_, res, "read audit"); !s.ok()) return s;
    std::vector<AuditRow> out;
    for (int i = 0; i < PQntuples(res.r); ++i) {
      out.push_back(AuditRow{.id = Int(res.r, i, 0),
                             .time_unix_ms = Int(res.r, i, 1),
                             .method = Str(res.r, i, 2),
                             .caller = Str(res.r, i, 3),
                             .target = Str(res.r, i, 4),
                             .result = Str(res.r, i, 5),
                             .message = Str(res.r, i, 6)});
    }
    return out;
  });
}

namespace {

// The database's clock, for leases: ms since the Unix epoch (clock_timestamp(): the time of the
// statement itself, not of its transaction's start).
constexpr char kPgNowMs[] = "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT";

// Runs an UPDATE ... [RETURNING epoch] of the leader row on the lease connection, reconnecting
// once when it failed: the rows it changed and the epoch it returned (-1: none). Repeating is
// safe: a renewal is idempotent, and a takeover applied twice fails the second time (the lease is
// no longer free), leaving an epoch nobody uses, which simply expires.
absl::StatusOr<std::pair<int64_t, int64_t>> LeaseUpdate(PGconn* lease, const std::string& sql,
                                                        Params& params) {
  for (int attempt = 0;; ++attempt) {
    Result res{params.RunSql(lease, sql.c_str())};
    absl::Status s = Check(lease, res, "leadership");
    if (s.ok()) {
      const int64_t rows = std::atoll(PQcmdTuples(res.r));
      return std::make_pair(rows, PQntuples(res.r) > 0 ? Int(res.r, 0, 0) : int64_t{-1});
    }
    if (attempt > 0 || !Reconnect(lease, Session::kOther).ok()) return s;
  }
}

}  // namespace

absl::StatusOr<std::optional<int64_t>> PostgresBackend::TryAcquireLeadership(
    const std::string& holder, absl::Duration ttl) {
  absl::MutexLock lock(&lease_mu_);
  const std::string sql =
      absl::StrCat("UPDATE leader SET holder = $1, epoch = epoch + 1, expires_unix_ms = ", kPgNowMs,
                   " + $2 WHERE id = 1 AND expires_unix_ms < ", kPgNowMs, " RETURNING epoch");
  Params p;
  p.Text(holder).Int(absl::ToInt64Milliseconds(ttl));
  absl::StatusOr<std::pair<int64_t, int64_t>> r = LeaseUpdate(lease_, sql, p);
  if (!r.ok()) return r.status();
  if (r->first != 1) return std::optional<int64_t>();
  return std::optional<int64_t>(r->second);
}

absl::Status PostgresBackend::RenewLeadership(const std::string& holder, int64_t epoch,
                                              absl::Duration ttl) {
  absl::MutexLock lock(&lease_mu_);
  const std::string sql = absl::StrCat("UPDATE leader SET expires_unix_ms = ", kPgNowMs,
                                       " + $3 WHERE id = 1 AND holder = $1 AND epoch = $2");
  Params p;
  p.Text(holder).Int(epoch).Int(absl::ToInt64Milliseconds(ttl));
  absl::StatusOr<std::pair<int64_t, int64_t>> r = LeaseUpdate(lease_, sql, p);
  if (!r.ok()) return r.status();
  return r->first == 1 ? absl::OkStatus() : LeadershipLostError(holder, epoch);
}

void PostgresBackend::SetFence(const std::string& holder, int64_t epoch) {
  fence_.Set(holder, epoch);
}

}  // namespace mesa::coordinator
