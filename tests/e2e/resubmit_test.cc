// Regression: resubmitting a finished job must not silently train nothing. A real coordinator, a
// real worker agent and the real mesa-train: the same spec (same checkpoint.dir) submitted twice
// trains twice; checkpoint.resume: auto continues the finished run when more steps are asked
// for (and `watch` shows "resumed from step N"), and fails with a user error when there is
// nothing left to train.
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/e2e/cluster.h"

namespace mesa::e2e {
namespace {

using mesa::v1::Job;
using mesa::v1::JobSpec;

constexpr absl::Duration kJobTimeout = absl::Seconds(60);

// The messages of the job's events of `type`.
std::vector<std::string> EventMessages(Cluster& cluster, const std::string& id,
                                       mesa::v1::JobEventType type) {
  std::vector<std::string> out;
  auto events = cluster.Events(id);
  EXPECT_TRUE(events.ok()) << events.status();
  if (!events.ok()) return out;
  for (const auto& e : *events) {
    if (e.type() == type) out.push_back(e.message());
  }
  return out;
}

bool LogsContain(Cluster& cluster, const std::string& id, const std::string& text) {
  auto logs = cluster.Logs(id);
  EXPECT_TRUE(logs.ok()) << logs.status();
  if (!logs.ok()) return false;
  for (const auto& line : *logs) {
    if (absl::StrContains(line.text(), text)) return true;
  }
  return false;
}

absl::StatusOr<Job> RunToEnd(Cluster& cluster, const JobSpec& spec) {
  auto submitted = cluster.Submit(spec);
  if (!submitted.ok()) return submitted.status();
  return cluster.WaitForEnd(submitted->id(), kJobTimeout);
}

TEST(ResubmitTest, TheSameSpecTwiceTrainsTwice) {
  auto cluster = Cluster::Start(1);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  Cluster& c = **cluster;
  JobSpec spec = TinyTrain("resubmit", 12, 6);
  spec.mutable_checkpoint()->set_dir(c.checkpoint_root() + "/named/resubmit");

  auto first = RunToEnd(c, spec);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->state(), mesa::v1::JOB_STATE_SUCCEEDED) << first->failure_reason();
  EXPECT_EQ(first->progress().step(), 12);

  // The same spec again: a new job starts fresh (it used to "succeed" at once, resuming the
  // finished run at its last step).
  auto second = RunToEnd(c, spec);
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_EQ(second->state(), mesa::v1::JOB_STATE_SUCCEEDED) << second->failure_reason();
  EXPECT_EQ(second->progress().step(), 12);
  EXPECT_TRUE(EventMessages(c, second->id(), mesa::v1::JOB_EVENT_TYPE_RESUMED).empty());
  EXPECT_TRUE(LogsContain(c, second->id(), "starting fresh"));
  EXPECT_TRUE(LogsContain(c, second->id(), "step 12/12 loss"))
      << "the second job must train its steps";
  EXPECT_EQ(second->result().final_loss(), first->result().final_loss())
      << "the same spec from the same seed trains the same way";

  // checkpoint.resume: auto with more steps continues the finished run; watch says so.
  JobSpec more = spec;
  more.mutable_checkpoint()->set_resume("auto");
  more.mutable_training()->set_steps(18);
  auto continued = RunToEnd(c, more);
  ASSERT_TRUE(continued.ok()) << continued.status();
  ASSERT_EQ(continued->state(), mesa::v1::JOB_STATE_SUCCEEDED) << continued->failure_reason();
  EXPECT_EQ(continued->progress().step(), 18);
  const std::vector<std::string> resumed =
      EventMessages(c, continued->id(), mesa::v1::JOB_EVENT_TYPE_RESUMED);
  ASSERT_EQ(resumed.size(), 1u);
  EXPECT_TRUE(absl::StartsWith(resumed[0], "resumed from step 12 (")) << resumed[0];

  // auto again with nothing left to train: a user error, not a silent success, and no retry.
  auto nothing = RunToEnd(c, more);
  ASSERT_TRUE(nothing.ok()) << nothing.status();
  EXPECT_EQ(nothing->state(), mesa::v1::JOB_STATE_FAILED);
  EXPECT_TRUE(absl::StrContains(nothing->failure_reason(), "finished run"))
      << nothing->failure_reason();
  EXPECT_EQ(nothing->attempts(), 1);
}

}  // namespace
}  // namespace mesa::e2e
