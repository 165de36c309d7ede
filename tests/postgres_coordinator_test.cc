// The real mesa-coordinator binary on a real PostgreSQL server (coordinator/postgres_store.h):
// jobs run end to end, survive a restart and a SIGKILL during a submission burst, and a lost
// database server stops the coordinator, whose restart serves exactly what was acknowledged.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cli/client.h"
#include "coordinator/postgres_test_server.h"
#include "gtest/gtest.h"
#include "tests/coordinator_harness.h"
#include "tests/process_harness.h"

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
                      v1::JobService::Stub* stub = nullptr,
                      absl::Duration deadline = absl::Seconds(10)) {
    v1::SubmitJobRequest request;
    *request.mutable_spec() = TinyTrainSpec(name);
    request.set_client_job_id(client_job_id);
    grpc::ClientContext context;
    SetDeadline(context, deadline);
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

// A database restart under the coordinator is ridden out (its connections reconnect). A database
// that stays away fails the next commit: the coordinator exits (a supervisor restarts it), and the
// new process serves what was acknowledged before.
TEST_F(PostgresCoordinatorTest, ALostDatabaseStopsTheCoordinatorAndARestartServesTheStore) {
  Job kept;
  ASSERT_TRUE(Submit("before", "kept-1", &kept).ok());
  ASSERT_TRUE(server_->Restart().ok());
  Job after_restart;
  const grpc::Status after = Submit("after-restart", "kept-2", &after_restart);
  ASSERT_TRUE(after.ok()) << after.error_code() << ": " << after.error_message();
  ASSERT_TRUE(server_->Stop().ok());
  Job refused;
  const grpc::Status s = Submit("during", "refused-1", &refused);
  EXPECT_FALSE(s.ok());
  ASSERT_TRUE(server_->Restart().ok());
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

// Two coordinators on one database, clients and workers given both addresses: the leader is
// killed, the follower takes over within the lease and serves every acknowledged job; then the
// new leader is paused past its lease, a third process takes over, and the paused one, resumed,
// commits nothing and stops.
TEST_F(PostgresCoordinatorTest, ReplicatedCoordinatorsFailOverWithinTheLeaseAndFenceTheDeposed) {
  ASSERT_TRUE(coordinator_->process().Terminate(absl::Seconds(10)).ok());
  const int port_a = FreeLoopbackPort(), port_b = FreeLoopbackPort();
  const absl::Duration lease = absl::Seconds(2);
  auto start = [&](const std::string& name, int port) {
    return Process::Start(CoordinatorBinary(),
                          {absl::StrCat("--listen=127.0.0.1:", port),
                           "--metrics_listen=", absl::StrCat("--db=", uri_), "--leader_lease=2s",
                           absl::StrCat("--leader_name=", name)});
  };
  auto a = start("a", port_a);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE((*a)->WaitForLinePrefix("listening on", absl::Seconds(20)).ok()) << (*a)->Stderr();
  auto b = start("b", port_b);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE((*b)->WaitForLinePrefix("following as b", absl::Seconds(20)).ok()) << (*b)->Stderr();

  const std::string addresses = absl::StrCat("127.0.0.1:", port_a, ",127.0.0.1:", port_b);
  auto channel = cli::JobClient::OpenChannel(addresses, grpc::InsecureChannelCredentials());
  auto stub = v1::JobService::NewStub(channel);
  std::map<std::string, std::string> acked;
  // Retries as the project's long-lived clients do (docs/reliability.md): after a failed call, a
  // new channel, because a channel whose every address failed can take 3-13 s to try the new
  // leader's address again; each call gets at most 2 s. The same client_job_id: one job at most.
  auto submit_until_ok = [&](const std::string& cid, absl::Duration within) {
    const absl::Time deadline = absl::Now() + within;
    while (absl::Now() < deadline) {
      Job job;
      if (Submit("replicated", cid, &job, stub.get(),
                 std::min(absl::Seconds(2), deadline - absl::Now()))
              .ok()) {
        acked[cid] = job.id();
        return true;
      }
      absl::SleepFor(absl::Milliseconds(50));
      stub = v1::JobService::NewStub(
          cli::JobClient::OpenChannel(addresses, grpc::InsecureChannelCredentials()));
    }
    return false;
  };
  // Every acknowledged job is served, by whichever coordinator leads.
  auto expect_all_acknowledged = [&] {
    for (const auto& [cid, id] : acked) {
      Job got;
      v1::GetJobRequest request;
      request.set_id(id);
      grpc::ClientContext context;
      SetDeadline(context, absl::Seconds(10));
      ASSERT_TRUE(stub->GetJob(&context, request, &got).ok()) << "acknowledged " << id << " lost";
      EXPECT_EQ(got.client_job_id(), cid);
    }
  };
  for (int i = 0; i < 20; ++i)
    ASSERT_TRUE(submit_until_ok(absl::StrCat("before-", i), absl::Seconds(10)));
  // A worker, given both addresses too, is running one of them when the leader dies.
  FakeWorker worker(channel, "survivor", 1);
  ASSERT_TRUE(worker.Register().ok());
  absl::StatusOr<v1::Assignment> running = worker.WaitForAssignment(absl::Seconds(10));
  ASSERT_TRUE(running.ok()) << running.status();
  v1::Progress progress;
  progress.set_step(5);
  ASSERT_TRUE(worker.Running(*running, progress).ok());

  // The leader dies: the follower leads within the lease (plus a poll), clients follow it.
  const absl::Time killed = absl::Now();
  ASSERT_TRUE((*a)->Kill().ok());
  ASSERT_TRUE((*b)->WaitForLinePrefix("listening on", absl::Seconds(20)).ok()) << (*b)->Stderr();
  ASSERT_TRUE(submit_until_ok("after-kill", absl::Seconds(10)));
  const absl::Duration failover = absl::Now() - killed;
  std::cerr << "failover: the first submission after SIGKILL of the leader was acknowledged "
            << failover << " after it\n";
  EXPECT_LT(failover, absl::Seconds(10));
  expect_all_acknowledged();
  // The worker's attempt survives the failover: it re-registers with its running attempt (the new
  // leader asks it to) and finishes it; the job is not run again.
  const absl::Time until = absl::Now() + absl::Seconds(20);
  absl::Status finished = absl::UnavailableError("not tried");
  while (absl::Now() < until && !finished.ok()) {
    (void)worker.Heartbeat(absl::Milliseconds(200));  // answers reregister; FakeWorker obliges
    (void)worker.Register();
    v1::JobResult result;
    result.set_final_loss(0.5f);
    finished = worker.Succeed(*running, result);
  }
  ASSERT_TRUE(finished.ok()) << finished;
  {
    Job got;
    v1::GetJobRequest request;
    request.set_id(running->job_id());
    grpc::ClientContext context;
    SetDeadline(context, absl::Seconds(10));
    ASSERT_TRUE(stub->GetJob(&context, request, &got).ok());
    EXPECT_EQ(got.state(), v1::JOB_STATE_SUCCEEDED);
    EXPECT_EQ(got.attempts(), running->attempt()) << "the job was restarted by the failover";
  }

  // The new leader pauses past its lease; a third process takes over on the first address.
  ASSERT_TRUE((*b)->Signal(SIGSTOP).ok());
  auto c = start("c", port_a);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE((*c)->WaitForLinePrefix("listening on", absl::Seconds(20)).ok()) << (*c)->Stderr();
  ASSERT_TRUE(submit_until_ok("after-pause", absl::Seconds(20)));
  // Resumed, the deposed leader finds its lease taken (or its next write refused) and stops.
  ASSERT_TRUE((*b)->Signal(SIGCONT).ok());
  auto exited = (*b)->Wait(absl::Seconds(20));
  ASSERT_TRUE(exited.ok()) << exited.status();
  EXPECT_EQ(*exited, 1);
  EXPECT_TRUE(absl::StrContains((*b)->Stderr(), "leadership lost") ||
              absl::StrContains((*b)->Stderr(), "no longer the leader"))
      << (*b)->Stderr();
  EXPECT_EQ(acked.size(), 22u);
  expect_all_acknowledged();
  ASSERT_TRUE((*c)->Terminate(absl::Seconds(10)).ok());
}

// Leases are kept by the database's clock: a coordinator whose own clock is an hour ahead
// (libfaketime) neither takes the lease from a leader that renews it, nor fails to take it over
// once that leader is gone.
TEST_F(PostgresCoordinatorTest, AClockSkewedCoordinatorNeitherStealsNorMissesTheLease) {
  ASSERT_TRUE(coordinator_->process().Terminate(absl::Seconds(10)).ok());
  const int port_a = FreeLoopbackPort(), port_b = FreeLoopbackPort();
  auto args = [&](const std::string& name, int port) {
    return std::vector<std::string>{absl::StrCat("--listen=127.0.0.1:", port),
                                    "--metrics_listen=", absl::StrCat("--db=", uri_),
                                    "--leader_lease=1s", absl::StrCat("--leader_name=", name)};
  };
  auto a = Process::Start(CoordinatorBinary(), args("a", port_a));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE((*a)->WaitForLinePrefix("listening on", absl::Seconds(20)).ok()) << (*a)->Stderr();
  std::vector<std::string> skewed = {"-m", "-f", "+1h", CoordinatorBinary()};
  for (const std::string& arg : args("b-skewed", port_b)) skewed.push_back(arg);
  auto b = Process::Start("/usr/bin/faketime", skewed);
  ASSERT_TRUE(b.ok()) << b.status() << " (faketime: Debian's faketime package, scripts/setup.sh)";
  ASSERT_TRUE((*b)->WaitForLinePrefix("following as b-skewed", absl::Seconds(20)).ok())
      << (*b)->Stderr();
  absl::SleepFor(absl::Seconds(4));  // four leases: a by its own clock would have lost it long ago
  EXPECT_FALSE(absl::StrContains((*b)->Stdout(), "listening on")) << "the skewed follower stole it";
  auto stub = v1::JobService::NewStub(cli::JobClient::OpenChannel(
      absl::StrCat("127.0.0.1:", port_a), grpc::InsecureChannelCredentials()));
  Job job;
  ASSERT_TRUE(Submit("skew", "skew-1", &job, stub.get()).ok()) << "the leader lost its lease";
  ASSERT_TRUE((*a)->Kill().ok());
  ASSERT_TRUE((*b)->WaitForLinePrefix("listening on", absl::Seconds(10)).ok()) << (*b)->Stderr();
  ASSERT_TRUE((*b)->Terminate(absl::Seconds(10)).ok());
}

}  // namespace
}  // namespace mesa::testing
