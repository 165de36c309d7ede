// Coordinator benchmarks (not a test; figures go to docs/journal.md ("Coordinator performance")):
//   1. durable submissions/s: concurrent gRPC clients over loopback against a real server with a
//      real SQLite store in a temporary directory (synchronous=FULL and NORMAL);
//   2. scheduling pass p50/p99 with 10,000 queued jobs and 1,000 workers;
//   3. restart (store reload + index rebuild) with 100,000 jobs.
// Usage: bazel run -c opt //bench:coordinator_bench -- [--clients=64] [--seconds=5]
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <random>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/cli_flags.h"
#include "coordinator/clock.h"
#include "coordinator/coordinator.h"
#include "coordinator/service.h"
#include "coordinator/store.h"
#include "coordinator/test_util.h"

ABSL_FLAG(int, clients, 64, "concurrent submitting client threads");
ABSL_FLAG(int, channels, 4, "gRPC channels the clients share");
ABSL_FLAG(double, seconds, 5, "duration of the submission run");
ABSL_FLAG(int, queued, 10000, "queued jobs for the scheduling benchmark");
ABSL_FLAG(int, workers, 1000, "workers for the scheduling benchmark");
ABSL_FLAG(int, passes, 2000, "scheduling passes measured");
ABSL_FLAG(int, restart_jobs, 100000, "jobs in the store for the restart benchmark");

namespace mesa::coordinator {
namespace {

std::string TempDir() {
  std::string dir =
      absl::StrCat(std::filesystem::temp_directory_path().string(), "/mesa-bench-", getpid());
  std::filesystem::create_directories(dir);
  return dir;
}

std::unique_ptr<Store> OpenStore(const std::string& path, bool full) {
  Store::Options o;
  o.path = path;
  o.synchronous_full = full;
  auto s = Store::Open(o);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(*s);
}

void BenchSubmissions(const std::string& dir, bool full) {
  const std::string path = absl::StrCat(dir, "/submit-", full ? "full" : "normal", ".db");
  auto store = OpenStore(path, full);
  CoordinatorOptions o;
  auto c = Coordinator::Create(store.get(), RealClock::Get(), nullptr, o);
  Metrics metrics;
  auto server = Server::Start("127.0.0.1:0", c->get(), &metrics);
  const std::string target = absl::StrCat("127.0.0.1:", (*server)->port());
  std::vector<std::unique_ptr<mesa::v1::JobService::Stub>> stubs;
  for (int i = 0; i < absl::GetFlag(FLAGS_channels); ++i) {
    grpc::ChannelArguments args;
    args.SetInt("grpc.channel_id", i);  // distinct channels, not one shared subchannel
    stubs.push_back(mesa::v1::JobService::NewStub(
        grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args)));
  }
  const mesa::v1::JobSpec spec = ValidTrainSpec("bench", 1);
  std::atomic<int64_t> ok{0}, failed{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  const int clients = absl::GetFlag(FLAGS_clients);
  for (int t = 0; t < clients; ++t) {
    threads.emplace_back([&, t] {
      auto* stub = stubs[t % stubs.size()].get();
      for (int i = 0; !stop.load(std::memory_order_relaxed); ++i) {
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
        mesa::v1::SubmitJobRequest r;
        *r.mutable_spec() = spec;
        r.set_client_job_id(absl::StrCat("c", t, "-", i));
        mesa::v1::Job job;
        (stub->SubmitJob(&ctx, r, &job).ok() ? ok : failed).fetch_add(1);
      }
    });
  }
  // Warm up for a moment, then measure a steady window.
  absl::SleepFor(absl::Milliseconds(500));
  const int64_t start_ok = ok.load();
  const int64_t start_tx = store->transactions();
  const absl::Time start = absl::Now();
  absl::SleepFor(absl::Seconds(absl::GetFlag(FLAGS_seconds)));
  const double secs = absl::ToDoubleSeconds(absl::Now() - start);
  const int64_t n = ok.load() - start_ok;
  const int64_t tx = store->transactions() - start_tx;
  stop = true;
  for (auto& t : threads) t.join();
  std::printf(
      "submissions synchronous=%s clients=%d: %.0f acknowledged/s (%lld in %.1f s, %lld "
      "transactions, "
      "%.1f jobs/commit, %lld failed)\n",
      full ? "FULL" : "NORMAL", clients, n / secs, static_cast<long long>(n), secs,
      static_cast<long long>(tx), tx > 0 ? static_cast<double>(n) / tx : 0.0,
      static_cast<long long>(failed.load()));
  std::fflush(stdout);
  (*c)->Shutdown();
  (*server)->Shutdown();
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

void BenchScheduling(const std::string& dir) {
  auto store = OpenStore(absl::StrCat(dir, "/sched.db"), false);
  CoordinatorOptions o;
  o.background_threads = false;
  o.lease_ttl = absl::Hours(1);
  auto c = std::move(*Coordinator::Create(store.get(), RealClock::Get(), nullptr, o));
  const int workers = absl::GetFlag(FLAGS_workers);
  for (int w = 0; w < workers; ++w) {
    mesa::v1::RegisterWorkerRequest r;
    r.set_worker_id(absl::StrCat("w", w));
    for (int g = 0; g < 8; ++g) r.mutable_resources()->add_gpus()->set_index(g);
    r.mutable_resources()->set_cpu_slots(32);
    (void)c->RegisterWorker(r);
  }
  // Mixed sizes and priorities; enough to fill the cluster and leave `queued` waiting.
  std::mt19937 rng(42);
  const int sizes[] = {1, 1, 2, 4, 8, 8, 16, 32};
  const int total = absl::GetFlag(FLAGS_queued) + workers * 8 / 2;
  for (int i = 0; i < total; ++i) {
    mesa::v1::SubmitJobRequest r;
    *r.mutable_spec() = ValidTrainSpec("sched", sizes[rng() % 8]);
    r.mutable_spec()->set_priority(static_cast<int>(rng() % 5));
    if (rng() % 10 == 0) {
      r.mutable_spec()->mutable_resources()->set_gpus(0);
      r.mutable_spec()->mutable_resources()->set_cpu_threads(4);
      r.mutable_spec()->mutable_resources()->set_cpu_ranks(1 + rng() % 4);
    }
    (void)c->SubmitJob(r);
  }
  absl::Time t0 = absl::Now();
  int started = c->RunSchedulingPass();
  const double fill_ms = absl::ToDoubleMilliseconds(absl::Now() - t0);
  std::vector<std::string> running;
  mesa::v1::ListJobsRequest lr;
  lr.add_states(mesa::v1::JOB_STATE_SCHEDULED);
  lr.set_page_size(1000);
  while (true) {
    auto page = c->ListJobs(lr);
    for (const auto& j : page->jobs()) running.push_back(j.id());
    if (page->next_page_token().empty()) break;
    lr.set_page_token(page->next_page_token());
  }
  mesa::v1::ListJobsRequest qr;
  qr.add_states(mesa::v1::JOB_STATE_QUEUED);
  qr.set_page_size(1);
  // Steady state: one job finishes, a pass runs. Time the pass (Scheduler::Pass) and the whole
  // coordinator step (pass + events + assignments).
  std::vector<double> pass_ms, step_ms;
  auto refill = [&] {
    mesa::v1::ListJobsRequest r;
    r.add_states(mesa::v1::JOB_STATE_SCHEDULED);
    r.set_page_size(1000);
    while (true) {
      auto page = c->ListJobs(r);
      for (const auto& j : page->jobs()) running.push_back(j.id());
      if (page->next_page_token().empty()) break;
      r.set_page_token(page->next_page_token());
    }
  };
  for (int i = 0; i < absl::GetFlag(FLAGS_passes); ++i) {
    if (running.empty()) refill();
    if (running.empty()) break;
    size_t k = rng() % running.size();
    std::string id = running[k];
    running[k] = running.back();
    running.pop_back();
    auto job = c->GetJob(id);
    for (const std::string& w : job->workers()) {
      mesa::v1::UpdateAttemptRequest u;
      u.set_worker_id(w);
      u.set_job_id(id);
      u.set_attempt(job->attempts());
      u.set_phase(mesa::v1::ATTEMPT_PHASE_SUCCEEDED);
      (void)c->UpdateAttempt(u);
    }
    absl::Time s = absl::Now();
    c->RunSchedulingPass();
    step_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - s));
    pass_ms.push_back(absl::ToDoubleMilliseconds(c->last_pass_duration()));
  }
  auto queued_now = c->ExplainJob([&] {
    mesa::v1::ExplainJobRequest e;
    e.set_id(running.empty() ? "job-1" : running[0]);
    return e;
  }());
  std::printf(
      "scheduling: %d workers x 8 GPUs, %d jobs submitted, first pass started %d jobs in %.1f ms; "
      "%zu passes after a job ends with %d queued: Scheduler::Pass p50 %.3f ms p99 %.3f ms max "
      "%.3f ms; "
      "whole pass incl. events+assignments p50 %.3f ms p99 %.3f ms\n",
      workers, total, started, fill_ms, pass_ms.size(),
      queued_now.ok() ? queued_now->pending_jobs() : -1, Percentile(pass_ms, 0.5),
      Percentile(pass_ms, 0.99), Percentile(pass_ms, 1.0), Percentile(step_ms, 0.5),
      Percentile(step_ms, 0.99));
  std::fflush(stdout);
}

void BenchRestart(const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/restart.db");
  const int n = absl::GetFlag(FLAGS_restart_jobs);
  {
    auto store = OpenStore(path, false);
    std::vector<std::pair<JobRow, mesa::v1::Job>> rows;
    for (int i = 1; i <= n; ++i) {
      JobRow r;
      r.num = i;
      r.id = absl::StrCat("job-", i);
      r.client_job_id = absl::StrCat("client-", i);
      r.queue = "default";
      // 90% finished, the rest queued or running: a long-lived cluster.
      r.state = i % 10 == 0
                    ? mesa::v1::JOB_STATE_QUEUED
                    : (i % 3 == 0 ? mesa::v1::JOB_STATE_FAILED : mesa::v1::JOB_STATE_SUCCEEDED);
      mesa::v1::Job j;
      j.set_id(r.id);
      *j.mutable_spec() = ValidTrainSpec("restart", 1);
      (*j.mutable_spec()->mutable_labels())["team"] = "lm";
      j.set_state(r.state);
      j.set_client_job_id(r.client_job_id);
      rows.push_back({std::move(r), std::move(j)});
    }
    if (absl::Status s = store->BulkInsertForTest(rows); !s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return;
    }
  }
  std::vector<double> ms;
  for (int rep = 0; rep < 3; ++rep) {
    absl::Time t0 = absl::Now();
    auto store = OpenStore(path, true);
    CoordinatorOptions o;
    o.background_threads = false;
    auto c = Coordinator::Create(store.get(), RealClock::Get(), nullptr, o);
    ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
    if (!c.ok()) std::fprintf(stderr, "%s\n", c.status().ToString().c_str());
  }
  std::printf(
      "restart with %d jobs (%d not finished): open + reload + index rebuild %.0f ms / %.0f ms / "
      "%.0f ms "
      "(3 runs, %.1f MB database)\n",
      n, n / 10, ms[0], ms[1], ms[2], std::filesystem::file_size(path) / 1e6);
  std::fflush(stdout);
}

}  // namespace
}  // namespace mesa::coordinator

int main(int argc, char** argv) {
  mesa::base::ParseFlagsOrExit(argc, argv,
                               "coordinator_bench [--clients=64] [--seconds=5]\n"
                               "  Coordinator submissions/s, scheduling pass, restart.");
  const std::string dir = mesa::coordinator::TempDir();
  mesa::coordinator::BenchSubmissions(dir, true);
  mesa::coordinator::BenchSubmissions(dir, false);
  mesa::coordinator::BenchScheduling(dir);
  mesa::coordinator::BenchRestart(dir);
  std::filesystem::remove_all(dir);
  return 0;
}
