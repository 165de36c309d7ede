// Client operations on jobs: cancel (including rows in an unknown state), listing with a state
// filter and without curves, explain.
#include "coordinator/coordinator.h"

#include <sqlite3.h>

#include <string>

#include "coordinator/test_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace mesa::coordinator {
namespace {

using mesa::v1::JobState;

TEST_F(CoordinatorTest, CancelQueuedAndRunning) {
  const std::string queued = Submit(ValidTrainSpec("q", 4));
  const std::string running = Submit(ValidTrainSpec("r", 1));
  const std::string lease = Register("a", 1);
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  ASSERT_EQ(Beat("a", lease).assignments_size(), 1);
  mesa::v1::CancelJobRequest cq;
  cq.set_id(queued);
  EXPECT_EQ(c_->CancelJob(cq)->state(), JobState::JOB_STATE_CANCELLED);
  EXPECT_EQ(c_->CancelJob(cq).status().code(), absl::StatusCode::kFailedPrecondition);
  mesa::v1::CancelJobRequest cr;
  cr.set_id(running);
  cr.set_reason("no longer needed");
  EXPECT_EQ(c_->CancelJob(cr)->state(),
            JobState::JOB_STATE_SCHEDULED);  // until the worker stops it
  auto hb = Beat("a", lease);
  ASSERT_EQ(hb.cancellations_size(), 1);
  EXPECT_EQ(hb.cancellations(0).job_id(), running);
  EXPECT_EQ(hb.cancellations(0).reason(), "no longer needed");
  ASSERT_TRUE(Update("a", running, 1, mesa::v1::ATTEMPT_PHASE_STOPPED).ok());
  EXPECT_EQ(State(running), JobState::JOB_STATE_CANCELLED);
  mesa::v1::CancelJobRequest missing;
  missing.set_id("job-12345");
  EXPECT_EQ(c_->CancelJob(missing).status().code(), absl::StatusCode::kNotFound);
}

// A row in a state outside the lifecycle (written by something else) is refused, not cancelled:
// cancelling it would be a transition the state machine forbids.
TEST_F(CoordinatorTest, CancelOfJobInUnknownStateIsRefused) {
  const std::string id = Submit(ValidTrainSpec("u", 1));
  c_.reset();
  store_.reset();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE jobs SET state = 0", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  Open();
  mesa::v1::CancelJobRequest r;
  r.set_id(id);
  EXPECT_EQ(c_->CancelJob(r).status().code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(c_->GetJob(id).ok());
}

TEST_F(CoordinatorTest, ListingWithAStateFilterSkipsARowWhoseStateIsOutOfRange) {
  // ListJobs indexed an 8-entry table with the stored state unchecked.
  const std::string id = Submit(ValidTrainSpec("odd", 1));
  const std::string ok = Submit(ValidTrainSpec("fine", 1));
  c_.reset();
  store_.reset();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  const std::string update = "UPDATE jobs SET state = 100000 WHERE id = '" + id + "'";
  ASSERT_EQ(sqlite3_exec(db, update.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  Open();
  mesa::v1::ListJobsRequest r;
  r.add_states(JobState::JOB_STATE_QUEUED);
  auto listed = c_->ListJobs(r);
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->jobs_size(), 1);
  EXPECT_EQ(listed->jobs(0).id(), ok);
}

// A list leaves the per-position curves out, and only them; the stored job keeps them.
TEST_F(CoordinatorTest, ListingLeavesOutTheCurvesAndOnlyThem) {
  const std::string id = Submit(ValidTrainSpec("curves", 1));
  Register("a", 1);
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  mesa::v1::UpdateAttemptRequest done = Report("a", id, 1, mesa::v1::ATTEMPT_PHASE_SUCCEEDED);
  mesa::v1::JobResult& result = *done.mutable_result();
  result.set_val_loss(2.5f);
  (*result.mutable_metrics())["tokens"] = 7;
  for (const char* name : {"val", "long"}) {
    mesa::v1::DatasetResult& d = *result.add_datasets();
    d.set_name(name);
    d.set_loss(2.5);
    for (int k = 0; k < 5; ++k) {
      d.add_nll_at_position(3.0 - 0.1 * k);
      d.add_mean_nll_so_far(3.0 - 0.05 * k);
      d.add_count_at_position(10 - k);
    }
  }
  mesa::v1::CgSweepPoint& point = *result.add_cg_sweep();
  point.set_cg_mode("tolerance");
  point.set_cg_steps_mean(4.5);
  for (int k = 0; k < 5; ++k) point.add_cg_steps_at_position(4.0 + k);
  result.add_internals()->add_heads()->set_lambda_mean(0.3);
  ASSERT_TRUE(c_->UpdateAttempt(done).ok());
  auto stored = c_->GetJob(id);
  ASSERT_TRUE(stored.ok()) << stored.status();
  ASSERT_EQ(stored->result().datasets(1).nll_at_position_size(), 5);

  auto listed = c_->ListJobs(mesa::v1::ListJobsRequest());
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->jobs_size(), 1);
  mesa::v1::Job want = *stored;
  for (mesa::v1::DatasetResult& d : *want.mutable_result()->mutable_datasets()) {
    d.clear_nll_at_position();
    d.clear_mean_nll_so_far();
    d.clear_count_at_position();
  }
  want.mutable_result()->mutable_cg_sweep(0)->clear_cg_steps_at_position();
  std::string diff;
  google::protobuf::util::MessageDifferencer differ;
  differ.ReportDifferencesToString(&diff);
  EXPECT_TRUE(differ.Compare(want, listed->jobs(0))) << diff;
  auto again = c_->GetJob(id);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*again, *stored));
  // A job without a result is listed without one.
  const std::string queued = Submit(ValidTrainSpec("queued", 1));
  listed = c_->ListJobs(mesa::v1::ListJobsRequest());
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->jobs_size(), 2);
  EXPECT_EQ(listed->jobs(1).id(), queued);
  EXPECT_FALSE(listed->jobs(1).has_result());
}

TEST_F(CoordinatorTest, ExplainGivesQueuePosition) {
  Register("a", 2);
  const std::string big = Submit(ValidTrainSpec("big", 2));
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  auto hi = ValidTrainSpec("hi", 2);
  hi.set_priority(5);
  const std::string first = Submit(ValidTrainSpec("first", 2));
  const std::string second = Submit(hi);
  c_->RunSchedulingPass();
  mesa::v1::ExplainJobRequest r;
  r.set_id(first);
  auto x = c_->ExplainJob(r);
  ASSERT_TRUE(x.ok());
  EXPECT_EQ(x->queue_position(), 2);
  EXPECT_EQ(x->pending_jobs(), 2);
  r.set_id(second);
  x = c_->ExplainJob(r);
  EXPECT_EQ(x->queue_position(), 1);
  EXPECT_NE(x->reason().find("head of the queue"), std::string::npos) << x->reason();
  r.set_id(big);
  x = c_->ExplainJob(r);
  EXPECT_EQ(x->queue_position(), 0);
  EXPECT_EQ(x->live_workers(), 1);
}

}  // namespace
}  // namespace mesa::coordinator
