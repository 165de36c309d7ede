// Client operations on jobs: cancel (including rows in an unknown state), listing with a state
// filter, explain.
#include "coordinator/coordinator.h"

#include <sqlite3.h>

#include <string>

#include "coordinator/test_util.h"
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
