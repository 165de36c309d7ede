// The worker follows its Kubernetes node's cordon, end to end: a real coordinator, real
// worker agents (mesa-worker --kubernetes_node), the real trainer and real mesactl.
//
// The Kubernetes API is a STAND-IN: no API server can run here (Debian packages none and nothing
// is downloaded at test time), so tests/e2e/kube_api_standin.py serves GET /api/v1/nodes/NAME the
// way the API server does — HTTPS with a certificate made for the test (scripts/make_dev_ca.sh),
// the bearer token required — from a Node object in a file the test rewrites to cordon
// (spec.unschedulable: true) and uncordon. What it does not show: the real API server's other
// fields, watch semantics or RBAC; deploy/ grants the worker `get` on nodes
// (//deploy:manifests_test).
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/e2e/cluster.h"
#include "tests/process_harness.h"

namespace mesa::e2e {
namespace {

using mesa::v1::Job;

constexpr absl::Duration kJobTimeout = absl::Seconds(60);
constexpr absl::Duration kPoll = absl::Seconds(1);  // --kubernetes_poll_interval
// A cordon takes effect within one poll plus a DrainSelf call: bounded by a few polls.
constexpr absl::Duration kFollowBound = absl::Seconds(5);
constexpr char kToken[] = "node-reader-token-0123456789";

class CordonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ClusterOptions options;
    options.cpu_slots_per_worker = 2;  // a free slot: a job queued on a cordon is the cordon's
    auto cluster = Cluster::Start(0, options);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    api_dir_ = cluster_->dir() + "/kube-api";
    ASSERT_EQ(mkdir(api_dir_.c_str(), 0700), 0);
    std::ofstream(api_dir_ + "/token") << kToken << "\n";
    std::ofstream(api_dir_ + "/wrong-token") << "not-the-token\n";
    SetNode("node-a", false);
    auto api = testing::Process::Start(
        "/usr/bin/python3",
        {testing::RunfilePath("tests/e2e/kube_api_standin.py"),
         "--cert=" + cluster_->pki() + "/server.pem", "--key=" + cluster_->pki() + "/server.key",
         "--token_file=" + api_dir_ + "/token", "--nodes_dir=" + api_dir_});
    ASSERT_TRUE(api.ok()) << api.status();
    api_ = std::move(*api);
    auto address = testing::WaitForListenAddress(*api_, absl::Seconds(20));
    ASSERT_TRUE(address.ok()) << address.status() << api_->Stderr();
    api_url_ = "https://" + *address;
  }

  // Rewrites the Node object the stand-in serves (atomically: a rename).
  void SetNode(const std::string& name, bool unschedulable) {
    const std::string path = api_dir_ + "/" + name + ".json";
    std::ofstream(path + ".tmp")
        << R"({"kind": "Node", "apiVersion": "v1", "metadata": {"name": ")" << name
        << R"(", "labels": {"kubernetes.io/hostname": ")" << name << R"("}}, "spec": {)"
        << (unschedulable ? R"("unschedulable": true, "taints": [{"key": )"
                            R"("node.kubernetes.io/unschedulable", "effect": "NoSchedule"}])"
                          : R"("podCIDR": "10.244.1.0/24")")
        << R"(}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}})";
    ASSERT_EQ(std::rename((path + ".tmp").c_str(), path.c_str()), 0);
  }

  std::vector<std::string> FollowFlags(const std::string& api, const std::string& token_file) {
    return {"--kubernetes_node=node-a", "--kubernetes_api=" + api,
            "--kubernetes_token_file=" + token_file,
            "--kubernetes_ca_file=" + cluster_->pki() + "/ca.pem",
            "--kubernetes_poll_interval=" + absl::FormatDuration(kPoll)};
  }

  absl::StatusOr<mesa::v1::WorkerInfo> Worker(const std::string& id) {
    auto list = cluster_->client().ListWorkers();
    if (!list.ok()) return list.status();
    for (const auto& w : list->workers()) {
      if (w.id() == id) return w;
    }
    return absl::NotFoundError(id);
  }

  // Polls until worker `id` is live and draining == `draining`; how long it took.
  absl::StatusOr<absl::Duration> WaitForDraining(const std::string& id, bool draining,
                                                 absl::Duration timeout) {
    const absl::Time start = absl::Now();
    while (absl::Now() - start < timeout) {
      auto w = Worker(id);
      if (w.ok() && w->state() == mesa::v1::WORKER_STATE_LIVE && w->draining() == draining) {
        return absl::Now() - start;
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
    return absl::DeadlineExceededError(absl::StrCat("worker ", id, " not draining=", draining,
                                                    " within ", absl::FormatDuration(timeout)));
  }

  double ApiErrors(const std::string& id) {
    return Metric(id, "mesa_worker_kubernetes_api_errors_total");
  }

  // The value of metric `name` (one series) of worker `id`, scraped over HTTP.
  double Metric(const std::string& id, const std::string& name) {
    auto line = cluster_->worker(id)->WaitForLinePrefix("metrics on ", absl::Seconds(5));
    EXPECT_TRUE(line.ok()) << line.status();
    if (!line.ok()) return -1;
    auto scraped = testing::ScrapeMetrics(line->substr(11));
    EXPECT_TRUE(scraped.ok()) << scraped.status();
    if (!scraped.ok()) return -1;
    for (absl::string_view l : absl::StrSplit(*scraped, '\n')) {
      if (!absl::StartsWith(l, name + "{")) continue;
      double value = -1;
      if (absl::SimpleAtod(l.substr(l.rfind(' ') + 1), &value)) return value;
    }
    ADD_FAILURE() << "no " << name << " in\n" << *scraped;
    return -1;
  }

  std::unique_ptr<Cluster> cluster_;
  std::string api_dir_;
  std::string api_url_;
  std::unique_ptr<testing::Process> api_;
};

// Cordon: within a bounded time the worker is draining ("cordoned node" in `mesactl workers`),
// the job it runs continues, a new job stays queued although a slot is free. Uncordon: the
// worker takes the queued job.
TEST_F(CordonTest, CordonDrainsTheWorkerAndUncordonLiftsIt) {
  ASSERT_TRUE(cluster_->StartWorker("w1", FollowFlags(api_url_, api_dir_ + "/token")).ok());
  ASSERT_TRUE(WaitForDraining("w1", false, absl::Seconds(20)).ok());
  auto running = cluster_->Submit(TinyTrain("running", 1000000, 0));
  ASSERT_TRUE(running.ok()) << running.status();
  ASSERT_TRUE(
      cluster_
          ->WaitFor(
              running->id(), [](const Job& j) { return j.progress().step() > 0; }, kJobTimeout)
          .ok());

  SetNode("node-a", true);  // kubectl cordon node-a
  auto took = WaitForDraining("w1", true, kFollowBound);
  ASSERT_TRUE(took.ok()) << took.status() << cluster_->worker("w1")->Stderr();
  std::printf("cordon followed in %s (poll interval %s)\n", absl::FormatDuration(*took).c_str(),
              absl::FormatDuration(kPoll).c_str());
  EXPECT_EQ(Worker("w1")->drain_reason(), mesa::v1::DRAIN_REASON_NODE_CORDONED);
  EXPECT_EQ(Metric("w1", "mesa_worker_node_cordoned"), 1);
  auto table = cluster_->Mesactl({"workers"});
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_TRUE(absl::StrContains(table->out, "live,draining (cordoned node)")) << table->out;

  auto queued = cluster_->Submit(TinyTrain("queued", 20, 0));
  ASSERT_TRUE(queued.ok()) << queued.status();
  absl::SleepFor(3 * kPoll);  // several scheduling passes and node polls
  EXPECT_EQ(cluster_->client().Get(queued->id())->state(), mesa::v1::JOB_STATE_QUEUED);
  // The running job was not stopped: same attempt, still making progress.
  const int64_t step = cluster_->client().Get(running->id())->progress().step();
  auto progressing = cluster_->WaitFor(
      running->id(), [step](const Job& j) { return j.progress().step() > step; }, kJobTimeout);
  ASSERT_TRUE(progressing.ok()) << progressing.status();
  EXPECT_EQ(progressing->state(), mesa::v1::JOB_STATE_RUNNING);
  EXPECT_EQ(progressing->attempts(), 1);
  EXPECT_EQ(progressing->evictions(), 0);

  SetNode("node-a", false);  // kubectl uncordon node-a
  ASSERT_TRUE(WaitForDraining("w1", false, kFollowBound).ok());
  EXPECT_EQ(Metric("w1", "mesa_worker_node_cordoned"), 0);
  auto done = cluster_->WaitForEnd(queued->id(), kJobTimeout);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->state(), mesa::v1::JOB_STATE_SUCCEEDED) << done->failure_reason();
  ASSERT_EQ(done->workers_size(), 1);
  EXPECT_EQ(done->workers(0), "w1");

  // An operator's drain outlives the node's cordon and uncordon.
  auto drained = cluster_->Mesactl({"drain", "w1"});
  ASSERT_TRUE(drained.ok() && drained->exit_status == 0) << drained->err;
  SetNode("node-a", true);
  absl::SleepFor(2 * kPoll);
  SetNode("node-a", false);
  absl::SleepFor(3 * kPoll);
  EXPECT_EQ(Worker("w1")->drain_reason(), mesa::v1::DRAIN_REASON_OPERATOR);
  EXPECT_EQ(ApiErrors("w1"), 0);
  ASSERT_TRUE(cluster_->client().Cancel(running->id(), "test over").ok());
}

// A wrong token (401), then an unreachable API server: the worker keeps working (takes and runs a
// job), the node's cordon (set here) is not applied, and the error counter grows. One worker at a
// time, so the job can only run on the worker under test.
TEST_F(CordonTest, ApiErrorsNeverChangeTheDrainState) {
  SetNode("node-a", true);
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"w1", FollowFlags(api_url_, api_dir_ + "/wrong-token")},
      // Port 1 of loopback: nothing listens there.
      {"w2", FollowFlags("https://127.0.0.1:1", api_dir_ + "/token")}};
  for (const auto& [id, flags] : cases) {
    SCOPED_TRACE(id);
    ASSERT_TRUE(cluster_->StartWorker(id, flags).ok());
    ASSERT_TRUE(WaitForDraining(id, false, absl::Seconds(20)).ok());
    absl::SleepFor(2 * kPoll);
    const double errors = ApiErrors(id);
    EXPECT_GE(errors, 1);

    auto job = cluster_->Submit(TinyTrain("job-" + id, 20, 0));
    ASSERT_TRUE(job.ok()) << job.status();
    auto done = cluster_->WaitForEnd(job->id(), kJobTimeout);
    ASSERT_TRUE(done.ok()) << done.status();
    EXPECT_EQ(done->state(), mesa::v1::JOB_STATE_SUCCEEDED) << done->failure_reason();
    ASSERT_EQ(done->workers_size(), 1);
    EXPECT_EQ(done->workers(0), id);
    EXPECT_FALSE(Worker(id)->draining());
    absl::SleepFor(kPoll);
    EXPECT_GT(ApiErrors(id), errors);
    const std::string log = cluster_->worker(id)->Stderr();
    EXPECT_TRUE(absl::StrContains(log, "the drain state stays as it is")) << log;
    if (id == "w1") {
      EXPECT_TRUE(absl::StrContains(log, "HTTP 401")) << log;
    }
    // A clean stop deregisters it: the next case's worker is the only one.
    auto stopped = cluster_->worker(id)->Terminate(absl::Seconds(20));
    ASSERT_TRUE(stopped.ok()) << stopped.status();
  }
}

// Wrong settings are refused at start (exit 2, naming the flag), before the agent registers.
TEST_F(CordonTest, BadSettingsExitTwo) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--kubernetes_node=Node_A", "--kubernetes_api=" + api_url_}, "not a DNS subdomain"},
      {{"--kubernetes_node=node-a"}, "needs --kubernetes_api"},
      {{"--kubernetes_node=node-a", "--kubernetes_api=" + api_url_,
        "--kubernetes_poll_interval=100ms"},
       "at least 1s"}};
  for (const auto& [flags, error] : cases) {
    std::vector<std::string> args = {"--coordinator=" + cluster_->address(), "--gpus=none",
                                     "--workdir=" + cluster_->dir() + "/bad",
                                     "--trainer=" + TrainerBinary(),
                                     "--metrics_listen=127.0.0.1:0"};
    args.insert(args.end(), flags.begin(), flags.end());
    testing::Process::Options options;
    options.env = {"KUBERNETES_SERVICE_HOST=", "KUBERNETES_SERVICE_PORT="};
    auto run = testing::RunProcess(WorkerBinary(), args, absl::Seconds(20), options);
    ASSERT_TRUE(run.ok()) << run.status();
    EXPECT_EQ(run->exit_status, 2) << run->err;
    EXPECT_TRUE(absl::StrContains(run->err, error)) << run->err;
  }
}

}  // namespace
}  // namespace mesa::e2e
