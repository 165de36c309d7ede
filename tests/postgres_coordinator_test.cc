// The real mesa-coordinator binary on a real PostgreSQL server (coordinator/postgres_store.h):
// jobs run end to end, survive a restart and a SIGKILL during a submission burst, and a lost
// database server stops the coordinator, whose restart serves exactly what was acknowledged.

#include <signal.h>

#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "coordinator/postgres_test_server.h"
#include "gtest/gtest.h"
#include "tests/coordinator_harness.h"

namespace mesa::testing {
namespace {

using ::mesa::coordinator::PostgresTestServer;
using ::mesa::v1::Job;

class PostgresCoordinatorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto s = PostgresTestServer::Start();
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = s->release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }

  void SetUp() override {
    static int counter = 0;
    auto uri = server_->NewDatabase(absl::StrCat("coordinator_", ++counter));
    ASSERT_TRUE(uri.ok()) << uri.status();
    uri_ = *uri;
    StartCoordinator();
  }

  void StartCoordinator() {
    auto c = CoordinatorProcess::Start(uri_);
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = std::move(*c);
    jobs_ = coordinator_->JobStub();
  }

  grpc::Status Submit(const std::string& name, const std::string& client_job_id, Job* out,
                      v1::JobService::Stub* stub = nullptr) {
    v1::SubmitJobRequest request;
    *request.mutable_spec() = TinyTrainSpec(name);
    request.set_client_job_id(client_job_id);
    grpc::ClientContext context;
    SetDeadline(context, absl::Seconds(10));
    return (stub ? stub : jobs_.get())->SubmitJob(&context, request, out);
  }

  grpc::Status Get(const std::string& id, Job* out) {
    v1::GetJobRequest request;
    request.set_id(id);
    grpc::ClientContext context;
    SetDeadline(context, absl::Seconds(10));
    return jobs_->GetJob(&context, request, out);
  }

  static PostgresTestServer* server_;
  std::string uri_;
  std::unique_ptr<CoordinatorProcess> coordinator_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
};

PostgresTestServer* PostgresCoordinatorTest::server_ = nullptr;

TEST_F(PostgresCoordinatorTest, AJobRunsToSuccessAndSurvivesARestart) {
  Job job;
  ASSERT_TRUE(Submit("pg-e2e", "pg-1", &job).ok());
  FakeWorker worker(coordinator_->channel(), "pg-worker", 4);
  ASSERT_TRUE(worker.Register().ok());
  absl::StatusOr<v1::Assignment> a = worker.WaitForAssignment(absl::Seconds(10));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->job_id(), job.id());
  v1::Progress progress;
  progress.set_step(1);
  ASSERT_TRUE(worker.Running(*a, progress).ok());
  v1::JobResult result;
  result.set_final_loss(1.5f);
  ASSERT_TRUE(worker.Succeed(*a, result).ok());

  absl::StatusOr<int> stopped = coordinator_->process().Terminate(absl::Seconds(10));
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_EQ(*stopped, 0);
  StartCoordinator();
  Job got;
  ASSERT_TRUE(Get(job.id(), &got).ok());
  EXPECT_EQ(got.state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_FLOAT_EQ(got.result().final_loss(), 1.5f);
  // The idempotency key is kept in the database too.
  Job again;
  ASSERT_TRUE(Submit("pg-e2e", "pg-1", &again).ok());
  EXPECT_EQ(again.id(), job.id());
}

TEST_F(PostgresCoordinatorTest, SigkillDuringASubmissionBurstLosesNoAcknowledgedJob) {
  constexpr int kThreads = 4;
  std::mutex mu;
  std::map<std::string, std::string> acked;  // client_job_id -> job id
  std::atomic<int> acked_count{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto stub = v1::JobService::NewStub(
          grpc::CreateChannel(coordinator_->address(), grpc::InsecureChannelCredentials()));
      for (int i = 0; i < 100000; ++i) {
        const std::string cid = absl::StrCat("burst-", t, "-", i);
        Job job;
        if (!Submit("burst", cid, &job, stub.get()).ok()) return;  // the coordinator is gone
        std::lock_guard<std::mutex> lock(mu);
        acked[cid] = job.id();
        ++acked_count;
      }
    });
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (acked_count < 300 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  absl::StatusOr<int> killed = coordinator_->process().Kill();
  for (auto& t : threads) t.join();
  ASSERT_TRUE(killed.ok()) << killed.status();
  EXPECT_EQ(*killed, -SIGKILL);
  ASSERT_GE(acked_count.load(), 300) << "the burst was too slow to reach the kill point";

  StartCoordinator();
  for (const auto& [cid, id] : acked) {
    Job got;
    ASSERT_TRUE(Get(id, &got).ok()) << "acknowledged job " << id << " (" << cid << ") lost";
    EXPECT_EQ(got.client_job_id(), cid);
  }
}

// The database server restarts under the coordinator: its next commit fails, the coordinator
// exits (a supervisor restarts it), and the new process serves what was acknowledged before.
TEST_F(PostgresCoordinatorTest, ALostDatabaseStopsTheCoordinatorAndARestartServesTheStore) {
  Job kept;
  ASSERT_TRUE(Submit("before", "kept-1", &kept).ok());
  ASSERT_TRUE(server_->Restart().ok());
  Job refused;
  const grpc::Status s = Submit("during", "refused-1", &refused);
  EXPECT_FALSE(s.ok());
  absl::StatusOr<int> exit_code = coordinator_->process().Wait(absl::Seconds(30));
  ASSERT_TRUE(exit_code.ok()) << exit_code.status();
  EXPECT_EQ(*exit_code, 1);
  EXPECT_TRUE(absl::StrContains(coordinator_->process().Stderr(), "job store commit failed"))
      << coordinator_->process().Stderr();
  StartCoordinator();
  Job got;
  ASSERT_TRUE(Get(kept.id(), &got).ok());
  EXPECT_EQ(got.state(), v1::JOB_STATE_QUEUED);
  Job retried;
  ASSERT_TRUE(Submit("during", "refused-1", &retried).ok());
  EXPECT_NE(retried.id(), kept.id());
}

}  // namespace
}  // namespace mesa::testing
