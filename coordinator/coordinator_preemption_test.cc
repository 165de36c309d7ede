// Preemption on the coordinator core (docs/coordinator.md "Preemption"): a pending job of a queue
// with the lower_priority policy stops the fewest running jobs of lower priority, with the queue's
// grace in the cancellation; the victims are rescheduled without using a retry once they report
// STOPPED, and the preemptor takes their place. Queues without the policy, equal priorities and a
// job held back by a GPU quota preempt nothing, and one preemption runs at a time.
#include <map>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "coordinator/coordinator.h"
#include "coordinator/test_util.h"
#include "gtest/gtest.h"

namespace mesa::coordinator {
namespace {

class PreemptionTest : public ::testing::Test {
 protected:
  void Open(int64_t queue_max_gpus = 0) {
    CoordinatorOptions o;
    o.lease_ttl = absl::Seconds(60);
    o.preemption = *ParsePreemptionPolicy("prod=lower_priority/45s,batch=never");
    o.quotas.queue.max_gpus = queue_max_gpus;
    OpenTestCoordinator(TempPath("preemption.db"), &clock_, &metrics_, o, &store_, &c_);
  }
  void Register(const std::string& id, int gpus) {
    mesa::v1::RegisterWorkerRequest r;
    r.set_worker_id(id);
    for (int i = 0; i < gpus; ++i) r.mutable_resources()->add_gpus()->set_index(i);
    auto out = c_->RegisterWorker(r);
    ASSERT_TRUE(out.ok()) << out.status();
    leases_[id] = out->lease_id();
  }
  std::string Submit(const std::string& name, int gpus, int priority, const std::string& queue) {
    mesa::v1::SubmitJobRequest r;
    *r.mutable_spec() = ValidTrainSpec(name, gpus);
    r.mutable_spec()->set_priority(priority);
    r.mutable_spec()->set_queue(queue);
    r.mutable_spec()->set_max_retries(0);  // a preemption must not fail a job
    auto j = c_->SubmitJob(r);
    EXPECT_TRUE(j.ok()) << j.status();
    return j.ok() ? j->id() : "";
  }
  // The worker's heartbeat: what it is told (assignments acknowledged as running).
  mesa::v1::HeartbeatResponse Heartbeat(const std::string& worker) {
    mesa::v1::HeartbeatRequest hb;
    hb.set_worker_id(worker);
    hb.set_lease_id(leases_[worker]);
    hb.set_acked_delivery(acked_[worker]);
    for (const auto& [job, attempt] : running_[worker]) {
      auto* r = hb.add_running();
      r->set_job_id(job);
      r->set_attempt(attempt);
    }
    auto out = c_->Heartbeat(hb, nullptr);
    EXPECT_TRUE(out.ok()) << out.status();
    if (!out.ok()) return {};
    acked_[worker] = std::max(acked_[worker], out->delivery_seq());
    for (const auto& a : out->assignments()) {
      running_[worker][a.job_id()] = a.attempt();
      Report(worker, a.job_id(), a.attempt(), mesa::v1::ATTEMPT_PHASE_RUNNING);
    }
    return *out;
  }
  void Report(const std::string& worker, const std::string& job, int attempt,
              mesa::v1::AttemptPhase phase) {
    mesa::v1::UpdateAttemptRequest u;
    u.set_worker_id(worker);
    u.set_lease_id(leases_[worker]);
    u.set_job_id(job);
    u.set_attempt(attempt);
    u.set_phase(phase);
    ASSERT_TRUE(c_->UpdateAttempt(u).ok());
    if (phase == mesa::v1::ATTEMPT_PHASE_STOPPED) running_[worker].erase(job);
  }
  mesa::v1::JobState State(const std::string& id) { return c_->GetJob(id)->state(); }

  FakeClock clock_;
  Metrics metrics_;
  std::map<std::string, std::string> leases_;
  std::map<std::string, int64_t> acked_;
  std::map<std::string, std::map<std::string, int>> running_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Coordinator> c_;
};

TEST_F(PreemptionTest, AHigherPriorityJobStopsTheFewestLowerOnesWhichResumeWithoutARetry) {
  Open();
  Register("w1", 2);
  Register("w2", 2);
  const std::string big = Submit("big", 2, 0, "batch");      // fills a worker
  const std::string small = Submit("small", 1, 0, "batch");  // half of the other
  const std::string mid = Submit("mid", 1, 5, "batch");      // the other half, higher priority
  ASSERT_EQ(c_->RunSchedulingPass(), 3);
  const std::string big_worker = c_->GetJob(big)->workers(0);
  for (const char* w : {"w1", "w2"}) Heartbeat(w);
  ASSERT_EQ(State(big), mesa::v1::JOB_STATE_RUNNING);

  // Equal priority, or a queue without the policy: nothing is preempted.
  const std::string same = Submit("same", 2, 0, "prod");
  const std::string never = Submit("never", 2, 9, "batch");
  EXPECT_EQ(c_->RunSchedulingPass(), 0);
  for (const char* w : {"w1", "w2"}) EXPECT_EQ(Heartbeat(w).cancellations_size(), 0);
  for (const std::string& id : {same, never}) {
    mesa::v1::CancelJobRequest cancel;
    cancel.set_id(id);
    ASSERT_TRUE(c_->CancelJob(cancel).ok());
  }

  // Priority 10 in prod, two GPUs on one worker: big alone makes room (small and mid stay).
  const std::string urgent = Submit("urgent", 2, 10, "prod");
  EXPECT_EQ(c_->RunSchedulingPass(), 0);
  mesa::v1::HeartbeatResponse told = Heartbeat(big_worker);
  ASSERT_EQ(told.cancellations_size(), 1) << told.DebugString();
  EXPECT_EQ(told.cancellations(0).job_id(), big);
  EXPECT_EQ(told.cancellations(0).grace_seconds(), 45);
  EXPECT_TRUE(
      absl::StrContains(told.cancellations(0).reason(),
                        absl::StrCat("preempted by ", urgent, " (priority 10, queue prod)")))
      << told.cancellations(0).reason();
  // While big checkpoints, no further preemption, and urgent waits.
  EXPECT_EQ(c_->RunSchedulingPass(), 0);
  EXPECT_EQ(State(small), mesa::v1::JOB_STATE_RUNNING);
  EXPECT_EQ(State(mid), mesa::v1::JOB_STATE_RUNNING);
  EXPECT_EQ(State(urgent), mesa::v1::JOB_STATE_QUEUED);

  Report(big_worker, big, 1, mesa::v1::ATTEMPT_PHASE_STOPPED);
  mesa::v1::Job after = *c_->GetJob(big);
  EXPECT_EQ(after.state(), mesa::v1::JOB_STATE_RETRYING) << after.failure_reason();
  EXPECT_EQ(after.evictions(), 1);  // max_retries 0, and still not failed
  EXPECT_EQ(c_->RunSchedulingPass(), 1);
  EXPECT_EQ(State(urgent), mesa::v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(c_->GetJob(urgent)->workers(0), big_worker);
  EXPECT_EQ(State(big), mesa::v1::JOB_STATE_RETRYING);  // waits for room, behind urgent

  // The events say who preempted whom (read up to the RETRYING one, which exists).
  std::string messages;
  mesa::v1::WatchJobRequest watch;
  watch.set_id(big);
  // The sink stops the watch (a non-OK status) at the RETRYING event.
  (void)c_->WatchJob(
      watch,
      [&](const mesa::v1::JobEvent& e) {
        absl::StrAppend(&messages, e.message(), "\n");
        return e.state() != mesa::v1::JOB_STATE_RETRYING;
      },
      [] { return false; });
  EXPECT_TRUE(absl::StrContains(messages, absl::StrCat("preempted by ", urgent,
                                                       " (priority 10, queue prod): checkpointing "
                                                       "and stopping (SIGKILL after 45s)")))
      << messages;
  EXPECT_TRUE(absl::StrContains(messages, "rescheduled (an eviction uses no retry)")) << messages;
}

TEST_F(PreemptionTest, AJobHeldBackByAGpuQuotaPreemptsNothing) {
  Open(/*queue_max_gpus=*/1);
  Register("w1", 2);
  const std::string low = Submit("low", 1, 0, "batch");
  const std::string first = Submit("first", 1, 10, "prod");
  ASSERT_EQ(c_->RunSchedulingPass(), 2);
  Heartbeat("w1");
  // A second prod job: stopping low would free a GPU, but prod already holds its one-GPU quota,
  // so the job would stay queued anyway; low is left alone.
  const std::string second = Submit("second", 1, 10, "prod");
  EXPECT_EQ(c_->RunSchedulingPass(), 0);
  EXPECT_EQ(Heartbeat("w1").cancellations_size(), 0);
  EXPECT_EQ(State(low), mesa::v1::JOB_STATE_RUNNING);
  EXPECT_EQ(State(second), mesa::v1::JOB_STATE_QUEUED);
  (void)first;
}

}  // namespace
}  // namespace mesa::coordinator
