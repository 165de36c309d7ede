// Preemption end to end: a real coordinator with --queue_preemption, one real worker agent with
// one CPU slot and the real mesa-train. A low-priority job runs past its first checkpoint; a
// higher-priority job of a preempting queue arrives, the low job's trainer checkpoints and stops
// (an eviction: no retry used, max_retries 0), the high job runs to the end, and the low job
// resumes from its checkpoint and ends with the same final loss, bit for bit, as the same job run
// without interruption.
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/e2e/cluster.h"

namespace mesa::e2e {
namespace {

using mesa::v1::Job;
using mesa::v1::JobSpec;

constexpr absl::Duration kJobTimeout = absl::Seconds(120);
constexpr int64_t kSteps = 300;
constexpr int64_t kInterval = 50;

TEST(PreemptionTest, APreemptedJobResumesWithIdenticalLosses) {
  ClusterOptions options;
  options.coordinator_args = {"--queue_preemption=prod=lower_priority/20s"};
  auto cluster = Cluster::Start(1, options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();

  JobSpec low_spec = TinyTrain("low", kSteps, kInterval);
  low_spec.set_max_retries(0);
  auto low = (*cluster)->Submit(low_spec);
  ASSERT_TRUE(low.ok()) << low.status();
  auto running = (*cluster)->WaitFor(
      low->id(),
      [](const Job& job) {
        return !job.latest_checkpoint().empty() && job.progress().step() > kInterval + 2;
      },
      kJobTimeout);
  ASSERT_TRUE(running.ok()) << running.status();

  JobSpec high_spec = TinyTrain("high", 60, 30);
  high_spec.set_priority(10);
  high_spec.set_queue("prod");
  auto high = (*cluster)->Submit(high_spec);
  ASSERT_TRUE(high.ok()) << high.status();
  auto high_end = (*cluster)->WaitForEnd(high->id(), kJobTimeout);
  ASSERT_TRUE(high_end.ok()) << high_end.status();
  EXPECT_EQ(high_end->state(), mesa::v1::JOB_STATE_SUCCEEDED) << high_end->failure_reason();

  auto low_end = (*cluster)->WaitForEnd(low->id(), kJobTimeout);
  ASSERT_TRUE(low_end.ok()) << low_end.status();
  ASSERT_EQ(low_end->state(), mesa::v1::JOB_STATE_SUCCEEDED) << low_end->failure_reason();
  EXPECT_LT(running->progress().step(), kSteps) << "the low job finished before the preemption";
  EXPECT_EQ(low_end->attempts(), 2);
  EXPECT_EQ(low_end->evictions(), 1);
  EXPECT_EQ(low_end->progress().step(), kSteps);
  // The high job started after the low one stopped: it ended first.
  EXPECT_LT(high_end->end_time().seconds() * 1000000000LL + high_end->end_time().nanos(),
            low_end->end_time().seconds() * 1000000000LL + low_end->end_time().nanos());
  auto logs = (*cluster)->Logs(low->id());
  ASSERT_TRUE(logs.ok()) << logs.status();
  int resumed = 0;
  for (const mesa::v1::LogLine& line : *logs) {
    resumed += line.attempt() == 2 && absl::StrContains(line.text(), "resumed from");
  }
  EXPECT_GT(resumed, 0) << "the second attempt did not resume from the checkpoint";

  // The same job, never interrupted: the same final loss, bit for bit.
  JobSpec reference_spec = low_spec;
  reference_spec.set_name("reference");
  auto reference = (*cluster)->Submit(reference_spec);
  ASSERT_TRUE(reference.ok()) << reference.status();
  auto reference_end = (*cluster)->WaitForEnd(reference->id(), kJobTimeout);
  ASSERT_TRUE(reference_end.ok()) << reference_end.status();
  ASSERT_EQ(reference_end->state(), mesa::v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(reference_end->attempts(), 1);
  EXPECT_EQ(low_end->result().final_loss(), reference_end->result().final_loss());
  EXPECT_EQ(low_end->result().val_loss(), reference_end->result().val_loss());
}

}  // namespace
}  // namespace mesa::e2e
