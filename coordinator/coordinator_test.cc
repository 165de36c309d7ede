// The coordinator core with an injected clock: leases, retries, restart, reconciliation and
// redelivery of assignments, without sleeping (the fixture is in test_util.h).
#include "coordinator/coordinator.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "coordinator/test_util.h"
#include "gtest/gtest.h"

namespace mesa::coordinator {
namespace {

using mesa::v1::JobState;

TEST_F(CoordinatorTest, EveryAttemptGetsTheSameCheckpointRoot) {
  checkpoint_root_ = "/shared/ckpt";
  Restart();
  auto spec = ValidTrainSpec("root", 1);
  spec.set_max_retries(1);
  const std::string id = Submit(spec);
  auto own = ValidTrainSpec("own-dir", 1);
  own.set_max_retries(1);
  // With a checkpoint root, a named directory lies inside it (confined paths).
  own.mutable_checkpoint()->set_dir("/shared/ckpt/named/own-dir");
  Submit(own);
  const std::string lease_a = Register("a", 2);
  ASSERT_EQ(c_->RunSchedulingPass(), 2);
  auto hb = Beat("a", lease_a);
  ASSERT_EQ(hb.assignments_size(), 2);
  for (const auto& a : hb.assignments()) {
    EXPECT_EQ(a.checkpoint_dir(),
              a.job_id() == id ? "/shared/ckpt/" + id : "/shared/ckpt/named/own-dir");
    EXPECT_EQ(a.checkpoint_root(), "/shared/ckpt");  // the worker checks it again at use
  }
  // The worker is lost; the retry elsewhere gets the same root.
  clock_.Advance(absl::Seconds(11));
  c_->CheckLeases();
  const std::string lease_b = Register("b", 2);
  ASSERT_EQ(c_->RunSchedulingPass(), 2);
  hb = Beat("b", lease_b);
  ASSERT_EQ(hb.assignments_size(), 2);
  for (const auto& a : hb.assignments()) {
    EXPECT_EQ(a.attempt(), 2);
    EXPECT_EQ(a.checkpoint_dir(),
              a.job_id() == id ? "/shared/ckpt/" + id : "/shared/ckpt/named/own-dir");
  }
}

// GPU accounting: a placed job's GPUs accrue GPU-seconds for its owner and queue on every tick,
// from scheduling on, and stop with the attempt.
TEST_F(CoordinatorTest, PlacedJobsAccrueGpuSecondsByOwnerAndQueue) {
  auto spec = ValidTrainSpec("gpu-time", 2);
  spec.set_queue("research");
  const std::string id = Submit(spec);
  const std::string lease = Register("a", 2);
  c_->CheckRunningJobs();  // the first tick only starts the clock
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  clock_.Advance(absl::Seconds(3));
  c_->CheckRunningJobs();
  const std::string series =
      "mesa_coordinator_gpu_seconds_total{owner=\"anonymous\",queue=\"research\"} ";
  EXPECT_TRUE(absl::StrContains(metrics_.Serialize(), series + "6")) << metrics_.Serialize();
  ASSERT_EQ(Beat("a", lease).assignments_size(), 1);
  ASSERT_TRUE(Update("a", id, 1, mesa::v1::ATTEMPT_PHASE_RUNNING).ok());
  clock_.Advance(absl::Seconds(2));
  c_->CheckRunningJobs();
  EXPECT_TRUE(absl::StrContains(metrics_.Serialize(), series + "10")) << metrics_.Serialize();
  ASSERT_TRUE(Update("a", id, 1, mesa::v1::ATTEMPT_PHASE_SUCCEEDED).ok());
  clock_.Advance(absl::Seconds(4));
  c_->CheckRunningJobs();
  EXPECT_TRUE(absl::StrContains(metrics_.Serialize(), series + "10")) << metrics_.Serialize();
}

TEST_F(CoordinatorTest, RegistrationUnderALiveWorkersIdDoesNotTakeItsLeaseOrFailItsAttempts) {
  // Regression: three RegisterWorker calls with a live worker's id replaced its lease and failed
  // its running job for good.
  auto spec = ValidTrainSpec("victim", 1);
  spec.set_max_retries(1);
  const std::string id = Submit(spec);
  const std::string lease_a = Register("a", 1);
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  ASSERT_EQ(Beat("a", lease_a).assignments_size(), 1);
  ASSERT_TRUE(Update("a", id, 1, mesa::v1::ATTEMPT_PHASE_RUNNING).ok());
  for (int i = 0; i < 3; ++i) {
    mesa::v1::RegisterWorkerRequest impostor;
    impostor.set_worker_id("a");
    impostor.mutable_resources()->add_gpus()->set_index(0);
    if (i == 2) impostor.set_lease_id("a-0-1");  // a guessed lease is no better
    auto out = c_->RegisterWorker(impostor);
    ASSERT_EQ(out.status().code(), absl::StatusCode::kAlreadyExists) << out.status();
    EXPECT_NE(out.status().message().find("live lease"), std::string::npos) << out.status();
  }
  auto job = c_->GetJob(id);
  EXPECT_EQ(job->state(), JobState::JOB_STATE_RUNNING);
  EXPECT_EQ(job->attempts(), 1);
  // The real worker keeps its lease and keeps reporting.
  EXPECT_FALSE(Beat("a", lease_a, {{id, 1}}).reregister());
  EXPECT_TRUE(Update("a", id, 1, mesa::v1::ATTEMPT_PHASE_RUNNING).ok());
  // The holder may re-register with its lease (what the agent does), keeping its attempt.
  const std::string lease_a2 = Register("a", 1, {{id, 1}});
  EXPECT_NE(lease_a2, lease_a);
  EXPECT_EQ(c_->GetJob(id)->state(), JobState::JOB_STATE_RUNNING);
  // Once the lease lapses (the holder died), the id is free to register again.
  clock_.Advance(absl::Seconds(11));
  c_->CheckLeases();
  leases_.erase("a");
  EXPECT_FALSE(Register("a", 1).empty());
}

TEST_F(CoordinatorTest, LeaseExpiryRetriesFromCheckpointThenFails) {
  auto spec = ValidTrainSpec("retry", 2);
  spec.set_max_retries(1);
  const std::string id = Submit(spec);
  const std::string lease_a = Register("a", 2);
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  auto hb = Beat("a", lease_a);
  ASSERT_EQ(hb.assignments_size(), 1);
  EXPECT_EQ(hb.assignments(0).attempt(), 1);
  EXPECT_EQ(hb.assignments(0).world_size(), 2);
  mesa::v1::UpdateAttemptRequest u = Report("a", id, 1, mesa::v1::ATTEMPT_PHASE_RUNNING);
  u.set_checkpoint_path("/ckpt/step-50");
  ASSERT_TRUE(c_->UpdateAttempt(u).ok());
  EXPECT_EQ(State(id), JobState::JOB_STATE_RUNNING);

  clock_.Advance(absl::Seconds(9));
  c_->CheckLeases();
  EXPECT_EQ(State(id), JobState::JOB_STATE_RUNNING);  // lease still valid
  clock_.Advance(absl::Seconds(2));
  c_->CheckLeases();
  auto job = c_->GetJob(id);
  EXPECT_EQ(job->state(), JobState::JOB_STATE_RETRYING);
  // The lost worker must register again; a new worker takes the retry from the checkpoint.
  EXPECT_TRUE(Beat("a", lease_a).reregister());
  const std::string lease_b = Register("b", 2);
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  hb = Beat("b", lease_b);
  ASSERT_EQ(hb.assignments_size(), 1);
  EXPECT_EQ(hb.assignments(0).attempt(), 2);
  // A report from the old attempt is stale.
  EXPECT_EQ(Update("a", id, 1, mesa::v1::ATTEMPT_PHASE_SUCCEEDED).code(),
            absl::StatusCode::kFailedPrecondition);

  clock_.Advance(absl::Seconds(11));
  c_->CheckLeases();
  job = c_->GetJob(id);
  EXPECT_EQ(job->state(), JobState::JOB_STATE_FAILED);
  EXPECT_NE(job->failure_reason().find("worker b lost"), std::string::npos)
      << job->failure_reason();
  EXPECT_NE(job->failure_reason().find("no retries left"), std::string::npos)
      << job->failure_reason();
  bool saw_retrying = false;
  int64_t last = 0;
  for (const auto& e : Events(id)) {
    EXPECT_GT(e.sequence(), last);
    last = e.sequence();
    if (e.state() == JobState::JOB_STATE_RETRYING &&
        e.type() == mesa::v1::JOB_EVENT_TYPE_STATE_CHANGED) {
      saw_retrying = true;
      EXPECT_NE(e.message().find("worker a lost"), std::string::npos) << e.message();
    }
  }
  EXPECT_TRUE(saw_retrying);
}

TEST_F(CoordinatorTest, WorkerCallsNeedTheWorkersCurrentLease) {
  // Regression: a plain client made a running job SUCCEEDED, and published rendezvous values, by
  // naming a worker of the attempt.
  const std::string id = Submit(ValidTrainSpec("leased", 1));
  const std::string lease = Register("a", 1);
  Register("b", 1);  // live, with a lease, but not a worker of this attempt
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  const std::string runner = c_->GetJob(id)->workers(0);
  const std::string other = runner == "a" ? "b" : "a";
  mesa::v1::UpdateAttemptRequest forged;
  forged.set_worker_id(runner);
  forged.set_job_id(id);
  forged.set_attempt(1);
  forged.set_phase(mesa::v1::ATTEMPT_PHASE_SUCCEEDED);
  forged.mutable_result()->set_final_loss(1e-4f);
  for (const std::string& lease_id : {std::string(), std::string("guessed"), leases_[other]}) {
    forged.set_lease_id(lease_id);
    EXPECT_EQ(c_->UpdateAttempt(forged).status().code(), absl::StatusCode::kAborted) << lease_id;
  }
  forged.set_worker_id(other);  // a live worker with its own lease, of another attempt
  forged.set_lease_id(leases_[other]);
  EXPECT_EQ(c_->UpdateAttempt(forged).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(State(id), JobState::JOB_STATE_SCHEDULED) << "nothing forged was applied";
  mesa::v1::PutRendezvousRequest put;
  put.set_job_id(id);
  put.set_attempt(1);
  put.set_key("job.1.tcp");
  put.set_value("10.0.0.66:1");
  put.set_worker_id(runner);
  EXPECT_EQ(c_->PutRendezvous(put).code(), absl::StatusCode::kAborted);
  mesa::v1::GetRendezvousRequest get;
  get.set_job_id(id);
  get.set_attempt(1);
  get.set_key("job.1.tcp");
  get.set_worker_id(runner);
  EXPECT_EQ(c_->GetRendezvous(get, nullptr).status().code(), absl::StatusCode::kAborted);
  // The real worker with its lease: accepted.
  put.set_lease_id(leases_[runner]);
  EXPECT_TRUE(c_->PutRendezvous(put).ok());
  get.set_lease_id(leases_[runner]);
  EXPECT_EQ(c_->GetRendezvous(get, nullptr)->value(), "10.0.0.66:1");
  forged.set_worker_id(runner);
  forged.set_lease_id(leases_[runner]);
  EXPECT_TRUE(c_->UpdateAttempt(forged).ok());
  (void)lease;
}

TEST_F(CoordinatorTest, AnAttemptTheWorkerNoLongerListsEndsAsInfra) {
  // Regression: an attempt whose reports could not be delivered stayed RUNNING with no trainer
  // while its worker kept heartbeating; once the worker stops listing it, it is lost.
  auto spec = ValidTrainSpec("vanished", 1);
  spec.set_max_retries(0);  // no retry left: FAILED, with the reason
  const std::string id = Submit(spec);
  const std::string lease = Register("a", 1);
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  auto hb = Beat("a", lease);
  ASSERT_EQ(hb.assignments_size(), 1);
  const int64_t seq = hb.delivery_seq();
  ASSERT_TRUE(Update("a", id, 1, mesa::v1::ATTEMPT_PHASE_RUNNING).ok());
  Beat("a", lease, {{id, 1}}, seq);
  EXPECT_EQ(State(id), JobState::JOB_STATE_RUNNING) << "listed: still running";
  Beat("a", lease, {}, seq);
  auto job = c_->GetJob(id);
  EXPECT_EQ(job->state(), JobState::JOB_STATE_FAILED);
  EXPECT_TRUE(absl::StrContains(job->failure_reason(), "worker a no longer runs attempt 1"))
      << job->failure_reason();
}

TEST_F(CoordinatorTest, UserFailureDoesNotRetryInfraFailureDoes) {
  auto spec = ValidTrainSpec("f", 1);
  spec.set_max_retries(3);
  const std::string user = Submit(spec);
  const std::string infra = Submit(spec);
  const std::string lease = Register("a", 2);
  ASSERT_EQ(c_->RunSchedulingPass(), 2);
  ASSERT_TRUE(
      Update("a", user, 1, mesa::v1::ATTEMPT_PHASE_FAILED, mesa::v1::FAILURE_KIND_USER).ok());
  ASSERT_TRUE(
      Update("a", infra, 1, mesa::v1::ATTEMPT_PHASE_FAILED, mesa::v1::FAILURE_KIND_INFRA).ok());
  EXPECT_EQ(State(user), JobState::JOB_STATE_FAILED);
  EXPECT_EQ(c_->GetJob(user)->failure_reason(), "boom");
  EXPECT_EQ(State(infra), JobState::JOB_STATE_RETRYING);
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  EXPECT_EQ(c_->GetJob(infra)->attempts(), 2);
}

TEST_F(CoordinatorTest, RestartReloadsJobsAndReconcilesWorkers) {
  const std::string kept = Submit(ValidTrainSpec("kept", 1));
  auto orphan_spec = ValidTrainSpec("orphan", 1);
  orphan_spec.set_max_retries(2);
  const std::string orphan = Submit(orphan_spec);
  const std::string queued = Submit(ValidTrainSpec("queued", 8));
  Register("a", 1);
  Register("b", 1);
  ASSERT_EQ(c_->RunSchedulingPass(), 2);
  const std::string on_a = c_->GetJob(kept)->workers(0);
  const std::string other = on_a == "a" ? "b" : "a";
  ASSERT_TRUE(Update(on_a, kept, 1, mesa::v1::ATTEMPT_PHASE_RUNNING).ok());
  ASSERT_TRUE(Update(other, orphan, 1, mesa::v1::ATTEMPT_PHASE_RUNNING).ok());

  Restart();
  EXPECT_EQ(State(kept), JobState::JOB_STATE_RUNNING);
  EXPECT_EQ(State(orphan), JobState::JOB_STATE_RUNNING);
  EXPECT_EQ(State(queued), JobState::JOB_STATE_QUEUED);
  // The worker running `kept` comes back and also reports an attempt the coordinator never ran.
  mesa::v1::RegisterWorkerResponse resp;
  const std::string lease = Register(on_a, 1, {{kept, 1}, {"job-999", 1}}, 0, &resp);
  ASSERT_EQ(resp.stop_size(), 1);
  EXPECT_EQ(resp.stop(0).job_id(), "job-999");
  EXPECT_EQ(c_->RunSchedulingPass(), 0);  // its GPU is still taken by `kept`
  // The other worker never comes back: after the lease TTL its job retries.
  clock_.Advance(absl::Seconds(5));
  Beat(on_a, lease, {{kept, 1}});  // as agents do: every attempt it runs is listed
  clock_.Advance(absl::Seconds(6));
  c_->CheckLeases();
  EXPECT_EQ(State(kept), JobState::JOB_STATE_RUNNING);
  EXPECT_EQ(State(orphan), JobState::JOB_STATE_RETRYING);
  ASSERT_TRUE(Update(on_a, kept, 1, mesa::v1::ATTEMPT_PHASE_SUCCEEDED).ok());
  EXPECT_EQ(State(kept), JobState::JOB_STATE_SUCCEEDED);
  ASSERT_EQ(c_->RunSchedulingPass(), 1);  // the retry takes the freed GPU
  EXPECT_EQ(State(orphan), JobState::JOB_STATE_SCHEDULED);

  // Finished jobs come back after a restart too (loaded lazily), sequences keep increasing.
  const int64_t before = c_->GetJob(kept)->last_sequence();
  Restart();
  EXPECT_EQ(State(kept), JobState::JOB_STATE_SUCCEEDED);
  const std::string fresh = Submit(ValidTrainSpec("fresh", 1));
  EXPECT_GT(c_->GetJob(fresh)->last_sequence(), before);
  EXPECT_NE(fresh, kept);
}

TEST_F(CoordinatorTest, RestartRedeliversUnstartedAssignment) {
  const std::string id = Submit(ValidTrainSpec("j", 1));
  Register("a", 1);
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  Restart();  // the assignment was never picked up
  const std::string lease = Register("a", 1);
  auto hb = Beat("a", lease);
  ASSERT_EQ(hb.assignments_size(), 1);
  EXPECT_EQ(hb.assignments(0).job_id(), id);
}

// The agent's heartbeat deadline can pass while the coordinator waits for the commit of the
// assignments it is about to hand out; gRPC then drops the answer. Those assignments must stay
// queued for the next heartbeat, or the job stays SCHEDULED forever (the worker keeps its lease).
TEST_F(CoordinatorTest, HeartbeatCancelledByClientKeepsAssignments) {
  const std::string id = Submit(ValidTrainSpec("j", 1));
  const std::string lease = Register("a", 1);
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  mesa::v1::HeartbeatRequest r;
  r.set_worker_id("a");
  r.set_lease_id(lease);
  auto gone = c_->Heartbeat(r, [] { return true; });  // the client went away
  EXPECT_FALSE(gone.ok());
  auto hb = Beat("a", lease);
  ASSERT_EQ(hb.assignments_size(), 1);
  EXPECT_EQ(hb.assignments(0).job_id(), id);
}

// A heartbeat answer lost after gRPC sent it (connection reset, agent crash): the job would stay
// SCHEDULED forever while the worker keeps its lease. A later heartbeat that does not list the
// attempt gets it again; an agent without acks only after a grace, so one still starting it does
// not get it twice.
TEST_F(CoordinatorTest, LostAssignmentIsRedeliveredAfterGraceWithoutAcks) {
  const std::string id = Submit(ValidTrainSpec("j", 1));
  const std::string lease = Register("a", 1);
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  auto hb = Beat("a", lease);
  ASSERT_EQ(hb.assignments_size(), 1);  // ... and lost on the way
  EXPECT_EQ(hb.delivery_seq(), 1);
  EXPECT_EQ(Beat("a", lease).assignments_size(), 0);  // within the grace
  clock_.Advance(absl::Seconds(10));                  // 2 heartbeat intervals
  hb = Beat("a", lease);
  ASSERT_EQ(hb.assignments_size(), 1);
  EXPECT_EQ(hb.assignments(0).job_id(), id);
  EXPECT_EQ(hb.assignments(0).attempt(), 1);
  EXPECT_EQ(hb.delivery_seq(), 2);
  // This one arrived: the agent lists it from now on, and it is not delivered again.
  clock_.Advance(absl::Seconds(10));
  EXPECT_EQ(Beat("a", lease, {{id, 1}}).assignments_size(), 0);
  clock_.Advance(absl::Seconds(30));
  EXPECT_EQ(Beat("a", lease, {{id, 1}}).assignments_size(), 0);
  EXPECT_EQ(State(id), JobState::JOB_STATE_SCHEDULED);
}

TEST_F(CoordinatorTest, LostAssignmentIsRedeliveredAtOnceToAckingAgent) {
  const std::string first = Submit(ValidTrainSpec("first", 1));
  const std::string lease = Register("a", 2);
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  auto hb = Beat("a", lease);
  ASSERT_EQ(hb.assignments_size(), 1);
  ASSERT_EQ(hb.delivery_seq(), 1);
  const std::string second = Submit(ValidTrainSpec("second", 1));
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  hb = Beat("a", lease, {{first, 1}}, /*acked=*/1);
  ASSERT_EQ(hb.assignments_size(), 1);
  ASSERT_EQ(hb.assignments(0).job_id(), second);
  ASSERT_EQ(hb.delivery_seq(), 2);
  // Lost: the agent still acks only 1, so the next heartbeat gets it again without any grace.
  hb = Beat("a", lease, {{first, 1}}, /*acked=*/1);
  ASSERT_EQ(hb.assignments_size(), 1);
  EXPECT_EQ(hb.assignments(0).job_id(), second);
  EXPECT_EQ(hb.delivery_seq(), 3);
  // Received: acked, not delivered again even before the agent lists it.
  clock_.Advance(absl::Seconds(30));
  EXPECT_EQ(Beat("a", lease, {{first, 1}}, /*acked=*/3).assignments_size(), 0);
  EXPECT_EQ(Beat("a", lease, {{first, 1}, {second, 1}}, /*acked=*/3).assignments_size(), 0);
}

TEST_F(CoordinatorTest, LostAssignmentOfCancelledJobEndsCancelled) {
  const std::string id = Submit(ValidTrainSpec("j", 1));
  const std::string lease = Register("a", 1);
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  ASSERT_EQ(Beat("a", lease).assignments_size(), 1);  // lost
  mesa::v1::CancelJobRequest cancel;
  cancel.set_id(id);
  ASSERT_TRUE(c_->CancelJob(cancel).ok());
  EXPECT_EQ(State(id), JobState::JOB_STATE_SCHEDULED);  // waits for the worker to stop it
  clock_.Advance(absl::Seconds(10));
  auto hb = Beat("a", lease);
  EXPECT_EQ(hb.assignments_size(), 0);
  EXPECT_EQ(State(id), JobState::JOB_STATE_CANCELLED);
}

// Re-registration rebuilds the worker's resources from scratch: whatever the coordinator still
// places there must be accounted for exactly once, whichever order the jobs are reconciled in.
TEST_F(CoordinatorTest, ReregistrationKeepsCpuSlotAccounting) {
  auto spec = ValidTrainSpec("cpu", 0);
  spec.mutable_resources()->set_cpu_threads(2);
  std::vector<std::string> ids;
  for (int i = 0; i < 8; ++i) ids.push_back(Submit(spec));
  Register("w", 0, {}, 16);
  ASSERT_EQ(c_->RunSchedulingPass(), 8);
  for (const std::string& id : ids)
    ASSERT_TRUE(Update("w", id, 1, mesa::v1::ATTEMPT_PHASE_RUNNING).ok());
  // The agent restarted; only half of its trainers survived.
  Register("w", 0, {{ids[0], 1}, {ids[1], 1}, {ids[2], 1}, {ids[3], 1}}, 16);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(State(ids[i]), i < 4 ? JobState::JOB_STATE_RUNNING : JobState::JOB_STATE_FAILED) << i;
  }
  mesa::v1::ExplainJobRequest x;
  x.set_id(ids[0]);
  EXPECT_EQ(c_->ExplainJob(x)->free_cpu_slots(), 8);
}

// A worker that finished its share of a multi-worker attempt and then re-registers: the share is
// released when the attempt ends, so it must be held until then, or its GPU is freed while
// another job runs on it (two jobs on one GPU).
TEST_F(CoordinatorTest, ReregistrationAfterFinishedShareDoesNotDoubleBookGpu) {
  const std::string gang = Submit(ValidTrainSpec("gang", 2));
  Register("a", 1);
  Register("b", 1);
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  ASSERT_TRUE(Update("a", gang, 1, mesa::v1::ATTEMPT_PHASE_RUNNING).ok());
  ASSERT_TRUE(Update("b", gang, 1, mesa::v1::ATTEMPT_PHASE_RUNNING).ok());
  ASSERT_TRUE(Update("a", gang, 1, mesa::v1::ATTEMPT_PHASE_SUCCEEDED).ok());
  Register("a", 1);  // agent restart: nothing runs there any more
  const std::string small = Submit(ValidTrainSpec("small", 1));
  c_->RunSchedulingPass();
  ASSERT_TRUE(Update("b", gang, 1, mesa::v1::ATTEMPT_PHASE_SUCCEEDED).ok());
  EXPECT_EQ(State(gang), JobState::JOB_STATE_SUCCEEDED);
  mesa::v1::ExplainJobRequest x;
  x.set_id(small);
  auto ex = c_->ExplainJob(x);
  ASSERT_TRUE(ex.ok());
  const int held =
      State(small) == JobState::JOB_STATE_SCHEDULED || State(small) == JobState::JOB_STATE_RUNNING;
  EXPECT_EQ(ex->free_gpus() + held, 2) << "free GPUs plus GPUs in use must equal the cluster's 2";
}

}  // namespace
}  // namespace mesa::coordinator
