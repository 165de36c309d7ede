// Array jobs in the coordinator: expansion into children, max_parallel, the parent's state, the
// merged table, cancellation and a restart in the middle.
#include <string>
#include <vector>

#include "coordinator/test_util.h"
#include "spec/array_jobs.h"
#include "spec/tasks.h"

namespace mesa::coordinator {
namespace {

using ::mesa::v1::JobState;

// Two checkpoints x two CG settings x two shards of one task, at most three children at once.
mesa::v1::JobSpec ArraySpec() {
  mesa::v1::JobSpec s = spec::ValidEvalSpec("sweep");
  s.mutable_resources()->set_gpus(1);
  mesa::v1::EvalTask& task = *s.mutable_eval()->add_tasks();
  task.set_name("mc");
  task.set_path("/data/mc.jsonl");
  mesa::v1::ArraySpec& a = *s.mutable_array();
  a.add_checkpoints("/ckpt/run/step_10");
  a.add_checkpoints("/ckpt/run/step_20");
  a.add_cg_settings()->set_mode("fixed");
  a.mutable_cg_settings(0)->set_steps(30);
  a.add_cg_settings()->set_mode("tolerance");
  a.mutable_cg_settings(1)->set_tol(1e-4f);
  a.set_shards(2);
  a.set_max_parallel(3);
  return s;
}

// What shard `shard` of 2 of a child reports: four two-choice items, the odd or even ones, with
// log-likelihoods that depend on the checkpoint so that cells differ.
mesa::v1::JobResult ShardResult(int checkpoint, int shard) {
  mesa::v1::JobResult r;
  r.set_checkpoint_path(absl::StrCat("/ckpt/run/step_", 10 * (checkpoint + 1)));
  mesa::v1::TaskResult& t = *r.add_tasks();
  t.set_name("mc");
  t.set_items(4);
  t.set_file_sha256("feed");
  mesa::v1::TaskPartial& p = *r.add_task_partials();
  p.set_task("mc");
  p.set_items(4);
  for (int i = shard; i < 4; i += 2) {
    mesa::v1::TaskItemRecord& rec = *p.add_records();
    rec.set_index(i);
    rec.set_form(static_cast<int>(spec::TaskItemForm::kMultipleChoice));
    // Checkpoint 0 gets items 0 and 1 right, checkpoint 1 every item.
    const bool right = checkpoint == 1 || i < 2;
    for (double ll : {right ? -1.0 : -2.0, right ? -2.0 : -1.0}) {
      rec.add_loglikelihood(ll);
      rec.add_tokens(1);
      rec.add_greedy(false);
      rec.add_norm_chars(3);
      rec.add_norm_bytes(3);
    }
    rec.add_gold(0);
  }
  return r;
}

class ArrayJobTest : public CoordinatorTest {
 protected:
  std::vector<mesa::v1::Job> Children(const std::string& parent) {
    mesa::v1::ListJobsRequest r;
    (*r.mutable_labels())[spec::kArrayLabel] = parent;
    auto listed = c_->ListJobs(r);
    EXPECT_TRUE(listed.ok()) << listed.status();
    return {listed->jobs().begin(), listed->jobs().end()};
  }
  // Runs the assignments the worker gets to success, each with its shard's result; returns how
  // many it ran.
  int RunAssigned(const std::string& worker, const std::string& lease) {
    mesa::v1::HeartbeatResponse hb = Beat(worker, lease);
    for (const mesa::v1::Assignment& a : hb.assignments()) {
      mesa::v1::Job child = *c_->GetJob(a.job_id());
      const int checkpoint = child.spec().eval().checkpoint() == "/ckpt/run/step_10" ? 0 : 1;
      mesa::v1::UpdateAttemptRequest r =
          Report(worker, a.job_id(), a.attempt(), mesa::v1::ATTEMPT_PHASE_SUCCEEDED);
      *r.mutable_result() = ShardResult(checkpoint, child.spec().eval().shard().index());
      EXPECT_TRUE(c_->UpdateAttempt(r).ok());
    }
    return hb.assignments_size();
  }
};

TEST_F(ArrayJobTest, ChildrenRunAtMostMaxParallelAndTheParentGetsTheMergedTable) {
  const std::string parent = Submit(ArraySpec());
  EXPECT_EQ(State(parent), JobState::JOB_STATE_QUEUED);
  std::vector<mesa::v1::Job> children = Children(parent);
  ASSERT_EQ(children.size(), 8u);
  EXPECT_EQ(children[0].spec().name(), "sweep-c0-s0-k0");
  EXPECT_EQ(children[7].spec().name(), "sweep-c1-s1-k1");
  EXPECT_EQ(children[5].spec().eval().checkpoint(), "/ckpt/run/step_20");
  EXPECT_EQ(children[5].spec().model().cg_steps(), 30);
  EXPECT_FLOAT_EQ(children[6].spec().model().cg_tol(), 1e-4f);
  EXPECT_EQ(children[6].spec().model().cg_max_steps(), 30);
  EXPECT_EQ(children[3].spec().eval().shard().index(), 1);
  EXPECT_EQ(children[3].spec().eval().shard().count(), 2);
  EXPECT_FALSE(children[3].spec().has_array());

  const std::string lease = Register("w", 8);
  EXPECT_EQ(c_->RunSchedulingPass(), 3);  // max_parallel, though 8 GPUs are free
  EXPECT_EQ(State(parent), JobState::JOB_STATE_RUNNING);
  int ran = 0;
  for (int round = 0; round < 10 && ran < 8; ++round) {
    ran += RunAssigned("w", lease);
    c_->RunSchedulingPass();
  }
  EXPECT_EQ(ran, 8);
  mesa::v1::Job done = *c_->GetJob(parent);
  ASSERT_EQ(done.state(), JobState::JOB_STATE_SUCCEEDED) << done.failure_reason();
  const mesa::v1::ArrayResult& table = done.result().array();
  EXPECT_EQ(table.children_size(), 8);
  EXPECT_TRUE(table.missing().empty());
  // Per (checkpoint, setting): the task's metrics over all four items, both shards merged.
  std::vector<double> acc;
  for (const mesa::v1::ArrayRow& row : table.rows()) {
    if (row.kind() == "task" && row.metric() == "acc") {
      acc.push_back(row.value());
      EXPECT_EQ(row.count(), 4);
      EXPECT_EQ(row.job_ids_size(), 2);
    }
  }
  EXPECT_EQ(acc, (std::vector<double>{0.5, 0.5, 1.0, 1.0}));
  EXPECT_EQ(table.rows(0).cg_setting(), "fixed 30");
  EXPECT_EQ(table.rows(0).checkpoint(), "/ckpt/run/step_10");
}

TEST_F(ArrayJobTest, RestartKeepsTheLimitAndFinishesTheArray) {
  const std::string parent = Submit(ArraySpec());
  const std::string lease = Register("w", 8);
  EXPECT_EQ(c_->RunSchedulingPass(), 3);
  EXPECT_EQ(RunAssigned("w", lease), 3);
  Restart();
  const std::string again = Register("w", 8);
  EXPECT_EQ(c_->RunSchedulingPass(), 3);  // still at most three at once
  int ran = 3;
  for (int round = 0; round < 10 && ran < 8; ++round) {
    ran += RunAssigned("w", again);
    c_->RunSchedulingPass();
  }
  EXPECT_EQ(ran, 8);
  EXPECT_EQ(State(parent), JobState::JOB_STATE_SUCCEEDED);
}

TEST_F(ArrayJobTest, CancellingTheParentCancelsEveryChild) {
  const std::string parent = Submit(ArraySpec());
  const std::string lease = Register("w", 8);
  EXPECT_EQ(c_->RunSchedulingPass(), 3);
  Beat("w", lease);  // the three are delivered
  mesa::v1::CancelJobRequest cancel;
  cancel.set_id(parent);
  cancel.set_reason("wrong checkpoints");
  EXPECT_EQ(c_->CancelJob(cancel)->state(), JobState::JOB_STATE_RUNNING);  // until they stop
  mesa::v1::HeartbeatResponse hb = Beat("w", lease);
  ASSERT_EQ(hb.cancellations_size(), 3);
  for (const mesa::v1::Cancellation& c : hb.cancellations()) {
    ASSERT_TRUE(Update("w", c.job_id(), c.attempt(), mesa::v1::ATTEMPT_PHASE_STOPPED).ok());
  }
  mesa::v1::Job done = *c_->GetJob(parent);
  EXPECT_EQ(done.state(), JobState::JOB_STATE_CANCELLED);
  EXPECT_EQ(done.failure_reason(), "cancelled: wrong checkpoints");
  for (const mesa::v1::Job& child : Children(parent)) {
    EXPECT_EQ(child.state(), JobState::JOB_STATE_CANCELLED) << child.id();
  }
  EXPECT_EQ(c_->RunSchedulingPass(), 0);  // no held child is admitted after the cancellation
}

TEST_F(ArrayJobTest, AFailedChildFailsTheParentAndLeavesAGap) {
  mesa::v1::JobSpec s = ArraySpec();
  s.mutable_array()->clear_cg_settings();
  s.mutable_array()->set_shards(0);
  s.mutable_array()->set_max_parallel(0);
  const std::string parent = Submit(s);
  const std::string lease = Register("w", 8);
  EXPECT_EQ(c_->RunSchedulingPass(), 2);
  mesa::v1::HeartbeatResponse hb = Beat("w", lease);
  ASSERT_EQ(hb.assignments_size(), 2);
  mesa::v1::UpdateAttemptRequest ok =
      Report("w", hb.assignments(0).job_id(), 1, mesa::v1::ATTEMPT_PHASE_SUCCEEDED);
  *ok.mutable_result() = ShardResult(0, 0);
  // Unsharded: the child reports its metrics itself.
  ok.mutable_result()->clear_task_partials();
  mesa::v1::MetricValue& m = *ok.mutable_result()->mutable_tasks(0)->add_metrics();
  m.set_name("acc");
  m.set_value(0.75);
  ASSERT_TRUE(c_->UpdateAttempt(ok).ok());
  ASSERT_TRUE(Update("w", hb.assignments(1).job_id(), 1, mesa::v1::ATTEMPT_PHASE_FAILED,
                     mesa::v1::FAILURE_KIND_USER)
                  .ok());
  mesa::v1::Job done = *c_->GetJob(parent);
  EXPECT_EQ(done.state(), JobState::JOB_STATE_FAILED);
  EXPECT_TRUE(absl::StrContains(done.failure_reason(), "1 of 2 children did not succeed"))
      << done.failure_reason();
  const mesa::v1::ArrayResult& table = done.result().array();
  ASSERT_EQ(table.rows_size(), 1);
  EXPECT_EQ(table.rows(0).value(), 0.75);
  EXPECT_EQ(table.rows(0).cg_setting(), "model");
  ASSERT_EQ(table.missing_size(), 1);
  EXPECT_TRUE(absl::StrContains(table.missing(0), "checkpoint /ckpt/run/step_20, CG model"))
      << table.missing(0);
}

TEST_F(ArrayJobTest, TooManyChildrenAreRefused) {
  mesa::v1::JobSpec s = ArraySpec();
  s.mutable_array()->add_checkpoints("/ckpt/run/step_30");
  s.mutable_array()->set_shards(200);
  mesa::v1::SubmitJobRequest r;
  *r.mutable_spec() = s;
  absl::StatusOr<mesa::v1::Job> refused = c_->SubmitJob(r);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::StrContains(refused.status().message(),
                                "3 checkpoints x 2 CG settings x 200 shards make 1200 jobs; at "
                                "most 1024"))
      << refused.status();
  EXPECT_TRUE(Children("job-1").empty());
}

}  // namespace
}  // namespace mesa::coordinator
