// TCP communicator: ranks as threads (collectives, failures) and as processes started the way a
// worker agent starts mesa-train (MESA_RANK/MESA_WORLD_SIZE, file rendezvous).
#include "model/comm/tcp_communicator.h"

#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/comm/comm_check.h"
#include "model/comm/subprocess_for_test.h"

namespace mesa::model {
namespace {

std::string g_comm_check;

std::string TempDir(const std::string& name) {
  const char* base = getenv("TEST_TMPDIR");
  std::string dir = std::string(base != nullptr ? base : "/tmp") + "/" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

TcpOptions Loopback(absl::Duration timeout) {
  TcpOptions o;
  o.timeout = timeout;
  o.connect_timeout = absl::Seconds(20);
  o.advertise_host = "127.0.0.1";
  return o;
}

TEST(TcpCommunicatorTest, CollectivesOnThreeRanks) {
  const std::string dir = TempDir("tcp3");
  const int world = 3;
  std::vector<absl::Status> results(world);
  std::vector<std::thread> threads;
  const uint64_t seed = absl::ToUnixNanos(absl::Now());
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      FileIdExchange exchange(dir, r, absl::Seconds(20));
      auto comm = TcpCommunicator::Create(r, world, exchange, Loopback(absl::Seconds(30)));
      if (!comm.ok()) {
        results[r] = comm.status();
        return;
      }
      results[r] = CheckCollectives(**comm, seed);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r)
    EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
}

TEST(TcpCommunicatorTest, PeerThatExitsFailsFast) {
  const std::string dir = TempDir("tcp_exit");
  absl::Status rank0;
  absl::Duration took;
  std::thread t0([&] {
    FileIdExchange exchange(dir, 0, absl::Seconds(20));
    auto comm = TcpCommunicator::Create(0, 2, exchange, Loopback(absl::Seconds(60)));
    ASSERT_TRUE(comm.ok()) << comm.status();
    std::vector<float> x(100, 1.0f);
    const absl::Time start = absl::Now();
    rank0 = (*comm)->AllReduce(x.data(), x.size(), ReduceOp::kSum);
    took = absl::Now() - start;
    // Failed for good: later calls fail at once.
    EXPECT_FALSE((*comm)->Barrier().ok());
  });
  std::thread t1([&] {
    FileIdExchange exchange(dir, 1, absl::Seconds(20));
    auto comm = TcpCommunicator::Create(1, 2, exchange, Loopback(absl::Seconds(60)));
    ASSERT_TRUE(comm.ok()) << comm.status();
    comm->reset();  // "dies": its socket closes
  });
  t0.join();
  t1.join();
  EXPECT_EQ(rank0.code(), absl::StatusCode::kUnavailable) << rank0;
  EXPECT_THAT(std::string(rank0.message()), ::testing::HasSubstr("closed"));
  EXPECT_LT(took, absl::Seconds(10));  // long before the 60 s timeout
}

TEST(TcpCommunicatorTest, HungPeerTimesOut) {
  const std::string dir = TempDir("tcp_hang");
  absl::Status rank0, rank1;
  absl::Notification done;
  std::thread t0([&] {
    FileIdExchange exchange(dir, 0, absl::Seconds(20));
    auto comm = TcpCommunicator::Create(0, 2, exchange, Loopback(absl::Milliseconds(500)));
    ASSERT_TRUE(comm.ok()) << comm.status();
    std::vector<float> x(100, 1.0f);
    rank0 = (*comm)->AllReduce(x.data(), x.size(), ReduceOp::kSum);
    done.Notify();
  });
  std::thread t1([&] {
    FileIdExchange exchange(dir, 1, absl::Seconds(20));
    auto comm = TcpCommunicator::Create(1, 2, exchange, Loopback(absl::Milliseconds(500)));
    ASSERT_TRUE(comm.ok()) << comm.status();
    // Never joins the all-reduce while rank 0 waits.
    done.WaitForNotificationWithTimeout(absl::Seconds(20));
  });
  t0.join();
  t1.join();
  EXPECT_EQ(rank0.code(), absl::StatusCode::kDeadlineExceeded) << rank0;
}

TEST(TcpCommunicatorTest, MissingRankZeroIsBounded) {
  const std::string dir = TempDir("tcp_none");
  FileIdExchange exchange(dir, 1, absl::Milliseconds(300));
  const absl::Time start = absl::Now();
  auto comm = TcpCommunicator::Create(1, 2, exchange, Loopback(absl::Seconds(1)));
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

// comm_check processes with the agent's environment (through CreateCommunicatorFromEnv).
// With stop_on_failure the harness stops the other ranks when one fails, as the agent does.
std::vector<testing::ProcessResult> AgentRanks(int world, const std::string& mode, int timeout_s,
                                               const std::string& dir,
                                               bool stop_on_failure = false) {
  std::vector<testing::ProcessSpec> specs;
  for (int r = 0; r < world; ++r) {
    specs.push_back({{g_comm_check, "--mode=" + mode},
                     {absl::StrCat("MESA_RANK=", r), absl::StrCat("MESA_WORLD_SIZE=", world),
                      "MESA_LOCAL_RANK=" + std::to_string(r), "MESA_JOB_ID=test-job",
                      "MESA_ATTEMPT=1", "MESA_RENDEZVOUS=file:" + dir, "MESA_TCP_HOST=127.0.0.1",
                      absl::StrCat("MESA_COLLECTIVE_TIMEOUT_S=", timeout_s)}});
  }
  return testing::RunProcesses(specs, absl::Seconds(60), stop_on_failure);
}

TEST(TcpCommunicatorProcessTest, AgentLaunchedCollectives) {
  auto results = AgentRanks(2, "collectives", 60, TempDir("agent_ok"));
  for (const auto& r : results) {
    EXPECT_FALSE(r.timed_out) << r.output;
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_THAT(r.output, ::testing::HasSubstr("OK seed="));
    EXPECT_THAT(r.output, ::testing::HasSubstr("comm=tcp"));
  }
}

TEST(TcpCommunicatorProcessTest, AgentLaunchedRankExitsEarly) {
  auto results = AgentRanks(2, "exit_early", 3, TempDir("agent_exit"));
  EXPECT_THAT(results[0].output, ::testing::HasSubstr("DEADLINE_EXCEEDED"));
  EXPECT_THAT(results[0].output, ::testing::HasSubstr("ranks connected"));
  EXPECT_EQ(results[1].exit_code, 7) << results[1].output;
  // Rank 0 waits for rank 1 to connect and gives up within the timeout, or sees it go away.
  EXPECT_FALSE(results[0].timed_out) << results[0].output;
  EXPECT_EQ(results[0].exit_code, 1) << results[0].output;
}

TEST(TcpCommunicatorProcessTest, AgentLaunchedHungRankTimesOut) {
  auto results = AgentRanks(2, "hang", 2, TempDir("agent_hang"), /*stop_on_failure=*/true);
  EXPECT_FALSE(results[0].timed_out) << results[0].output;
  EXPECT_EQ(results[0].exit_code, 1) << results[0].output;
  EXPECT_THAT(results[0].output, ::testing::HasSubstr("DEADLINE_EXCEEDED"));
  EXPECT_LT(results[0].seconds, 30);
}

}  // namespace
}  // namespace mesa::model

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    fprintf(stderr, "usage: %s COMM_CHECK_BINARY\n", argv[0]);
    return 2;
  }
  mesa::model::g_comm_check = argv[1];
  return RUN_ALL_TESTS();
}
