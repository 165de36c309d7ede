// Draining a node end to end (issue 16): a real coordinator, two real worker agents and the real
// mesa-train. `drain --evict` on the worker running a job: no new jobs go there, the running job's
// trainer checkpoints, and the job finishes on the other worker from that checkpoint, using none
// of its retries (max_retries 0); the drained worker is still live (no lease expired).
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

TEST(DrainTest, EvictedJobCheckpointsAndFinishesOnTheOtherWorker) {
  constexpr int64_t kSteps = 400;
  constexpr int64_t kInterval = 50;
  auto cluster = Cluster::Start(2);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  Cluster& c = **cluster;
  JobSpec spec = TinyTrain("drained", kSteps, kInterval);
  spec.set_max_retries(0);
  auto submitted = c.Submit(spec);
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  auto running = c.WaitFor(
      submitted->id(),
      [](const Job& job) { return !job.latest_checkpoint().empty() && job.progress().step() > 52; },
      kJobTimeout);
  ASSERT_TRUE(running.ok()) << running.status();
  ASSERT_EQ(running->workers_size(), 1);
  const std::string node = running->workers(0);

  auto drained = c.client().DrainWorker(node, /*evict=*/true);
  ASSERT_TRUE(drained.ok()) << drained.status();
  EXPECT_TRUE(drained->draining());

  auto job = c.WaitForEnd(submitted->id(), kJobTimeout);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->state(), mesa::v1::JOB_STATE_SUCCEEDED) << job->failure_reason();
  EXPECT_LT(running->progress().step(), kSteps) << "the job finished before the drain";
  EXPECT_EQ(job->attempts(), 2);
  EXPECT_EQ(job->evictions(), 1);
  ASSERT_EQ(job->workers_size(), 1);
  EXPECT_NE(job->workers(0), node);
  EXPECT_EQ(job->progress().step(), kSteps);
  // The second attempt resumed from the checkpoint the evicted trainer wrote on SIGTERM.
  auto events = c.Events(submitted->id());
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
  auto workers = c.client().ListWorkers();
  ASSERT_TRUE(workers.ok()) << workers.status();
  for (const auto& w : workers->workers()) {
    EXPECT_EQ(w.state(), mesa::v1::WORKER_STATE_LIVE) << w.id();
    EXPECT_EQ(w.draining(), w.id() == node) << w.id();
  }
  auto next = c.Submit(TinyTrain("after-drain", 10, 0));
  ASSERT_TRUE(next.ok()) << next.status();
  auto after = c.WaitForEnd(next->id(), kJobTimeout);
  ASSERT_TRUE(after.ok()) << after.status();
  ASSERT_EQ(after->workers_size(), 1);
  EXPECT_NE(after->workers(0), node);
}

// The Kubernetes path: a pod deletion sends the agent SIGTERM. The agent drains itself with
// eviction before stopping its trainers, so the job continues on the other worker from the
// checkpoint written on SIGTERM without using a retry (max_retries 0 would fail it otherwise),
// and the agent deregisters (no lease expires).
TEST(DrainTest, SigtermedAgentEvictsItsJobsWithoutUsingARetry) {
  constexpr int64_t kSteps = 400;
  constexpr int64_t kInterval = 50;
  auto cluster = Cluster::Start(2);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  Cluster& c = **cluster;
  JobSpec spec = TinyTrain("terminated", kSteps, kInterval);
  spec.set_max_retries(0);
  auto submitted = c.Submit(spec);
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  auto running = c.WaitFor(
      submitted->id(),
      [](const Job& job) { return !job.latest_checkpoint().empty() && job.progress().step() > 52; },
      kJobTimeout);
  ASSERT_TRUE(running.ok()) << running.status();
  ASSERT_EQ(running->workers_size(), 1);
  const std::string node = running->workers(0);

  auto stopped = c.worker(node)->Terminate(absl::Seconds(60));
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_EQ(*stopped, 0) << c.worker(node)->Stderr();

  auto job = c.WaitForEnd(submitted->id(), kJobTimeout);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->state(), mesa::v1::JOB_STATE_SUCCEEDED) << job->failure_reason();
  EXPECT_EQ(job->attempts(), 2);
  EXPECT_EQ(job->evictions(), 1);
  ASSERT_EQ(job->workers_size(), 1);
  EXPECT_NE(job->workers(0), node);
  EXPECT_EQ(job->progress().step(), kSteps);
  // Deregistered, not lost: only the other worker is listed, live.
  auto workers = c.client().ListWorkers();
  ASSERT_TRUE(workers.ok()) << workers.status();
  ASSERT_EQ(workers->workers_size(), 1);
  EXPECT_NE(workers->workers(0).id(), node);
  EXPECT_EQ(workers->workers(0).state(), mesa::v1::WORKER_STATE_LIVE);
}

}  // namespace
}  // namespace mesa::e2e
