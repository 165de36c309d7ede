// Pipelines with the injected clock: a job with depends_on waits outside the scheduler, is
// released with its job:<id> reference resolved to the dependency's latest checkpoint when the
// dependency succeeds, fails (and fails its own dependants) when it does not, and keeps waiting
// across a coordinator restart.
#include <string>

#include "absl/strings/match.h"
#include "coordinator/coordinator.h"
#include "coordinator/test_util.h"
#include "gtest/gtest.h"

namespace mesa::coordinator {
namespace {

using ::mesa::spec::ValidEvalSpec;
using mesa::v1::JobState;

mesa::v1::JobSpec EvalOf(
    const std::string& train_id,
    mesa::v1::DependencyCondition after = mesa::v1::DEPENDENCY_CONDITION_UNSPECIFIED) {
  mesa::v1::JobSpec s = ValidEvalSpec("after-train");
  s.mutable_eval()->set_checkpoint("job:" + train_id);
  auto* d = s.add_depends_on();
  d->set_job_id(train_id);
  d->set_after(after);
  return s;
}

class PipelineTest : public CoordinatorTest {
 protected:
  // Runs the train job `id` (attempt 1 on worker "a") to its end, reporting a checkpoint.
  void Finish(const std::string& id, mesa::v1::AttemptPhase end) {
    ASSERT_EQ(c_->RunSchedulingPass(), 1);
    ASSERT_EQ(Beat("a", leases_["a"]).assignments_size(), 1);
    mesa::v1::UpdateAttemptRequest u = Report("a", id, 1, mesa::v1::ATTEMPT_PHASE_RUNNING);
    u.set_checkpoint_path("/ckpt/" + id + "/step_20");
    ASSERT_TRUE(c_->UpdateAttempt(u).ok());
    ASSERT_TRUE(Update("a", id, 1, end, mesa::v1::FAILURE_KIND_USER).ok());
  }
};

TEST_F(PipelineTest, ReleasedWithTheDependencysLatestCheckpointWhenItSucceeds) {
  Register("a", 1);
  const std::string train = Submit(ValidTrainSpec("train", 1));
  const std::string eval = Submit(EvalOf(train));
  EXPECT_EQ(State(eval), JobState::JOB_STATE_QUEUED);
  EXPECT_EQ(c_->GetJob(eval)->waiting_for(0), train);
  mesa::v1::ExplainJobRequest x;
  x.set_id(eval);
  EXPECT_EQ(c_->ExplainJob(x)->reason(), "waiting for " + train + " to end (depends_on)");
  // Only the train job is placed while the evaluation waits.
  Finish(train, mesa::v1::ATTEMPT_PHASE_SUCCEEDED);
  EXPECT_EQ(State(train), JobState::JOB_STATE_SUCCEEDED);
  const mesa::v1::Job released = *c_->GetJob(eval);
  EXPECT_EQ(released.state(), JobState::JOB_STATE_QUEUED);
  EXPECT_TRUE(released.waiting_for().empty());
  EXPECT_EQ(released.spec().eval().checkpoint(), "/ckpt/" + train + "/step_20");
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  const auto hb = Beat("a", leases_["a"]);
  ASSERT_EQ(hb.assignments_size(), 1);
  EXPECT_EQ(hb.assignments(0).job_id(), eval);
  EXPECT_EQ(hb.assignments(0).spec().eval().checkpoint(), "/ckpt/" + train + "/step_20");
  // The same submission again (its client_job_id) is still the same job after the release.
  mesa::v1::SubmitJobRequest r;
  *r.mutable_spec() = EvalOf(train);
  r.set_client_job_id("pipe-eval");
  auto first = c_->SubmitJob(r);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(c_->GetJob(first->id())->state(), JobState::JOB_STATE_QUEUED);
  EXPECT_TRUE(c_->GetJob(first->id())->waiting_for().empty());  // its dependency had ended
  auto again = c_->SubmitJob(r);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->id(), first->id());
}

TEST_F(PipelineTest, AFailedDependencyFailsItsDependantsDownTheChain) {
  Register("a", 1);
  const std::string train = Submit(ValidTrainSpec("train", 1));
  const std::string eval = Submit(EvalOf(train));
  mesa::v1::JobSpec third = ValidTrainSpec("third", 1);
  third.add_depends_on()->set_job_id(eval);
  const std::string after_eval = Submit(third);
  // "after end" runs whatever the train job's end.
  const std::string cleanup = Submit(EvalOf(train, mesa::v1::DEPENDENCY_CONDITION_END));
  Finish(train, mesa::v1::ATTEMPT_PHASE_FAILED);
  EXPECT_EQ(State(train), JobState::JOB_STATE_FAILED);
  const mesa::v1::Job failed = *c_->GetJob(eval);
  EXPECT_EQ(failed.state(), JobState::JOB_STATE_FAILED);
  EXPECT_TRUE(absl::StartsWith(failed.failure_reason(), "dependency " + train + " ended FAILED"))
      << failed.failure_reason();
  EXPECT_TRUE(absl::StrContains(failed.failure_reason(), "only after its success"));
  EXPECT_EQ(State(after_eval), JobState::JOB_STATE_FAILED);
  EXPECT_TRUE(absl::StartsWith(c_->GetJob(after_eval)->failure_reason(),
                               "dependency " + eval + " ended FAILED"));
  EXPECT_EQ(State(cleanup), JobState::JOB_STATE_QUEUED);
  EXPECT_EQ(c_->GetJob(cleanup)->spec().eval().checkpoint(), "/ckpt/" + train + "/step_20");
}

TEST_F(PipelineTest, WaitingSurvivesARestartAndCancellingAWaitingJobEndsIt) {
  Register("a", 1);
  const std::string train = Submit(ValidTrainSpec("train", 1));
  const std::string eval = Submit(EvalOf(train));
  const std::string cancelled = Submit(EvalOf(train));
  mesa::v1::CancelJobRequest cancel;
  cancel.set_id(cancelled);
  ASSERT_TRUE(c_->CancelJob(cancel).ok());
  EXPECT_EQ(State(cancelled), JobState::JOB_STATE_CANCELLED);
  Restart();
  leases_.clear();
  Register("a", 1);
  EXPECT_EQ(c_->GetJob(eval)->waiting_for(0), train);
  Finish(train, mesa::v1::ATTEMPT_PHASE_SUCCEEDED);
  EXPECT_EQ(State(eval), JobState::JOB_STATE_QUEUED);
  EXPECT_TRUE(c_->GetJob(eval)->waiting_for().empty());
  EXPECT_EQ(State(cancelled), JobState::JOB_STATE_CANCELLED);
  // Released jobs are placed, and a restart does not hold them again.
  Restart();
  leases_.clear();
  Register("a", 1);
  EXPECT_EQ(c_->RunSchedulingPass(), 1);
}

TEST_F(PipelineTest, SubmitRefusesUnknownJobsAndUnlistedReferences) {
  mesa::v1::SubmitJobRequest r;
  *r.mutable_spec() = EvalOf("job-99");
  auto unknown = c_->SubmitJob(r);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(unknown.status().message(), "spec.depends_on[0].job_id: no job job-99");
  const std::string train = Submit(ValidTrainSpec("train", 1));
  *r.mutable_spec() = EvalOf(train);
  r.mutable_spec()->mutable_eval()->set_checkpoint("job:job-7");
  auto unlisted = c_->SubmitJob(r);
  EXPECT_EQ(unlisted.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(unlisted.status().message(), "names a job that depends_on does"))
      << unlisted.status();
}

TEST_F(PipelineTest, ADependencyWithoutACheckpointFailsTheReferenceNamingIt) {
  Register("a", 1);
  const std::string train = Submit(ValidTrainSpec("train", 1));
  const std::string eval = Submit(EvalOf(train));
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  ASSERT_EQ(Beat("a", leases_["a"]).assignments_size(), 1);
  ASSERT_TRUE(Update("a", train, 1, mesa::v1::ATTEMPT_PHASE_SUCCEEDED).ok());
  const mesa::v1::Job failed = *c_->GetJob(eval);
  EXPECT_EQ(failed.state(), JobState::JOB_STATE_FAILED);
  EXPECT_TRUE(absl::StrContains(failed.failure_reason(), "eval.checkpoint: job:" + train + ": " +
                                                             train + " recorded no checkpoint"))
      << failed.failure_reason();
}

}  // namespace
}  // namespace mesa::coordinator
