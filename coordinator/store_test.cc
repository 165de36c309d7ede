#include "coordinator/store.h"

#include <postgresql/libpq-fe.h>
#include <sqlite3.h>

#include <atomic>
#include <cctype>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "coordinator/postgres_test_server.h"
#include "coordinator/test_util.h"
#include "gtest/gtest.h"

namespace mesa::coordinator {
namespace {

JobRow Row(int64_t num, mesa::v1::JobState state, const std::string& client = "") {
  JobRow r;
  r.num = num;
  r.id = absl::StrCat("job-", num);
  r.client_job_id = client;
  r.state = state;
  r.queue = "default";
  return r;
}

mesa::v1::Job JobFor(const JobRow& r) {
  mesa::v1::Job j;
  j.set_id(r.id);
  *j.mutable_spec() = ValidTrainSpec();
  j.set_state(r.state);
  return j;
}

std::unique_ptr<Store> Open(const std::string& path, int max_version = -1) {
  Store::Options o;
  o.path = path;
  o.max_schema_version = max_version;
  auto s = Store::Open(o);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

// One real PostgreSQL server for the whole test binary (started on first use).
PostgresTestServer& Server() {
  static PostgresTestServer* server = [] {
    auto s = PostgresTestServer::Start();
    if (!s.ok()) {
      ADD_FAILURE() << s.status();
      std::abort();
    }
    return s->release();
  }();
  return *server;
}

enum class Kind { kSqlite, kPostgres };

// A fresh, empty database of one kind, and raw SQL on it (what a test plants or inspects behind
// the store's back).
class TestDatabase {
 public:
  TestDatabase(Kind kind, const std::string& name) : kind_(kind) {
    if (kind == Kind::kSqlite) {
      path_ = TempPath(name + ".db");
      return;
    }
    static int counter = 0;
    std::string db = absl::StrCat("t", ++counter, "_", name);
    for (char& c : db) c = std::isalnum(static_cast<unsigned char>(c)) ? std::tolower(c) : '_';
    auto uri = Server().NewDatabase(db);
    EXPECT_TRUE(uri.ok()) << uri.status();
    path_ = uri.ok() ? *uri : "";
  }
  const std::string& path() const { return path_; }

  void Exec(const std::string& sql) {
    if (kind_ == Kind::kSqlite) {
      sqlite3* db;
      ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
      EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK) << sql;
      sqlite3_close(db);
      return;
    }
    PGconn* c = PQconnectdb(path_.c_str());
    PGresult* r = PQexec(c, sql.c_str());
    EXPECT_EQ(PQresultStatus(r), PGRES_COMMAND_OK) << sql << ": " << PQerrorMessage(c);
    PQclear(r);
    PQfinish(c);
  }

  int64_t Count(const std::string& sql) {
    if (kind_ == Kind::kSqlite) {
      sqlite3* db;
      EXPECT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
      sqlite3_stmt* st;
      EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr), SQLITE_OK) << sql;
      EXPECT_EQ(sqlite3_step(st), SQLITE_ROW);
      const int64_t n = sqlite3_column_int64(st, 0);
      sqlite3_finalize(st);
      sqlite3_close(db);
      return n;
    }
    PGconn* c = PQconnectdb(path_.c_str());
    PGresult* r = PQexec(c, sql.c_str());
    EXPECT_EQ(PQresultStatus(r), PGRES_TUPLES_OK) << sql << ": " << PQerrorMessage(c);
    const int64_t n = PQntuples(r) > 0 ? std::atoll(PQgetvalue(r, 0, 0)) : -1;
    PQclear(r);
    PQfinish(c);
    return n;
  }

  // A jobs row written directly, as an older binary would have (columns of v1 and v2).
  void InsertOldJob(int64_t num, int state, const std::string& blob) {
    std::string hex;
    for (unsigned char b : blob) absl::StrAppend(&hex, absl::Hex(b, absl::kZeroPad2));
    Exec(absl::StrCat("INSERT INTO jobs(num, id, state, queue, priority, job) VALUES(", num,
                      ", 'job-", num, "', ", state, ", 'default', 0, ",
                      kind_ == Kind::kSqlite ? absl::StrCat("x'", hex, "'")
                                             : absl::StrCat("'\\x", hex, "'::bytea"),
                      ")"));
  }

 private:
  Kind kind_;
  std::string path_;
};

// Every test runs on both databases: the same behaviour is the contract (store_backend.h).
class StoreTest : public ::testing::TestWithParam<Kind> {
 protected:
  TestDatabase NewDatabase(const std::string& name) { return TestDatabase(GetParam(), name); }
};

INSTANTIATE_TEST_SUITE_P(Databases, StoreTest, ::testing::Values(Kind::kSqlite, Kind::kPostgres),
                         [](const ::testing::TestParamInfo<Kind>& info) {
                           return info.param == Kind::kSqlite ? "Sqlite" : "Postgres";
                         });

// A failed commit is sticky: nothing enqueued after it may reach the database either, or a
// restart would load later writes (a job's SCHEDULED row) without the earlier ones they build on
// (its QUEUED row and event), i.e. a state that never existed in memory.
TEST_P(StoreTest, NothingCommitsAfterAFailedCommit) {
  TestDatabase db = NewDatabase("sticky");
  const std::string path = db.path();
  {
    auto store = Open(path);
    WriteBatch first;
    mesa::v1::JobEvent e;
    e.set_sequence(1);
    e.set_job_id("job-1");
    first.AddEvent(e);
    ASSERT_TRUE(store->WaitDurable(store->Enqueue(std::move(first))).ok());
    WriteBatch failing;  // the same event sequence again: the PRIMARY KEY refuses it
    failing.AddEvent(e);
    EXPECT_FALSE(store->WaitDurable(store->Enqueue(std::move(failing))).ok());
    WriteBatch later;
    JobRow row = Row(2, mesa::v1::JOB_STATE_QUEUED);
    later.PutJob(row, JobFor(row));
    EXPECT_FALSE(store->WaitDurable(store->Enqueue(std::move(later))).ok());
  }
  auto store = Open(path);
  auto loaded = store->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(loaded->active.empty()) << "a write after the failed commit was committed";
}

TEST_P(StoreTest, FirstFailedCommitIsReportedOnce) {
  Store::Options o;
  TestDatabase db = NewDatabase("on_failure");
  o.path = db.path();
  std::atomic<int> calls = 0;
  std::string reported;
  o.on_failure = [&](const absl::Status& s) {
    reported = std::string(s.message());
    ++calls;
  };
  auto opened = Store::Open(o);
  ASSERT_TRUE(opened.ok()) << opened.status();
  Store& store = **opened;
  mesa::v1::JobEvent e;
  e.set_sequence(1);
  e.set_job_id("job-1");
  for (int i = 0; i < 3; ++i) {  // the first commits; the second and third fail
    WriteBatch batch;
    batch.AddEvent(e);
    (void)store.WaitDurable(store.Enqueue(std::move(batch)));
  }
  EXPECT_EQ(calls.load(), 1);
  EXPECT_FALSE(reported.empty());
}

TEST_P(StoreTest, CommittedWritesSurviveReopen) {
  TestDatabase db = NewDatabase("store");
  const std::string path = db.path();
  {
    auto store = Open(path);
    WriteBatch b;
    JobRow active = Row(1, mesa::v1::JOB_STATE_RUNNING, "c1");
    JobRow done = Row(2, mesa::v1::JOB_STATE_SUCCEEDED);
    done.end_unix_ms = 1700000000000;
    done.retention_ms = -1;  // JobSpec.retention_seconds -1: kept for ever
    active.retention_ms = 3600 * 1000;
    b.PutJob(active, JobFor(active));
    b.PutJob(done, JobFor(done));
    mesa::v1::JobEvent e;
    e.set_sequence(7);
    e.set_job_id("job-1");
    b.AddEvent(e);
    mesa::v1::LogLine l;
    l.set_sequence(1);
    l.set_text("hello");
    b.AddLog("job-1", l);
    b.PutAttempt(AttemptRow{"job-1", 0, "w1", "assignment"});
    ASSERT_TRUE(store->WaitDurable(store->Enqueue(std::move(b))).ok());
  }
  auto store = Open(path);
  auto loaded = store->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->active.size(), 1u);
  EXPECT_EQ(loaded->active[0].row.client_job_id, "c1");
  EXPECT_EQ(loaded->active[0].job.spec().name(), "tiny");
  ASSERT_EQ(loaded->finished.size(), 1u);
  EXPECT_EQ(loaded->finished[0].id, "job-2");
  EXPECT_EQ(loaded->finished[0].retention_ms, -1);
  EXPECT_EQ(loaded->active[0].row.retention_ms, 3600 * 1000);
  EXPECT_EQ(loaded->max_sequence, 7);
  EXPECT_EQ(loaded->max_job_num, 2);
  ASSERT_EQ(loaded->attempts.size(), 1u);
  EXPECT_EQ(loaded->attempts[0].worker_id, "w1");
  auto job = store->ReadJob("job-2");
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->job.state(), mesa::v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(store->ReadJob("job-9").status().code(), absl::StatusCode::kNotFound);
  auto events = store->ReadEvents("job-1", 0, -1);
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 1u);
  auto logs = store->ReadLogs("job-1", 0, -1, 10);
  ASSERT_TRUE(logs.ok());
  ASSERT_EQ(logs->size(), 1u);
  EXPECT_EQ((*logs)[0].text(), "hello");
}

TEST_P(StoreTest, UpdatesReplaceTheJobRow) {
  TestDatabase db = NewDatabase("update");
  const std::string path = db.path();
  auto store = Open(path);
  JobRow r = Row(1, mesa::v1::JOB_STATE_QUEUED);
  WriteBatch b1;
  b1.PutJob(r, JobFor(r));
  r.state = mesa::v1::JOB_STATE_FAILED;
  WriteBatch b2;
  b2.PutJob(r, JobFor(r));
  store->Enqueue(std::move(b1));
  ASSERT_TRUE(store->WaitDurable(store->Enqueue(std::move(b2))).ok());
  auto loaded = store->Load();
  ASSERT_TRUE(loaded.ok());
  EXPECT_TRUE(loaded->active.empty());
  ASSERT_EQ(loaded->finished.size(), 1u);
  EXPECT_EQ(loaded->finished[0].state, mesa::v1::JOB_STATE_FAILED);
}

TEST_P(StoreTest, ClientJobIdIsUnique) {
  TestDatabase db = NewDatabase("unique");
  auto store = Open(db.path());
  WriteBatch b;
  JobRow a = Row(1, mesa::v1::JOB_STATE_QUEUED, "same");
  JobRow c = Row(2, mesa::v1::JOB_STATE_QUEUED, "same");
  b.PutJob(a, JobFor(a));
  b.PutJob(c, JobFor(c));
  absl::Status s = store->WaitDurable(store->Enqueue(std::move(b)));
  EXPECT_FALSE(s.ok());
  // Errors are sticky: nothing is acknowledged after a failed commit.
  WriteBatch ok;
  JobRow d = Row(3, mesa::v1::JOB_STATE_QUEUED);
  ok.PutJob(d, JobFor(d));
  EXPECT_FALSE(store->WaitDurable(store->Enqueue(std::move(ok))).ok());
}

TEST_P(StoreTest, GroupCommitBatchesConcurrentWriters) {
  TestDatabase db = NewDatabase("group");
  const std::string path = db.path();
  constexpr int kThreads = 8, kPerThread = 100;
  {
    auto store = Open(path);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < kPerThread; ++i) {
          JobRow r =
              Row(1 + t * kPerThread + i, mesa::v1::JOB_STATE_QUEUED, absl::StrCat("c", t, "-", i));
          WriteBatch b;
          b.PutJob(r, JobFor(r));
          ASSERT_TRUE(store->WaitDurable(store->Enqueue(std::move(b))).ok());
        }
      });
    }
    for (auto& t : threads) t.join();
    // 800 acknowledged writes share far fewer transactions.
    EXPECT_LT(store->transactions(), kThreads * kPerThread);
  }
  auto store = Open(path);
  auto loaded = store->Load();
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(loaded->active.size(), static_cast<size_t>(kThreads * kPerThread));
}

TEST_P(StoreTest, AuditRecordsAreReadBackFilteredSurviveReopenAndArePruned) {
  TestDatabase db = NewDatabase("audit");
  const std::string path = db.path();
  {
    auto store = Open(path, 3);  // a v3 store gains the audit table
    EXPECT_EQ(store->schema_version(), 3);
  }
  {
    auto store = Open(path);
    WriteBatch b;
    b.AddAudit({.time_unix_ms = 1000,
                .method = "SubmitJob",
                .caller = "alice",
                .target = "job-1",
                .result = "OK"});
    b.AddAudit({.time_unix_ms = 2000,
                .method = "CancelJob",
                .caller = "bob",
                .target = "job-1",
                .result = "PERMISSION_DENIED",
                .message = "not yours"});
    b.AddAudit({.time_unix_ms = 3000,
                .method = "RegisterWorker",
                .caller = "node-a",
                .target = "node-a",
                .result = "OK"});
    ASSERT_TRUE(store->WaitDurable(store->Enqueue(std::move(b))).ok());
  }
  auto store = Open(path);
  auto all = store->ReadAudit(0, 100, "", "");
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[1].caller, "bob");
  EXPECT_EQ((*all)[1].message, "not yours");
  EXPECT_EQ((*all)[1].time_unix_ms, 2000);
  EXPECT_LT((*all)[0].id, (*all)[1].id);
  auto after = store->ReadAudit((*all)[0].id, 1, "", "");
  ASSERT_TRUE(after.ok());
  ASSERT_EQ(after->size(), 1u);
  EXPECT_EQ((*after)[0].method, "CancelJob");
  auto job1 = store->ReadAudit(0, 100, "", "job-1");
  ASSERT_TRUE(job1.ok());
  EXPECT_EQ(job1->size(), 2u);
  auto alice = store->ReadAudit(0, 100, "alice", "");
  ASSERT_TRUE(alice.ok());
  EXPECT_EQ(alice->size(), 1u);
  WriteBatch prune;
  prune.DeleteAuditBefore(2500);
  ASSERT_TRUE(store->WaitDurable(store->Enqueue(std::move(prune))).ok());
  auto left = store->ReadAudit(0, 100, "", "");
  ASSERT_TRUE(left.ok());
  ASSERT_EQ(left->size(), 1u);
  EXPECT_EQ((*left)[0].method, "RegisterWorker");
}

TEST_P(StoreTest, MigratesOldSchemaForward) {
  TestDatabase db = NewDatabase("migrate");
  const std::string path = db.path();
  {
    auto v1 = Open(path, 1);
    EXPECT_EQ(v1->schema_version(), 1);
  }
  db.InsertOldJob(1, mesa::v1::JOB_STATE_QUEUED, "");
  auto store = Open(path);
  EXPECT_EQ(store->schema_version(), Store::LatestSchemaVersion());
  EXPECT_EQ(Store::LatestSchemaVersion(), 7);
  auto loaded = store->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->active.size(), 1u);  // data from v1 kept
  WriteBatch b;
  mesa::v1::LogLine l;
  l.set_sequence(1);
  b.AddLog("job-1", l);  // the v2 table exists
  EXPECT_TRUE(store->WaitDurable(store->Enqueue(std::move(b))).ok());
}

// A job finished before v3 has no end_unix_ms column value: its end time comes from the blob,
// so retention can still delete it.
TEST_P(StoreTest, FinishedJobsFromBeforeV3GetTheirEndTimeFromTheBlob) {
  TestDatabase db = NewDatabase("migrate-end");
  const std::string path = db.path();
  { Open(path, 2); }
  {
    JobRow r = Row(1, mesa::v1::JOB_STATE_SUCCEEDED);
    mesa::v1::Job job = JobFor(r);
    job.mutable_end_time()->set_seconds(1700000000);
    job.mutable_end_time()->set_nanos(250000000);
    db.InsertOldJob(1, mesa::v1::JOB_STATE_SUCCEEDED, job.SerializeAsString());
  }
  auto store = Open(path);
  auto loaded = store->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->finished.size(), 1u);
  EXPECT_EQ(loaded->finished[0].end_unix_ms, 1700000000250);
}

// Retention's writes: a deleted job leaves no row in any table, and the counters keep the highest
// job number and sequence even when the newest job is the one deleted.
TEST_P(StoreTest, DeletedJobsLeaveNoRowsAndCountersSurvive) {
  TestDatabase db = NewDatabase("delete");
  const std::string path = db.path();
  {
    auto store = Open(path);
    WriteBatch b;
    JobRow kept = Row(1, mesa::v1::JOB_STATE_QUEUED);
    JobRow done = Row(2, mesa::v1::JOB_STATE_SUCCEEDED);
    done.end_unix_ms = 5;
    b.PutJob(kept, JobFor(kept));
    b.PutJob(done, JobFor(done));
    for (int seq : {1, 2}) {
      mesa::v1::JobEvent e;
      e.set_sequence(seq);
      e.set_job_id(seq == 1 ? "job-1" : "job-2");
      b.AddEvent(e);
    }
    mesa::v1::LogLine l;
    l.set_sequence(1);
    b.AddLog("job-2", l);
    b.PutAttempt(AttemptRow{"job-2", 1, "w1", "assignment"});
    b.PutWorker("old", "h", "", 2, 100);
    b.PutWorker("new", "h", "", 1, 300, /*drain_reason=*/3);
    b.PutWorker("gone", "h", "", 1, 300, /*drain_reason=*/1);
    ASSERT_TRUE(store->WaitDurable(store->Enqueue(std::move(b))).ok());
    WriteBatch forget;
    forget.DeleteWorker("gone");  // deregistered or forgotten: its row (and cordon) go
    ASSERT_TRUE(store->WaitDurable(store->Enqueue(std::move(forget))).ok());
    auto loaded = store->Load();
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    // v5: cordons stored, with who set them.
    const std::vector<std::pair<std::string, int>> cordons = {{"new", 3}};
    EXPECT_EQ(loaded->draining_workers, cordons);
    WriteBatch d;
    d.DeleteJob("job-2");
    d.KeepCounters(2, 2);
    d.DeleteWorkersSeenBefore(200);
    ASSERT_TRUE(store->WaitDurable(store->Enqueue(std::move(d))).ok());
  }
  for (const char* sql :
       {"SELECT COUNT(*) FROM jobs WHERE id = 'job-2'",
        "SELECT COUNT(*) FROM events WHERE job_id = 'job-2'", "SELECT COUNT(*) FROM logs",
        "SELECT COUNT(*) FROM attempts", "SELECT COUNT(*) FROM workers WHERE worker_id = 'old'"}) {
    EXPECT_EQ(db.Count(sql), 0) << sql;
  }
  auto store = Open(path);
  auto loaded = store->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->active.size(), 1u);
  EXPECT_TRUE(loaded->finished.empty());
  EXPECT_EQ(loaded->max_job_num, 2);
  EXPECT_EQ(loaded->max_sequence, 2);
}

TEST_P(StoreTest, RejectsNewerSchema) {
  TestDatabase db = NewDatabase("newer");
  const std::string path = db.path();
  { Open(path); }
  db.Exec("INSERT INTO schema_version VALUES(99)");
  Store::Options o;
  o.path = path;
  EXPECT_EQ(Store::Open(o).status().code(), absl::StatusCode::kFailedPrecondition);
}

// Leadership (replicated coordinators): one holder at a time by the database's clock; once a
// lease ends unrenewed (the leader died or paused) another takes over with the next epoch, and
// every later write of the deposed leader is refused inside its transaction — never applied.
TEST_P(StoreTest, LeadershipIsExclusiveAndADeposedLeadersWriteIsRefused) {
  TestDatabase db = NewDatabase("leader");
  auto a = Open(db.path());
  auto b = Open(db.path());
  ASSERT_TRUE(a != nullptr && b != nullptr);
  const absl::Duration ttl = absl::Milliseconds(400);
  auto ea = a->TryAcquireLeadership("a", ttl);
  ASSERT_TRUE(ea.ok()) << ea.status();
  ASSERT_TRUE(ea->has_value());
  auto eb = b->TryAcquireLeadership("b", ttl);
  ASSERT_TRUE(eb.ok()) << eb.status();
  EXPECT_FALSE(eb->has_value()) << "two leaders at once";
  ASSERT_TRUE(a->RenewLeadership("a", **ea, ttl).ok());
  a->SetFence("a", **ea);
  auto put = [](Store& store, int num) {
    WriteBatch batch;
    JobRow r = Row(num, mesa::v1::JOB_STATE_QUEUED);
    batch.PutJob(r, JobFor(r));
    return store.WaitDurable(store.Enqueue(std::move(batch)));
  };
  ASSERT_TRUE(put(*a, 1).ok());
  absl::SleepFor(ttl + absl::Milliseconds(200));  // a pauses past its lease
  eb = b->TryAcquireLeadership("b", ttl);
  ASSERT_TRUE(eb.ok()) << eb.status();
  ASSERT_TRUE(eb->has_value());
  EXPECT_EQ(**eb, **ea + 1);
  b->SetFence("b", **eb);
  ASSERT_TRUE(put(*b, 2).ok());
  const absl::Status refused = put(*a, 3);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "no longer the leader")) << refused;
  EXPECT_EQ(a->RenewLeadership("a", **ea, ttl).code(), absl::StatusCode::kFailedPrecondition);
  auto loaded = b->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->active.size(), 2u);
  EXPECT_EQ(loaded->active[0].row.id, "job-1");
  EXPECT_EQ(loaded->active[1].row.id, "job-2");
}

// PostgreSQL's text type refuses NUL and invalid UTF-8; the store keeps such free text (a cancel
// reason, an audit message) as U+FFFD instead of failing the commit — a failed commit is sticky
// and would stop the coordinator.
TEST(PostgresStoreTest, FreeTextWithNulAndInvalidUtf8IsStoredNotRefused) {
  TestDatabase db(Kind::kPostgres, "text");
  auto store = Open(db.path());
  ASSERT_NE(store, nullptr);
  JobRow r = Row(1, mesa::v1::JOB_STATE_QUEUED);
  r.cancel_reason = std::string("bad\0byte \xff", 10);
  WriteBatch b;
  b.PutJob(r, JobFor(r));
  b.AddAudit({.time_unix_ms = 1, .method = "CancelJob", .caller = "c", .message = "\xc3("});
  ASSERT_TRUE(store->WaitDurable(store->Enqueue(std::move(b))).ok());
  auto loaded = store->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->active.size(), 1u);
  EXPECT_EQ(loaded->active[0].row.cancel_reason,
            "bad\xEF\xBF\xBD"
            "byte \xEF\xBF\xBD");
  auto audit = store->ReadAudit(0, 10, "", "");
  ASSERT_TRUE(audit.ok()) << audit.status();
  ASSERT_EQ(audit->size(), 1u);
  EXPECT_EQ((*audit)[0].message, "\xEF\xBF\xBD(");
}

// A server restart cuts every connection: reads and the writer reconnect (nothing was in flight,
// so nothing is lost or doubled). A server that stays away fails the next commit: reported once
// (on_failure: the coordinator exits and reloads) and sticky, and a store reopened once the
// server is back holds exactly what was acknowledged.
TEST(PostgresStoreTest, ServerRestartsReconnectAndALostServerFailsWritesSticky) {
  TestDatabase db(Kind::kPostgres, "restart");
  Store::Options o;
  o.path = db.path();
  std::atomic<int> failures = 0;
  o.on_failure = [&](const absl::Status&) { ++failures; };
  auto opened = Store::Open(o);
  ASSERT_TRUE(opened.ok()) << opened.status();
  Store& store = **opened;
  auto put = [&](int num) {
    JobRow r = Row(num, mesa::v1::JOB_STATE_QUEUED);
    WriteBatch b;
    b.PutJob(r, JobFor(r));
    return store.WaitDurable(store.Enqueue(std::move(b)));
  };
  ASSERT_TRUE(put(1).ok());
  ASSERT_TRUE(Server().Restart().ok());
  auto job = store.ReadJob("job-1");
  EXPECT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(put(2).ok()) << "the writer did not reconnect";
  ASSERT_TRUE(Server().Stop().ok());
  EXPECT_FALSE(put(3).ok());
  EXPECT_EQ(failures.load(), 1);
  ASSERT_TRUE(Server().Restart().ok());
  EXPECT_FALSE(put(4).ok()) << "a failed commit must stay failed";
  auto reopened = Open(db.path());
  ASSERT_NE(reopened, nullptr);
  auto loaded = reopened->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->active.size(), 2u);
  EXPECT_EQ(loaded->active[1].row.id, "job-2");
}

}  // namespace
}  // namespace mesa::coordinator
