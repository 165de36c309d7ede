#include "coordinator/store.h"

#include <sqlite3.h>

#include <atomic>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
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
  return std::move(*s);
}

// A failed commit is sticky: nothing enqueued after it may reach the database either, or a
// restart would load later writes (a job's SCHEDULED row) without the earlier ones they build on
// (its QUEUED row and event), i.e. a state that never existed in memory.
TEST(StoreTest, NothingCommitsAfterAFailedCommit) {
  const std::string path = TempPath("sticky.db");
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

TEST(StoreTest, FirstFailedCommitIsReportedOnce) {
  Store::Options o;
  o.path = TempPath("on_failure.db");
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

TEST(StoreTest, CommittedWritesSurviveReopen) {
  const std::string path = TempPath("store.db");
  {
    auto store = Open(path);
    WriteBatch b;
    JobRow active = Row(1, mesa::v1::JOB_STATE_RUNNING, "c1");
    JobRow done = Row(2, mesa::v1::JOB_STATE_SUCCEEDED);
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

TEST(StoreTest, UpdatesReplaceTheJobRow) {
  const std::string path = TempPath("update.db");
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

TEST(StoreTest, ClientJobIdIsUnique) {
  auto store = Open(TempPath("unique.db"));
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

TEST(StoreTest, GroupCommitBatchesConcurrentWriters) {
  const std::string path = TempPath("group.db");
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

TEST(StoreTest, AuditRecordsAreReadBackFilteredSurviveReopenAndArePruned) {
  const std::string path = TempPath("audit.db");
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

TEST(StoreTest, MigratesOldSchemaForward) {
  const std::string path = TempPath("migrate.db");
  {
    auto v1 = Open(path, 1);
    EXPECT_EQ(v1->schema_version(), 1);
  }
  {
    sqlite3* db;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db,
                           "INSERT INTO jobs(num, id, state, queue, priority, job) VALUES(1, "
                           "'job-1', 1, 'default', 0, x'')",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  auto store = Open(path);
  EXPECT_EQ(store->schema_version(), Store::LatestSchemaVersion());
  EXPECT_EQ(Store::LatestSchemaVersion(), 5);
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
TEST(StoreTest, FinishedJobsFromBeforeV3GetTheirEndTimeFromTheBlob) {
  const std::string path = TempPath("migrate-end.db");
  { Open(path, 2); }
  {
    JobRow r = Row(1, mesa::v1::JOB_STATE_SUCCEEDED);
    mesa::v1::Job job = JobFor(r);
    job.mutable_end_time()->set_seconds(1700000000);
    job.mutable_end_time()->set_nanos(250000000);
    const std::string blob = job.SerializeAsString();
    sqlite3* db;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    sqlite3_stmt* st;
    ASSERT_EQ(sqlite3_prepare_v2(db,
                                 "INSERT INTO jobs(num, id, state, queue, priority, job) "
                                 "VALUES(1, 'job-1', 4, 'default', 0, ?1)",
                                 -1, &st, nullptr),
              SQLITE_OK);
    sqlite3_bind_blob(st, 1, blob.data(), static_cast<int>(blob.size()), SQLITE_TRANSIENT);
    ASSERT_EQ(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
    sqlite3_close(db);
  }
  auto store = Open(path);
  auto loaded = store->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->finished.size(), 1u);
  EXPECT_EQ(loaded->finished[0].end_unix_ms, 1700000000250);
}

// Retention's writes: a deleted job leaves no row in any table, and the counters keep the highest
// job number and sequence even when the newest job is the one deleted.
TEST(StoreTest, DeletedJobsLeaveNoRowsAndCountersSurvive) {
  const std::string path = TempPath("delete.db");
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
  sqlite3* db;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  for (const char* sql : {"SELECT COUNT(*) FROM jobs WHERE id = 'job-2'",
                          "SELECT COUNT(*) FROM events WHERE job_id "
                          "= 'job-2'",
                          "SELECT COUNT(*) FROM logs", "SELECT COUNT(*) FROM attempts",
                          "SELECT COUNT(*) FROM workers WHERE worker_id = 'old'"}) {
    sqlite3_stmt* st;
    ASSERT_EQ(sqlite3_prepare_v2(db, sql, -1, &st, nullptr), SQLITE_OK) << sql;
    ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
    EXPECT_EQ(sqlite3_column_int(st, 0), 0) << sql;
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  auto store = Open(path);
  auto loaded = store->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->active.size(), 1u);
  EXPECT_TRUE(loaded->finished.empty());
  EXPECT_EQ(loaded->max_job_num, 2);
  EXPECT_EQ(loaded->max_sequence, 2);
}

TEST(StoreTest, RejectsNewerSchema) {
  const std::string path = TempPath("newer.db");
  { Open(path); }
  sqlite3* db;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "INSERT INTO schema_version VALUES(99)", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  Store::Options o;
  o.path = path;
  EXPECT_EQ(Store::Open(o).status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace mesa::coordinator
