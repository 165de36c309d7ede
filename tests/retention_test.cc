// Retention (item 10): the real mesa-coordinator with short retentions deletes finished
// jobs with their events and log lines, forgets lost workers, and never deletes a job that is not
// finished. Checked over gRPC and in the SQLite file itself.

#include <sqlite3.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "cli/client.h"
#include "gtest/gtest.h"
#include "tests/coordinator_harness.h"

namespace mesa::testing {
namespace {

using ::mesa::v1::Job;

// COUNT(*) of `sql` in the store file, read through a connection of its own (WAL: it sees what the
// running coordinator committed).
int64_t Count(const std::string& db_path, const std::string& sql) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  int64_t n = -1;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW) {
    n = sqlite3_column_int64(st, 0);
  }
  EXPECT_GE(n, 0) << sql << ": " << sqlite3_errmsg(db);
  sqlite3_finalize(st);
  sqlite3_close(db);
  return n;
}

// Rows about `job_id` in the jobs, events, logs and attempts tables.
int64_t RowsOf(const std::string& db_path, const std::string& job_id) {
  int64_t n = Count(db_path, absl::StrCat("SELECT COUNT(*) FROM jobs WHERE id = '", job_id, "'"));
  for (const char* table : {"events", "logs", "attempts"}) {
    n += Count(db_path,
               absl::StrCat("SELECT COUNT(*) FROM ", table, " WHERE job_id = '", job_id, "'"));
  }
  return n;
}

class RetentionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = NewTempDir("retention_test");
    db_ = dir_ + "/mesa.db";
  }

  void Start() {
    auto c = CoordinatorProcess::Start(
        db_, {"--job_retention=4s", "--worker_retention=1s", "--retention_sweep_interval=100ms",
              "--lease_ttl=2s", "--heartbeat_interval=500ms"});
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = std::move(*c);
    jobs_ = coordinator_->JobStub();
  }

  Job Submit(const v1::JobSpec& spec) {
    v1::SubmitJobRequest request;
    *request.mutable_spec() = spec;
    grpc::ClientContext context;
    SetDeadline(context, absl::Seconds(10));
    Job job;
    grpc::Status s = jobs_->SubmitJob(&context, request, &job);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return job;
  }

  void Cancel(const Job& job) {
    v1::CancelJobRequest request;
    request.set_id(job.id());
    grpc::ClientContext context;
    SetDeadline(context, absl::Seconds(10));
    Job out;
    ASSERT_TRUE(jobs_->CancelJob(&context, request, &out).ok());
  }

  grpc::StatusCode Get(const std::string& id, Job* out = nullptr) {
    v1::GetJobRequest request;
    request.set_id(id);
    grpc::ClientContext context;
    SetDeadline(context, absl::Seconds(10));
    Job job;
    grpc::StatusCode code = jobs_->GetJob(&context, request, &job).error_code();
    if (out != nullptr) *out = job;
    return code;
  }

  std::string dir_, db_;
  std::unique_ptr<CoordinatorProcess> coordinator_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
};

TEST_F(RetentionTest, FinishedJobsAndLostWorkersAreDeletedUnfinishedJobsStay) {
  Start();
  FakeWorker worker(coordinator_->channel(), "w1", /*cpu_slots=*/2);
  ASSERT_TRUE(worker.Register().ok());
  FakeWorker lost(coordinator_->channel(), "w-lost", /*cpu_slots=*/1);
  ASSERT_TRUE(lost.Register().ok());  // never heartbeats: lost after the 2 s lease

  // A job that succeeds, with log lines and a checkpoint event.
  v1::JobSpec two_slots = TinyTrainSpec("done");
  two_slots.mutable_resources()->set_cpu_threads(2);  // only w1 can hold it
  Job done = Submit(two_slots);
  absl::StatusOr<v1::Assignment> a = worker.WaitForAssignment(absl::Seconds(10));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->job_id(), done.id());
  v1::UpdateAttemptRequest update;
  update.set_job_id(a->job_id());
  update.set_attempt(a->attempt());
  update.set_phase(v1::ATTEMPT_PHASE_RUNNING);
  update.set_checkpoint_path("/ckpt/done/step_1");
  for (int i = 0; i < 3; ++i) update.add_logs()->set_text(absl::StrCat("line ", i));
  ASSERT_TRUE(worker.Update(update).ok());
  ASSERT_TRUE(worker.Succeed(*a, v1::JobResult()).ok());
  // Within the retention the finished job is still there, rows and all.
  Job got;
  ASSERT_EQ(Get(done.id(), &got), grpc::StatusCode::OK);
  EXPECT_EQ(got.state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_GT(RowsOf(db_, done.id()), 5);  // row, events, 3 log lines, attempt
  EXPECT_EQ(Count(db_, "SELECT COUNT(*) FROM workers WHERE worker_id = 'w-lost'"), 1);

  // A job that runs on and one that can never start (needs 64 slots): neither may be deleted.
  v1::JobSpec running_spec = TinyTrainSpec("running");
  running_spec.mutable_resources()->set_cpu_threads(2);
  Job running = Submit(running_spec);
  a = worker.WaitForAssignment(absl::Seconds(10));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->job_id(), running.id());
  ASSERT_TRUE(worker.Running(*a, v1::Progress()).ok());
  v1::JobSpec huge = TinyTrainSpec("queued");
  huge.mutable_resources()->set_cpu_threads(64);
  Job queued = Submit(huge);
  // The newest job is a cancelled one: after it is deleted a restart must not reuse its id.
  Job cancelled = Submit(TinyTrainSpec("cancelled"));
  {
    v1::CancelJobRequest request;
    request.set_id(cancelled.id());
    grpc::ClientContext context;
    SetDeadline(context, absl::Seconds(10));
    ASSERT_TRUE(jobs_->CancelJob(&context, request, &cancelled).ok());
    ASSERT_EQ(cancelled.state(), v1::JOB_STATE_CANCELLED);
  }

  EXPECT_EQ(Get(cancelled.id()), grpc::StatusCode::OK);

  // Past it they go; w1 keeps heartbeating (its lease is 2 s) and the running job stays.
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while ((Get(done.id()) != grpc::StatusCode::NOT_FOUND ||
          Get(cancelled.id()) != grpc::StatusCode::NOT_FOUND ||
          Count(db_, "SELECT COUNT(*) FROM workers WHERE worker_id = 'w-lost'") != 0) &&
         absl::Now() < deadline) {
    absl::StatusOr<v1::HeartbeatResponse> hb = worker.Heartbeat(absl::Milliseconds(200));
    ASSERT_TRUE(hb.ok()) << hb.status();
    ASSERT_FALSE(hb->reregister());
  }
  EXPECT_EQ(Get(done.id()), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Get(cancelled.id()), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(RowsOf(db_, done.id()), 0);
  EXPECT_EQ(RowsOf(db_, cancelled.id()), 0);
  EXPECT_EQ(Count(db_, "SELECT COUNT(*) FROM workers WHERE worker_id = 'w-lost'"), 0);
  EXPECT_EQ(Count(db_, "SELECT COUNT(*) FROM workers WHERE worker_id = 'w1'"), 1);
  ASSERT_EQ(Get(running.id(), &got), grpc::StatusCode::OK);
  EXPECT_EQ(got.state(), v1::JOB_STATE_RUNNING);
  ASSERT_EQ(Get(queued.id(), &got), grpc::StatusCode::OK);
  EXPECT_EQ(got.state(), v1::JOB_STATE_QUEUED);
  EXPECT_GT(RowsOf(db_, running.id()), 0);
  EXPECT_GT(RowsOf(db_, queued.id()), 0);
  {
    v1::ListJobsRequest request;
    grpc::ClientContext context;
    SetDeadline(context, absl::Seconds(10));
    v1::ListJobsResponse response;
    ASSERT_TRUE(jobs_->ListJobs(&context, request, &response).ok());
    ASSERT_EQ(response.jobs_size(), 2);
    EXPECT_EQ(response.jobs(0).id(), running.id());
    EXPECT_EQ(response.jobs(1).id(), queued.id());
  }

  // After a restart neither the deleted jobs come back nor are their ids or sequences reused.
  absl::StatusOr<int> stopped = coordinator_->process().Terminate(absl::Seconds(10));
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  Start();
  EXPECT_EQ(Get(done.id()), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Get(queued.id()), grpc::StatusCode::OK);
  Job fresh = Submit(TinyTrainSpec("fresh"));
  const int cancelled_num = std::stoi(cancelled.id().substr(4));
  EXPECT_EQ(fresh.id(), absl::StrCat("job-", cancelled_num + 1));
  EXPECT_GT(fresh.last_sequence(), cancelled.last_sequence());
}

// 0 keeps finished jobs for ever.
TEST_F(RetentionTest, ZeroRetentionKeepsFinishedJobs) {
  auto c =
      CoordinatorProcess::Start(db_, {"--job_retention=0", "--retention_sweep_interval=100ms"});
  ASSERT_TRUE(c.ok()) << c.status();
  coordinator_ = std::move(*c);
  jobs_ = coordinator_->JobStub();
  Job job = Submit(TinyTrainSpec("kept"));
  Cancel(job);
  absl::SleepFor(absl::Seconds(1));
  EXPECT_EQ(Get(job.id()), grpc::StatusCode::OK);
  EXPECT_GT(RowsOf(db_, job.id()), 0);
}

// A job's own retention (JobSpec.retention_seconds) wins over the coordinator's either way, and is
// kept in the store: after a restart with a short --job_retention, a job kept "for ever" (-1)
// stays while one with no setting goes.
TEST_F(RetentionTest, JobsOwnRetentionOverridesTheCoordinatorsAcrossRestarts) {
  auto start = [&](const char* retention) {
    auto c = CoordinatorProcess::Start(db_, {retention, "--retention_sweep_interval=100ms"});
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = std::move(*c);
    jobs_ = coordinator_->JobStub();
  };
  start("--job_retention=0");  // the coordinator keeps finished jobs for ever
  v1::JobSpec short_spec = TinyTrainSpec("short");
  short_spec.set_retention_seconds(1);
  v1::JobSpec forever_spec = TinyTrainSpec("forever");
  forever_spec.set_retention_seconds(-1);
  const Job short_lived = Submit(short_spec);
  const Job forever = Submit(forever_spec);
  const Job plain = Submit(TinyTrainSpec("plain"));
  for (const Job& job : {short_lived, forever, plain}) Cancel(job);
  const absl::Time deadline = absl::Now() + absl::Seconds(15);
  while (Get(short_lived.id()) != grpc::StatusCode::NOT_FOUND && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_EQ(Get(short_lived.id()), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(RowsOf(db_, short_lived.id()), 0);
  EXPECT_EQ(Get(forever.id()), grpc::StatusCode::OK);
  EXPECT_EQ(Get(plain.id()), grpc::StatusCode::OK);
  EXPECT_EQ(Count(db_, absl::StrCat("SELECT COUNT(*) FROM jobs WHERE id = '", forever.id(),
                                    "' AND retention_ms = -1")),
            1);

  absl::StatusOr<int> stopped = coordinator_->process().Terminate(absl::Seconds(10));
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  start("--job_retention=1s");
  const absl::Time second_deadline = absl::Now() + absl::Seconds(15);
  while (Get(plain.id()) != grpc::StatusCode::NOT_FOUND && absl::Now() < second_deadline) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_EQ(Get(plain.id()), grpc::StatusCode::NOT_FOUND);
  absl::SleepFor(absl::Milliseconds(500));  // a few more sweeps
  EXPECT_EQ(Get(forever.id()), grpc::StatusCode::OK);

  // Out of range: refused at submission, naming the field.
  v1::JobSpec bad = TinyTrainSpec("bad");
  bad.set_retention_seconds(-2);
  v1::SubmitJobRequest request;
  *request.mutable_spec() = bad;
  grpc::ClientContext context;
  SetDeadline(context, absl::Seconds(10));
  Job job;
  const grpc::Status refused = jobs_->SubmitJob(&context, request, &job);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(refused.error_message().find("retention_seconds"), std::string::npos)
      << refused.error_message();
}

}  // namespace
}  // namespace mesa::testing
