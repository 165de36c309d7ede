// The bridge against the real coordinator (a process on loopback), with the trainer's side played
// by mesa-train's own FileIdExchange: two "nodes" with separate directories.
#include "worker/rendezvous_bridge.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "model/comm/unique_id_exchange.h"
#include "tests/coordinator_harness.h"

namespace mesa::worker {
namespace {

using mesa::testing::CoordinatorProcess;
using mesa::testing::FakeWorker;

class RendezvousBridgeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = mesa::testing::NewTempDir("bridge-");
    auto coordinator = CoordinatorProcess::Start(dir_ + "/coordinator.db");
    ASSERT_TRUE(coordinator.ok()) << coordinator.status();
    coordinator_ = std::move(*coordinator);
    stub_ = coordinator_->WorkerStub();
    // A 2-rank CPU job spread over two one-slot workers, so its attempt is current.
    w1_ = std::make_unique<FakeWorker>(coordinator_->channel(), "w1", 1);
    w2_ = std::make_unique<FakeWorker>(coordinator_->channel(), "w2", 1);
    FakeWorker& w1 = *w1_;
    FakeWorker& w2 = *w2_;
    ASSERT_TRUE(w1.Register().ok());
    ASSERT_TRUE(w2.Register().ok());
    mesa::v1::SubmitJobRequest submit;
    *submit.mutable_spec() = mesa::testing::TinyTrainSpec("bridge");
    submit.mutable_spec()->mutable_resources()->set_cpu_ranks(2);
    grpc::ClientContext context;
    mesa::testing::SetDeadline(context, absl::Seconds(10));
    mesa::v1::Job job;
    ASSERT_TRUE(coordinator_->JobStub()->SubmitJob(&context, submit, &job).ok());
    auto assignment = w1.WaitForAssignment(absl::Seconds(10));
    ASSERT_TRUE(assignment.ok()) << assignment.status();
    ASSERT_TRUE(w2.WaitForAssignment(absl::Seconds(10)).ok());
    job_id_ = job.id();
    attempt_ = assignment->attempt();
    key_ = absl::StrCat(job_id_, ".", attempt_, ".tcp");
  }

  // A bridge of worker `node` (1 or 2), calling with that worker's id and lease.
  std::unique_ptr<RendezvousBridge> Bridge(const std::string& dir, int attempt, int node = 1) {
    RendezvousBridgeOptions options;
    options.dir = dir;
    options.job_id = job_id_;
    options.attempt = attempt;
    options.long_poll = absl::Seconds(2);
    const FakeWorker* worker = node == 1 ? w1_.get() : w2_.get();
    options.identity = [worker] { return std::make_pair(worker->worker_id(), worker->lease_id()); };
    auto* stub = stub_.get();
    // The stub outlives every bridge of the test; the provider shares it without owning it.
    return std::make_unique<RendezvousBridge>(options, [stub] {
      return std::shared_ptr<mesa::v1::WorkerService::Stub>(stub, [](auto*) {});
    });
  }

  std::string dir_;
  std::unique_ptr<CoordinatorProcess> coordinator_;
  std::unique_ptr<FakeWorker> w1_, w2_;
  std::unique_ptr<mesa::v1::WorkerService::Stub> stub_;
  std::string job_id_;
  int attempt_ = 0;
  std::string key_;
};

TEST_F(RendezvousBridgeTest, RelaysAValueBetweenTwoNodesDirectories) {
  const std::string node_a = dir_ + "/a", node_b = dir_ + "/b";
  auto bridge_a = Bridge(node_a, attempt_, 1), bridge_b = Bridge(node_b, attempt_, 2);
  ASSERT_TRUE(bridge_a->Start().ok());
  ASSERT_TRUE(bridge_b->Start().ok());

  // Rank 1 waits first (as when rank 0 starts later), then rank 0 publishes a binary value.
  model::FileIdExchange rank1(node_b, 1, absl::Seconds(20)), rank0(node_a, 0, absl::Seconds(20));
  std::string got;
  absl::Status waited;
  std::thread waiter([&] { waited = rank1.Exchange(key_, 0, &got); });
  absl::SleepFor(absl::Milliseconds(300));
  std::string value("\x00\x01 nccl id \xff", 13);
  ASSERT_TRUE(rank0.Exchange(key_, 0, &value).ok());
  waiter.join();
  ASSERT_TRUE(waited.ok()) << waited;
  EXPECT_EQ(got, value);

  EXPECT_EQ(bridge_a->published(), (std::set<std::string>{key_}));
  EXPECT_TRUE(bridge_a->fetched().empty());
  EXPECT_EQ(bridge_b->fetched(), (std::set<std::string>{key_}));
  EXPECT_TRUE(bridge_b->published().empty()) << "a fetched value was published back";
  // Only the value and the marker: temporaries were renamed away.
  std::set<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(node_b)) {
    files.insert(e.path().filename().string());
  }
  EXPECT_EQ(files, (std::set<std::string>{key_, key_ + "+want"}));
}

TEST_F(RendezvousBridgeTest, BothRanksOnOneNodeNeedNoFetch) {
  const std::string node = dir_ + "/one";
  auto bridge = Bridge(node, attempt_);
  ASSERT_TRUE(bridge->Start().ok());
  model::FileIdExchange rank1(node, 1, absl::Seconds(20)), rank0(node, 0, absl::Seconds(20));
  std::string got, value = "127.0.0.1:4242";
  std::thread waiter([&] { EXPECT_TRUE(rank1.Exchange(key_, 0, &got).ok()); });
  absl::SleepFor(absl::Milliseconds(100));
  ASSERT_TRUE(rank0.Exchange(key_, 0, &value).ok());
  waiter.join();
  EXPECT_EQ(got, value);
  // Published anyway (ranks of other nodes may want it), and nothing was fetched.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (bridge->published().empty() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(bridge->published(), (std::set<std::string>{key_}));
  bridge->Stop();
  EXPECT_TRUE(bridge->fetched().empty());
}

TEST_F(RendezvousBridgeTest, StaleAttemptIsNotPublishedAndStopIsPrompt) {
  const std::string node = dir_ + "/stale";
  auto bridge = Bridge(node, attempt_ + 7);
  ASSERT_TRUE(bridge->Start().ok());
  std::ofstream(node + "/" + key_) << "127.0.0.1:1";
  // A wanted key that never comes: the long poll is in flight when Stop() is called.
  std::ofstream(node + "/never.1.tcp+want");
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_TRUE(bridge->published().empty()) << "the coordinator accepted a stale attempt";
  const absl::Time start = absl::Now();
  bridge->Stop();
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  EXPECT_TRUE(bridge->fetched().empty());
}

TEST_F(RendezvousBridgeTest, WaitingForAKeyThatIsNeverPublishedStopsPromptly) {
  auto bridge = Bridge(dir_ + "/waiting", attempt_);
  ASSERT_TRUE(bridge->Start().ok());
  std::ofstream(dir_ + "/waiting/" + key_ + "+want");
  absl::SleepFor(absl::Milliseconds(300));  // The fetcher is in its long poll.
  const absl::Time start = absl::Now();
  bridge->Stop();
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  EXPECT_TRUE(bridge->fetched().empty());
}

TEST(LocalAddressTowardsTest, LoopbackAndSchemes) {
  EXPECT_EQ(LocalAddressTowards("127.0.0.1:50051"), "127.0.0.1");
  EXPECT_EQ(LocalAddressTowards("dns:///127.0.0.1:50051"), "127.0.0.1");
  EXPECT_EQ(LocalAddressTowards("ipv4:127.0.0.1:1"), "127.0.0.1");
  EXPECT_EQ(LocalAddressTowards(""), "");
  EXPECT_EQ(LocalAddressTowards("no-such-host.invalid:1"), "");
}

}  // namespace
}  // namespace mesa::worker
