// Helpers shared by the coordinator's tests.
#ifndef MESANET_COORDINATOR_TEST_UTIL_H_
#define MESANET_COORDINATOR_TEST_UTIL_H_

#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/coordinator.h"
#include "gtest/gtest.h"
#include "mesa/v1/job.pb.h"
#include "spec/testing.h"

namespace mesa::coordinator {

using ::mesa::spec::ValidTrainSpec;

// A fresh path under the test's temporary directory.
inline std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  static int counter = 0;
  return absl::StrCat(dir ? dir : "/tmp", "/", name, "-", ++counter, "-", ::getpid());
}

// Opens the store at `path` with no fsync per commit (tests need not survive a power cut).
inline void OpenTestStore(const std::string& path, std::unique_ptr<Store>* store) {
  Store::Options so;
  so.path = path;
  so.synchronous_full = false;
  auto s = Store::Open(so);
  ASSERT_TRUE(s.ok()) << s.status();
  *store = std::move(*s);
}

// Opens the store at `path` (OpenTestStore) and a coordinator on it with `options`, its
// background threads off: the test drives the scheduling passes and lease checks itself.
inline void OpenTestCoordinator(const std::string& path, const Clock* clock, Metrics* metrics,
                                CoordinatorOptions options, std::unique_ptr<Store>* store,
                                std::unique_ptr<Coordinator>* coordinator) {
  ASSERT_NO_FATAL_FAILURE(OpenTestStore(path, store));
  options.background_threads = false;
  auto c = Coordinator::Create(store->get(), clock, metrics, options);
  ASSERT_TRUE(c.ok()) << c.status();
  *coordinator = std::move(*c);
}

// The coordinator core with an injected clock (FakeClock) and a store at a fresh path, background
// threads off, for the coordinator_*_test files. Helpers act as a worker or a client would;
// Restart() reopens store and coordinator on the same file.
class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = TempPath("coord.db");
    Open();
  }
  void Open() {
    CoordinatorOptions o;
    o.lease_ttl = absl::Seconds(10);
    o.max_loaded_finished_jobs = max_loaded_finished_jobs_;
    o.checkpoint_root = checkpoint_root_;
    o.max_log_bytes_per_job = max_log_bytes_per_job_;
    OpenTestCoordinator(path_, &clock_, &metrics_, o, &store_, &c_);
  }
  void Restart() {
    c_.reset();
    store_.reset();
    Open();
  }
  std::string Submit(const mesa::v1::JobSpec& spec) {
    mesa::v1::SubmitJobRequest r;
    *r.mutable_spec() = spec;
    auto j = c_->SubmitJob(r);
    EXPECT_TRUE(j.ok()) << j.status();
    return j.ok() ? j->id() : "";
  }
  std::string Register(const std::string& id, int gpus,
                       std::vector<std::pair<std::string, int>> running = {}, int cpu_slots = 0,
                       mesa::v1::RegisterWorkerResponse* resp = nullptr) {
    mesa::v1::RegisterWorkerRequest r;
    r.set_worker_id(id);
    for (int i = 0; i < gpus; ++i) r.mutable_resources()->add_gpus()->set_index(i);
    r.mutable_resources()->set_cpu_slots(cpu_slots);
    if (auto held = leases_.find(id); held != leases_.end()) r.set_lease_id(held->second);
    for (auto& [job, attempt] : running) {
      auto* ra = r.add_running();
      ra->set_job_id(job);
      ra->set_attempt(attempt);
    }
    auto out = c_->RegisterWorker(r);
    EXPECT_TRUE(out.ok()) << out.status();
    if (resp != nullptr && out.ok()) *resp = *out;
    if (out.ok()) leases_[id] = out->lease_id();
    return out.ok() ? out->lease_id() : "";
  }
  mesa::v1::HeartbeatResponse Beat(const std::string& worker, const std::string& lease,
                                   std::vector<std::pair<std::string, int>> running = {},
                                   int64_t acked = 0) {
    mesa::v1::HeartbeatRequest r;
    r.set_worker_id(worker);
    r.set_lease_id(lease);
    for (auto& [job, attempt] : running) {
      auto* ra = r.add_running();
      ra->set_job_id(job);
      ra->set_attempt(attempt);
    }
    r.set_acked_delivery(acked);
    auto out = c_->Heartbeat(r, nullptr);
    EXPECT_TRUE(out.ok()) << out.status();
    return *out;
  }
  // A report from `worker`, with its latest lease, on `attempt` of `job`.
  mesa::v1::UpdateAttemptRequest Report(const std::string& worker, const std::string& job,
                                        int attempt, mesa::v1::AttemptPhase phase) {
    mesa::v1::UpdateAttemptRequest r;
    r.set_worker_id(worker);
    r.set_lease_id(leases_[worker]);
    r.set_job_id(job);
    r.set_attempt(attempt);
    r.set_phase(phase);
    return r;
  }
  absl::Status Update(const std::string& worker, const std::string& job, int attempt,
                      mesa::v1::AttemptPhase phase,
                      mesa::v1::FailureKind kind = mesa::v1::FAILURE_KIND_UNSPECIFIED) {
    mesa::v1::UpdateAttemptRequest r = Report(worker, job, attempt, phase);
    r.set_failure_kind(kind);
    r.set_message("boom");
    return c_->UpdateAttempt(r).status();
  }
  mesa::v1::JobState State(const std::string& id) { return c_->GetJob(id)->state(); }
  std::vector<mesa::v1::JobEvent> Events(const std::string& id) {
    std::vector<mesa::v1::JobEvent> out;
    mesa::v1::WatchJobRequest w;
    w.set_id(id);
    // A finished job's watch replays and ends; used only on finished jobs here.
    EXPECT_TRUE(c_->WatchJob(
                      w,
                      [&](const mesa::v1::JobEvent& e) {
                        out.push_back(e);
                        return true;
                      },
                      nullptr)
                    .ok());
    return out;
  }

  std::string path_;
  int64_t max_loaded_finished_jobs_ = 10000;
  std::string checkpoint_root_;
  int64_t max_log_bytes_per_job_ = kMaxLogBytesPerJob;
  std::map<std::string, std::string> leases_;  // worker -> its latest lease
  FakeClock clock_;
  Metrics metrics_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Coordinator> c_;
};

}  // namespace mesa::coordinator

#endif  // MESANET_COORDINATOR_TEST_UTIL_H_
