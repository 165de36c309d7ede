// Cluster operations on the coordinator core with an injected clock: how workers leave (a lease
// that runs out, a clean deregistration), listing, draining and forgetting them, and the metric
// series that follow.
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

class ClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = TempPath("cluster.db");
    Open();
  }
  void Restart() {
    c_.reset();
    store_.reset();
    Open();
  }
  void Open() {
    CoordinatorOptions o;
    o.lease_ttl = absl::Seconds(10);
    OpenTestCoordinator(path_, &clock_, &metrics_, o, &store_, &c_);
  }
  std::string Register(const std::string& id, int gpus) {
    mesa::v1::RegisterWorkerRequest r;
    r.set_worker_id(id);
    for (int i = 0; i < gpus; ++i) r.mutable_resources()->add_gpus()->set_index(i);
    auto out = c_->RegisterWorker(r);
    EXPECT_TRUE(out.ok()) << out.status();
    if (out.ok()) leases_[id] = out->lease_id();
    return out.ok() ? out->lease_id() : "";
  }
  std::string Submit(int gpus) {
    mesa::v1::SubmitJobRequest r;
    *r.mutable_spec() = ValidTrainSpec(absl::StrCat("job", ++jobs_), gpus);
    r.mutable_spec()->set_max_retries(3);
    auto j = c_->SubmitJob(r);
    EXPECT_TRUE(j.ok()) << j.status();
    return j.ok() ? j->id() : "";
  }
  bool Exported(const std::string& line) {
    return absl::StrContains(metrics_.Serialize(), line + "\n");
  }

  std::string path_;
  FakeClock clock_;
  Metrics metrics_;
  std::map<std::string, std::string> leases_;
  int jobs_ = 0;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Coordinator> c_;
};

TEST_F(ClusterTest, LeaseExpiryCountsAsLost) {
  Register("a", 1);
  Register("b", 1);
  EXPECT_TRUE(Exported("mesa_coordinator_worker_lease_expiries_total 0"));
  clock_.Advance(absl::Seconds(5));
  mesa::v1::HeartbeatRequest hb;
  hb.set_worker_id("b");
  hb.set_lease_id(leases_["b"]);
  ASSERT_TRUE(c_->Heartbeat(hb, nullptr).ok());
  clock_.Advance(absl::Seconds(6));
  c_->CheckLeases();  // a's lease ran out, b's was renewed
  EXPECT_TRUE(Exported("mesa_coordinator_worker_lease_expiries_total 1"));
  EXPECT_TRUE(Exported("mesa_coordinator_workers{state=\"lost\"} 1"));
  c_->CheckLeases();  // counted once
  EXPECT_TRUE(Exported("mesa_coordinator_worker_lease_expiries_total 1"));
}

TEST_F(ClusterTest, DeregistrationIsNotALoss) {
  const std::string lease = Register("a", 2);
  const std::string job = Submit(1);
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  EXPECT_TRUE(Exported("mesa_coordinator_worker_gpus{worker_id=\"a\"} 2"));
  EXPECT_TRUE(Exported("mesa_coordinator_worker_gpus_allocated{worker_id=\"a\"} 1"));
  mesa::v1::DeregisterWorkerRequest stale;
  stale.set_worker_id("a");
  stale.set_lease_id("not-the-lease");
  EXPECT_EQ(c_->DeregisterWorker(stale).code(), absl::StatusCode::kAborted);
  mesa::v1::DeregisterWorkerRequest bye;
  bye.set_worker_id("a");
  bye.set_lease_id(lease);
  ASSERT_TRUE(c_->DeregisterWorker(bye).ok());
  // Gone: no lost worker, no expiry counted, no series left; its attempt is retried elsewhere.
  EXPECT_EQ(c_->ListWorkers()->workers_size(), 0);
  EXPECT_TRUE(Exported("mesa_coordinator_worker_lease_expiries_total 0"));
  EXPECT_TRUE(Exported("mesa_coordinator_workers{state=\"lost\"} 0"));
  EXPECT_FALSE(absl::StrContains(metrics_.Serialize(), "worker_id=\"a\""));
  EXPECT_EQ(c_->GetJob(job)->state(), mesa::v1::JOB_STATE_RETRYING);
  clock_.Advance(absl::Seconds(60));
  c_->CheckLeases();
  EXPECT_TRUE(Exported("mesa_coordinator_worker_lease_expiries_total 0"));
  // The agent may come back under the same id.
  Register("a", 2);
  EXPECT_EQ(c_->RunSchedulingPass(), 1);
}

TEST_F(ClusterTest, ListShowsResourcesJobsAndLeaseAge) {
  Register("b", 1);
  Register("a", 4);
  const std::string job = Submit(2);
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  clock_.Advance(absl::Seconds(4));
  auto list = c_->ListWorkers();
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->workers_size(), 2);
  const mesa::v1::WorkerInfo& a = list->workers(0);  // sorted by id
  EXPECT_EQ(a.id(), "a");
  EXPECT_EQ(a.state(), mesa::v1::WORKER_STATE_LIVE);
  EXPECT_EQ(a.gpus(), 4);
  EXPECT_EQ(a.free_gpus(), 2);
  ASSERT_EQ(a.running_jobs_size(), 1);
  EXPECT_EQ(a.running_jobs(0), job);
  EXPECT_EQ(absl::FromUnixSeconds(a.last_renewed().seconds()), clock_.Now() - absl::Seconds(4));
  EXPECT_EQ(list->workers(1).free_gpus(), 1);
  EXPECT_FALSE(a.draining());
}

TEST_F(ClusterTest, DrainedWorkerTakesNoNewJobsAndRunningOnesContinue) {
  const std::string lease = Register("a", 2);
  const std::string first = Submit(1);
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  auto drained = c_->SetWorkerDraining("a", true);
  ASSERT_TRUE(drained.ok()) << drained.status();
  EXPECT_TRUE(drained->draining());
  EXPECT_TRUE(Exported("mesa_coordinator_worker_draining{worker_id=\"a\"} 1"));
  EXPECT_EQ(c_->SetWorkerDraining("nope", true).status().code(), absl::StatusCode::kNotFound);
  const std::string second = Submit(1);
  EXPECT_EQ(c_->RunSchedulingPass(), 0);  // a GPU is free, but the worker is cordoned
  EXPECT_EQ(c_->GetJob(second)->state(), mesa::v1::JOB_STATE_QUEUED);
  EXPECT_EQ(c_->GetJob(first)->state(), mesa::v1::JOB_STATE_SCHEDULED);  // not stopped
  // The cordon holds across a re-registration (an agent restart).
  mesa::v1::RegisterWorkerRequest again;
  again.set_worker_id("a");
  again.set_lease_id(lease);
  for (int i = 0; i < 2; ++i) again.mutable_resources()->add_gpus()->set_index(i);
  ASSERT_TRUE(c_->RegisterWorker(again).ok());
  EXPECT_EQ(c_->RunSchedulingPass(), 0);
  // Uncordoned: the free GPU takes the queued job; the one held by `first` stays held.
  ASSERT_FALSE(c_->SetWorkerDraining("a", false)->draining());
  EXPECT_EQ(c_->RunSchedulingPass(), 1);
  const std::string third = Submit(1);
  EXPECT_EQ(c_->RunSchedulingPass(), 0);
  EXPECT_EQ(c_->GetJob(third)->state(), mesa::v1::JOB_STATE_QUEUED);
}

TEST_F(ClusterTest, EvictionStopsRunningAttemptsAndUsesNoRetry) {
  const std::string lease = Register("a", 1);
  mesa::v1::SubmitJobRequest r;
  *r.mutable_spec() = ValidTrainSpec("evicted", 1);
  r.mutable_spec()->set_max_retries(0);  // an eviction must not fail it
  const std::string job = c_->SubmitJob(r)->id();
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  mesa::v1::HeartbeatRequest hb;
  hb.set_worker_id("a");
  hb.set_lease_id(lease);
  auto delivered = c_->Heartbeat(hb, nullptr);
  ASSERT_TRUE(delivered.ok());
  ASSERT_EQ(delivered->assignments_size(), 1);
  mesa::v1::UpdateAttemptRequest running;
  running.set_worker_id("a");
  running.set_lease_id(lease);
  running.set_job_id(job);
  running.set_attempt(1);
  running.set_phase(mesa::v1::ATTEMPT_PHASE_RUNNING);
  ASSERT_TRUE(c_->UpdateAttempt(running).ok());

  EXPECT_EQ(c_->SetWorkerDraining("a", false, true).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto drained = c_->SetWorkerDraining("a", true, /*evict=*/true);
  ASSERT_TRUE(drained.ok()) << drained.status();
  // The worker is told to stop the attempt (its trainer checkpoints), then reports it stopped.
  hb.set_acked_delivery(delivered->delivery_seq());
  auto* listed = hb.add_running();
  listed->set_job_id(job);
  listed->set_attempt(1);
  auto told = c_->Heartbeat(hb, nullptr);
  ASSERT_TRUE(told.ok());
  ASSERT_EQ(told->cancellations_size(), 1);
  EXPECT_TRUE(absl::StrContains(told->cancellations(0).reason(), "evicted")) << told->DebugString();
  mesa::v1::UpdateAttemptRequest stopped = running;
  stopped.set_phase(mesa::v1::ATTEMPT_PHASE_STOPPED);
  ASSERT_TRUE(c_->UpdateAttempt(stopped).ok());
  auto after = c_->GetJob(job);
  EXPECT_EQ(after->state(), mesa::v1::JOB_STATE_RETRYING) << after->failure_reason();
  EXPECT_EQ(after->evictions(), 1);
  // It runs elsewhere, not on the drained worker.
  EXPECT_EQ(c_->RunSchedulingPass(), 0);
  Register("b", 1);
  EXPECT_EQ(c_->RunSchedulingPass(), 1);
  EXPECT_EQ(c_->GetJob(job)->workers(0), "b");
  // A plain stop (agent shutdown) on b still uses a retry: with max_retries 0 the job fails.
  mesa::v1::UpdateAttemptRequest plain = stopped;
  plain.set_worker_id("b");
  plain.set_lease_id(leases_["b"]);
  plain.set_attempt(2);
  ASSERT_TRUE(c_->UpdateAttempt(plain).ok());
  EXPECT_EQ(c_->GetJob(job)->state(), mesa::v1::JOB_STATE_FAILED);
}

TEST_F(ClusterTest, ACordonOutlivesACoordinatorRestart) {
  Register("a", 1);
  Register("b", 1);
  ASSERT_TRUE(c_->SetWorkerDraining("a", true).ok());
  Restart();
  leases_.clear();  // leases are not persisted
  Register("a", 1);
  Register("b", 1);
  auto list = c_->ListWorkers();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->workers_size(), 2);
  EXPECT_TRUE(list->workers(0).draining());  // a
  EXPECT_FALSE(list->workers(1).draining());
  Submit(1);
  Submit(1);
  EXPECT_EQ(c_->RunSchedulingPass(), 1);  // only b takes a job
  ASSERT_TRUE(c_->SetWorkerDraining("a", false).ok());
  Restart();
  leases_.clear();
  Register("a", 1);
  EXPECT_FALSE(c_->ListWorkers()->workers(0).draining());
}

// The agent following its Kubernetes node: the node's cordon drains it without
// stopping anything; the node's uncordon lifts only that cordon, never an operator's.
TEST_F(ClusterTest, NodeCordonIsLiftedByTheNodeButNotAnOperatorsDrain) {
  const std::string lease = Register("a", 2);
  const std::string first = Submit(1);
  ASSERT_EQ(c_->RunSchedulingPass(), 1);
  mesa::v1::DrainSelfRequest cordon;
  cordon.set_worker_id("a");
  cordon.set_lease_id(lease);
  cordon.set_reason(mesa::v1::DRAIN_REASON_NODE_CORDONED);
  auto drained = c_->DrainSelf(cordon);
  ASSERT_TRUE(drained.ok()) << drained.status();
  EXPECT_TRUE(drained->draining());
  EXPECT_EQ(drained->drain_reason(), mesa::v1::DRAIN_REASON_NODE_CORDONED);
  EXPECT_EQ(c_->GetJob(first)->state(), mesa::v1::JOB_STATE_SCHEDULED);  // not evicted
  const std::string second = Submit(1);
  EXPECT_EQ(c_->RunSchedulingPass(), 0);

  // The node's uncordon lifts it: the queued job goes there.
  mesa::v1::UncordonSelfRequest uncordon;
  uncordon.set_worker_id("a");
  uncordon.set_lease_id(lease);
  auto lifted = c_->UncordonSelf(uncordon);
  ASSERT_TRUE(lifted.ok()) << lifted.status();
  EXPECT_FALSE(lifted->draining());
  EXPECT_EQ(lifted->drain_reason(), mesa::v1::DRAIN_REASON_NONE);
  EXPECT_EQ(c_->RunSchedulingPass(), 1);

  // An operator's drain, then the node's cordon and uncordon: the operator's drain stays, and
  // keeps its reason through a restart.
  ASSERT_TRUE(c_->SetWorkerDraining("a", true).ok());
  EXPECT_EQ(c_->DrainSelf(cordon)->drain_reason(), mesa::v1::DRAIN_REASON_OPERATOR);
  EXPECT_EQ(c_->UncordonSelf(uncordon)->drain_reason(), mesa::v1::DRAIN_REASON_OPERATOR);
  Restart();
  leases_.clear();
  Register("a", 2);
  EXPECT_EQ(c_->ListWorkers()->workers(0).drain_reason(), mesa::v1::DRAIN_REASON_OPERATOR);

  // A node cordon first, then an operator's drain: the operator's reason replaces it.
  ASSERT_TRUE(c_->SetWorkerDraining("a", false).ok());
  cordon.set_lease_id(leases_["a"]);
  uncordon.set_lease_id(leases_["a"]);
  ASSERT_TRUE(c_->DrainSelf(cordon).ok());
  EXPECT_EQ(c_->SetWorkerDraining("a", true)->drain_reason(), mesa::v1::DRAIN_REASON_OPERATOR);
  EXPECT_TRUE(c_->UncordonSelf(uncordon)->draining());

  // A stale lease, and a reason an agent may not claim, are refused.
  cordon.set_lease_id("stale");
  EXPECT_EQ(c_->DrainSelf(cordon).status().code(), absl::StatusCode::kAborted);
  uncordon.set_lease_id("stale");
  EXPECT_EQ(c_->UncordonSelf(uncordon).status().code(), absl::StatusCode::kAborted);
  cordon.set_lease_id(leases_["a"]);
  cordon.set_reason(mesa::v1::DRAIN_REASON_OPERATOR);
  EXPECT_EQ(c_->DrainSelf(cordon).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ClusterTest, ForgetOnlyWorkersWithoutALiveLease) {
  Register("a", 1);
  EXPECT_EQ(c_->ForgetWorker("a").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(c_->ForgetWorker("zz").code(), absl::StatusCode::kNotFound);
  clock_.Advance(absl::Seconds(11));
  c_->CheckLeases();
  EXPECT_TRUE(Exported("mesa_coordinator_worker_live{worker_id=\"a\"} 0"));
  ASSERT_TRUE(c_->ForgetWorker("a").ok());
  EXPECT_EQ(c_->ListWorkers()->workers_size(), 0);
  EXPECT_TRUE(Exported("mesa_coordinator_workers{state=\"lost\"} 0"));
  EXPECT_FALSE(absl::StrContains(metrics_.Serialize(), "worker_id=\"a\""));
}

}  // namespace
}  // namespace mesa::coordinator
