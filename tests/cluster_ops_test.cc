// Cluster operations end to end: the real mesa-coordinator, the real mesactl, fake and real
// worker agents. `mesactl workers / drain / uncordon / forget / version`, the audit records of
// the mutating calls, the per-worker series, and a real agent's clean deregistration on SIGTERM
// (no lease expiry counted, so MesaWorkersLost stays quiet).
#include <algorithm>
#include <csignal>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/coordinator_harness.h"

namespace mesa::testing {
namespace {

using nlohmann::json;

class ClusterOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = NewTempDir("cluster_ops_test");
    Start({});
  }
  void Start(const std::vector<std::string>& args) {
    coordinator_.reset();
    auto c = CoordinatorProcess::Start(dir_ + "/mesa.db", args);
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = std::move(*c);
    auto metrics = coordinator_->process().WaitForLinePrefix("metrics on ", absl::Seconds(10));
    ASSERT_TRUE(metrics.ok()) << metrics.status();
    metrics_address_ = metrics->substr(std::string("metrics on ").size());
  }

  RunResult Mesactl(std::vector<std::string> args) {
    args.insert(args.begin(), "--server=" + coordinator_->address());
    absl::StatusOr<RunResult> r = RunProcess(RunfilePath("cli/mesactl"), args, absl::Seconds(20));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : RunResult{-1, "", r.status().ToString()};
  }
  json Json(const RunResult& r) {
    json j = json::parse(r.out, nullptr, /*allow_exceptions=*/false);
    EXPECT_FALSE(j.is_discarded()) << "not JSON:\n" << r.out << "\nstderr:\n" << r.err;
    return j;
  }
  json Workers() {
    RunResult r = Mesactl({"workers", "--json"});
    EXPECT_EQ(r.exit_status, 0) << r.err;
    json j = Json(r);
    return j.contains("workers") ? j["workers"] : json::array();
  }
  // The coordinator's /metrics.
  std::string Scrape() {
    absl::StatusOr<std::string> text = ScrapeMetrics(metrics_address_);
    EXPECT_TRUE(text.ok()) << text.status();
    return text.ok() ? *text : "";
  }
  std::string Submit() {
    RunResult r = Mesactl({"submit", RunfilePath("examples/train_tiny_cpu.yaml"), "--json"});
    EXPECT_EQ(r.exit_status, 0) << r.err;
    return Json(r)["id"];
  }
  std::string State(const std::string& id) {
    RunResult r = Mesactl({"get", id, "--json"});
    return Json(r)["state"];
  }

  std::string dir_;
  std::string metrics_address_;
  std::unique_ptr<CoordinatorProcess> coordinator_;
};

TEST_F(ClusterOpsTest, WorkersDrainUncordonAndAudit) {
  FakeWorker worker(coordinator_->channel(), "node-1", /*cpu_slots=*/4);
  ASSERT_TRUE(worker.Register().ok());
  json workers = Workers();
  ASSERT_EQ(workers.size(), 1u) << workers;
  EXPECT_EQ(workers[0]["id"], "node-1");
  EXPECT_EQ(workers[0]["state"], "WORKER_STATE_LIVE");
  EXPECT_EQ(workers[0]["cpu_slots"], 4);
  EXPECT_EQ(workers[0]["free_cpu_slots"], 4);

  RunResult drain = Mesactl({"drain", "node-1"});
  ASSERT_EQ(drain.exit_status, 0) << drain.err;
  EXPECT_TRUE(absl::StrContains(drain.out, "cordoned")) << drain.out;
  RunResult table = Mesactl({"workers"});
  ASSERT_EQ(table.exit_status, 0) << table.err;
  EXPECT_TRUE(absl::StrContains(table.out, "LEASE AGE")) << table.out;
  EXPECT_TRUE(absl::StrContains(table.out, "live,draining (operator)")) << table.out;

  // A drained worker takes no new job.
  const std::string id = Submit();
  absl::StatusOr<v1::Assignment> none = worker.WaitForAssignment(absl::Seconds(2));
  EXPECT_FALSE(none.ok());
  EXPECT_EQ(State(id), "JOB_STATE_QUEUED");

  RunResult uncordon = Mesactl({"uncordon", "node-1"});
  ASSERT_EQ(uncordon.exit_status, 0) << uncordon.err;
  absl::StatusOr<v1::Assignment> a = worker.WaitForAssignment(absl::Seconds(10));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->job_id(), id);
  workers = Workers();
  ASSERT_EQ(workers.size(), 1u);
  ASSERT_EQ(workers[0]["running_jobs"].size(), 1u) << workers;
  EXPECT_EQ(workers[0]["running_jobs"][0], id);

  // Draining while the job runs: it continues (not stopped, still this attempt).
  ASSERT_EQ(Mesactl({"drain", "node-1"}).exit_status, 0);
  v1::Progress progress;
  progress.set_step(5);
  ASSERT_TRUE(worker.Running(*a, progress).ok());
  EXPECT_EQ(State(id), "JOB_STATE_RUNNING");
  ASSERT_TRUE(worker.Succeed(*a, v1::JobResult()).ok());
  EXPECT_EQ(State(id), "JOB_STATE_SUCCEEDED");

  // Usage and lookup errors; a live worker cannot be forgotten.
  EXPECT_EQ(Mesactl({"drain"}).exit_status, 2);
  EXPECT_EQ(Mesactl({"workers", "extra"}).exit_status, 2);
  RunResult unknown = Mesactl({"drain", "no-such-node"});
  EXPECT_EQ(unknown.exit_status, 1);
  EXPECT_TRUE(absl::StrContains(unknown.err, "NOT_FOUND")) << unknown.err;
  RunResult live = Mesactl({"forget", "node-1"});
  EXPECT_EQ(live.exit_status, 1);
  EXPECT_TRUE(absl::StrContains(live.err, "FAILED_PRECONDITION")) << live.err;

  // The mutating calls are audited like submit and cancel.
  RunResult audit = Mesactl({"audit", "--target=node-1", "--json"});
  ASSERT_EQ(audit.exit_status, 0) << audit.err;
  const json records = Json(audit)["records"];
  std::vector<std::string> methods;
  for (const auto& r : records) methods.push_back(r["method"].get<std::string>());
  EXPECT_EQ(std::count(methods.begin(), methods.end(), "DrainWorker"), 2) << audit.out;
  EXPECT_EQ(std::count(methods.begin(), methods.end(), "UncordonWorker"), 1) << audit.out;
  EXPECT_EQ(std::count(methods.begin(), methods.end(), "ForgetWorker"), 1) << audit.out;

  const std::string metrics = Scrape();
  EXPECT_TRUE(
      absl::StrContains(metrics, "mesa_coordinator_worker_draining{worker_id=\"node-1\"} 1"))
      << metrics;
  EXPECT_TRUE(
      absl::StrContains(metrics, "mesa_coordinator_worker_cpu_slots{worker_id=\"node-1\"} 4"))
      << metrics;
}

TEST_F(ClusterOpsTest, ForgetALostWorkerRemovesItsSeries) {
  Start({"--lease_ttl=1s"});
  FakeWorker worker(coordinator_->channel(), "old-node", /*cpu_slots=*/2);
  ASSERT_TRUE(worker.Register().ok());
  // No heartbeats: the lease runs out.
  const absl::Time deadline = absl::Now() + absl::Seconds(15);
  json workers;
  while (absl::Now() < deadline) {
    workers = Workers();
    if (workers.size() == 1 && workers[0]["state"] == "WORKER_STATE_LOST") break;
    absl::SleepFor(absl::Milliseconds(200));
  }
  ASSERT_EQ(workers[0]["state"], "WORKER_STATE_LOST") << workers;
  std::string metrics = Scrape();
  EXPECT_TRUE(absl::StrContains(metrics, "mesa_coordinator_worker_lease_expiries_total 1"))
      << metrics;
  EXPECT_TRUE(absl::StrContains(metrics, "worker_id=\"old-node\"")) << metrics;

  RunResult forget = Mesactl({"forget", "old-node"});
  ASSERT_EQ(forget.exit_status, 0) << forget.err;
  EXPECT_TRUE(Workers().empty());
  metrics = Scrape();
  EXPECT_FALSE(absl::StrContains(metrics, "old-node")) << metrics;
  EXPECT_TRUE(absl::StrContains(metrics, "mesa_coordinator_workers{state=\"lost\"} 0")) << metrics;
  EXPECT_EQ(Mesactl({"forget", "old-node"}).exit_status, 1);
}

TEST_F(ClusterOpsTest, RealAgentDeregistersOnSigterm) {
  absl::StatusOr<std::unique_ptr<Process>> agent =
      Process::Start(RunfilePath("worker/mesa-worker"),
                     {"--coordinator=" + coordinator_->address(), "--worker_id=agent-1",
                      "--gpus=none", "--cpu_slots=2", "--workdir=" + dir_ + "/agent",
                      "--trainer=/bin/true", "--metrics_listen=127.0.0.1:0"});
  ASSERT_TRUE(agent.ok()) << agent.status();
  const absl::Time deadline = absl::Now() + absl::Seconds(15);
  json workers;
  while (absl::Now() < deadline) {
    workers = Workers();
    if (workers.size() == 1) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_EQ(workers.size(), 1u);
  EXPECT_EQ(workers[0]["id"], "agent-1");
  absl::StatusOr<Process::ExitStatus> exit = (*agent)->Terminate(absl::Seconds(20));
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_EQ(*exit, 0) << (*agent)->Stderr();
  // Gone at once, not lost when the lease (15 s) runs out.
  EXPECT_TRUE(Workers().empty()) << Workers();
  const std::string metrics = Scrape();
  EXPECT_TRUE(absl::StrContains(metrics, "mesa_coordinator_worker_lease_expiries_total 0"))
      << metrics;
  EXPECT_FALSE(absl::StrContains(metrics, "agent-1")) << metrics;
  RunResult audit = Mesactl({"audit", "--target=agent-1", "--json"});
  EXPECT_TRUE(absl::StrContains(audit.out, "DeregisterWorker")) << audit.out;
}

TEST_F(ClusterOpsTest, VersionOfClientAndServer) {
  RunResult version = Mesactl({"version"});
  ASSERT_EQ(version.exit_status, 0) << version.err;
  EXPECT_TRUE(absl::StrContains(version.out, "mesactl 0.")) << version.out;
  EXPECT_TRUE(absl::StrContains(version.out, "coordinator 0.")) << version.out;
  json j = Json(Mesactl({"version", "--json"}));
  EXPECT_EQ(j["client"]["version"], j["server"]["version"]) << j;
  EXPECT_TRUE(absl::StrContains(Scrape(), "mesa_build_info{component=\"coordinator\",version=\""));
  // The server gone: the client's version still prints, and the call's error exits 1.
  coordinator_->process().Kill().IgnoreError();
  RunResult offline = Mesactl({"version", "--timeout=2s"});
  EXPECT_EQ(offline.exit_status, 1);
  EXPECT_TRUE(absl::StrContains(offline.out, "mesactl 0.")) << offline.out;
}

}  // namespace
}  // namespace mesa::testing
