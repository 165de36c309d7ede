// Draining a node end to end: a real coordinator, two real worker agents and the real
// mesa-train. `drain --evict` on the worker running a job: no new jobs go there, the running job's
// trainer checkpoints, and the job finishes on the other worker from that checkpoint, using none
// of its retries (max_retries 0); the drained worker is still live (no lease expired).
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/e2e/cluster.h"

namespace mesa::e2e {
namespace {

using mesa::v1::Job;
using mesa::v1::JobSpec;

constexpr absl::Duration kJobTimeout = absl::Seconds(90);

constexpr int64_t kSteps = 400;
constexpr int64_t kInterval = 50;

// Two workers and a job with no retry to spare (max_retries 0), running on one of them past its
// first checkpoint.
class DrainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto cluster = Cluster::Start(2);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    JobSpec spec = TinyTrain("drained", kSteps, kInterval);
    spec.set_max_retries(0);
    auto submitted = cluster_->Submit(spec);
    ASSERT_TRUE(submitted.ok()) << submitted.status();
    auto running = cluster_->WaitFor(
        submitted->id(),
        [](const Job& job) {
          return !job.latest_checkpoint().empty() && job.progress().step() > kInterval + 2;
        },
        kJobTimeout);
    ASSERT_TRUE(running.ok()) << running.status();
    ASSERT_EQ(running->workers_size(), 1);
    running_ = *running;
    node_ = running->workers(0);
  }

  // The job succeeded on the other worker in a second attempt; the first ended as an eviction,
  // so it used no retry.
  void ExpectFinishedElsewhereAfterOneEviction() {
    auto job = cluster_->WaitForEnd(running_.id(), kJobTimeout);
    ASSERT_TRUE(job.ok()) << job.status();
    ASSERT_EQ(job->state(), mesa::v1::JOB_STATE_SUCCEEDED) << job->failure_reason();
    EXPECT_LT(running_.progress().step(), kSteps) << "the job finished before the drain";
    EXPECT_EQ(job->attempts(), 2);
    EXPECT_EQ(job->evictions(), 1);
    ASSERT_EQ(job->workers_size(), 1);
    EXPECT_NE(job->workers(0), node_);
    EXPECT_EQ(job->progress().step(), kSteps);
  }

  std::unique_ptr<Cluster> cluster_;
  Job running_;       // the job as it ran before the drain
  std::string node_;  // the worker it ran on
};

TEST_F(DrainTest, EvictedJobCheckpointsAndFinishesOnTheOtherWorker) {
  auto drained = cluster_->client().DrainWorker(node_, /*evict=*/true);
  ASSERT_TRUE(drained.ok()) << drained.status();
  EXPECT_TRUE(drained->draining());

  ExpectFinishedElsewhereAfterOneEviction();
  // The second attempt resumed from the checkpoint the evicted trainer wrote on SIGTERM.
  auto events = cluster_->Events(running_.id());
  ASSERT_TRUE(events.ok()) << events.status();
  int resumed = 0;
  for (const auto& e : *events) {
    if (e.type() != mesa::v1::JOB_EVENT_TYPE_RESUMED) continue;
    ++resumed;
    EXPECT_EQ(e.attempt(), 2);
    EXPECT_TRUE(absl::StartsWith(e.message(), "resumed from step ")) << e.message();
  }
  EXPECT_EQ(resumed, 1);

  // The drained worker is cordoned, not lost: still live, and nothing new goes there.
  auto workers = cluster_->client().ListWorkers();
  ASSERT_TRUE(workers.ok()) << workers.status();
  for (const auto& w : workers->workers()) {
    EXPECT_EQ(w.state(), mesa::v1::WORKER_STATE_LIVE) << w.id();
    EXPECT_EQ(w.draining(), w.id() == node_) << w.id();
  }
  auto next = cluster_->Submit(TinyTrain("after-drain", 10, 0));
  ASSERT_TRUE(next.ok()) << next.status();
  auto after = cluster_->WaitForEnd(next->id(), kJobTimeout);
  ASSERT_TRUE(after.ok()) << after.status();
  ASSERT_EQ(after->workers_size(), 1);
  EXPECT_NE(after->workers(0), node_);
}

// The Kubernetes path: a pod deletion sends the agent SIGTERM. The agent drains itself with
// eviction before stopping its trainers, so the job continues on the other worker from the
// checkpoint written on SIGTERM without using a retry (max_retries 0 would fail it otherwise),
// and the agent deregisters (no lease expires).
TEST_F(DrainTest, SigtermedAgentEvictsItsJobsWithoutUsingARetry) {
  auto stopped = cluster_->worker(node_)->Terminate(absl::Seconds(60));
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_EQ(*stopped, 0) << cluster_->worker(node_)->Stderr();

  ExpectFinishedElsewhereAfterOneEviction();
  // Deregistered, not lost: only the other worker is listed, live.
  auto workers = cluster_->client().ListWorkers();
  ASSERT_TRUE(workers.ok()) << workers.status();
  ASSERT_EQ(workers->workers_size(), 1);
  EXPECT_NE(workers->workers(0).id(), node_);
  EXPECT_EQ(workers->workers(0).state(), mesa::v1::WORKER_STATE_LIVE);
}

}  // namespace
}  // namespace mesa::e2e
