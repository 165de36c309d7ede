// The agent against an in-process fake coordinator: an assignment delivered again (the coordinator
// took its answer for lost) must not start a second trainer, whether the attempt still runs or has
// already ended, and the agent echoes the delivery sequences it acted on.
#include "worker/agent.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace mesa::worker {
namespace {

std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

mesa::v1::Assignment CpuAssignment(const std::string& job_id) {
  mesa::v1::Assignment a;
  a.set_job_id(job_id);
  a.set_attempt(1);
  a.set_world_size(1);
  auto* rank = a.add_ranks();
  rank->set_rank(0);
  rank->set_gpu_index(-1);
  a.mutable_spec()->set_name("tiny");
  a.mutable_spec()->set_type(mesa::v1::JOB_TYPE_TRAIN);
  a.add_workers("w1");
  return a;
}

// Delivers the same assignment in the first two heartbeats and once more after its final report.
class DuplicatingCoordinator final : public mesa::v1::WorkerService::Service {
 public:
  grpc::Status RegisterWorker(grpc::ServerContext*, const mesa::v1::RegisterWorkerRequest*,
                              mesa::v1::RegisterWorkerResponse* response) override {
    response->set_lease_id("lease-1");
    response->set_lease_ttl_ms(30000);
    response->set_heartbeat_interval_ms(100);
    return grpc::Status::OK;
  }
  grpc::Status Heartbeat(grpc::ServerContext*, const mesa::v1::HeartbeatRequest* request,
                         mesa::v1::HeartbeatResponse* response) override {
    absl::MutexLock lock(&mu_);
    acked_ = std::max(acked_, request->acked_delivery());
    ++heartbeats_;
    const bool again_after_end = final_reports_ > 0 && !sent_after_end_;
    if (heartbeats_ <= 2 || again_after_end) {
      *response->add_assignments() = CpuAssignment("job-1");
      response->set_delivery_seq(++seq_);
      if (again_after_end) {
        sent_after_end_ = true;
        heartbeats_after_end_ = 0;
      }
    } else if (sent_after_end_) {
      ++heartbeats_after_end_;
    }
    return grpc::Status::OK;
  }
  grpc::Status UpdateAttempt(grpc::ServerContext*, const mesa::v1::UpdateAttemptRequest* request,
                             mesa::v1::UpdateAttemptResponse*) override {
    absl::MutexLock lock(&mu_);
    if (request->phase() != mesa::v1::ATTEMPT_PHASE_RUNNING &&
        request->phase() != mesa::v1::ATTEMPT_PHASE_UNSPECIFIED) {
      ++final_reports_;
    }
    return grpc::Status::OK;
  }

  // True once the agent heartbeated twice after the delivery that followed the final report.
  bool Done() {
    absl::MutexLock lock(&mu_);
    return sent_after_end_ && heartbeats_after_end_ >= 2;
  }
  int final_reports() {
    absl::MutexLock lock(&mu_);
    return final_reports_;
  }
  int64_t acked() {
    absl::MutexLock lock(&mu_);
    return acked_;
  }

 private:
  absl::Mutex mu_;
  int heartbeats_ ABSL_GUARDED_BY(mu_) = 0;
  int heartbeats_after_end_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t seq_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t acked_ ABSL_GUARDED_BY(mu_) = 0;
  int final_reports_ ABSL_GUARDED_BY(mu_) = 0;
  bool sent_after_end_ ABSL_GUARDED_BY(mu_) = false;
};

TEST(AgentTest, RepeatedAssignmentStartsNothingTwice) {
  const std::string marker = absl::StrCat(TempDir(), "/starts");
  const std::string trainer = absl::StrCat(TempDir(), "/trainer.sh");
  {
    std::ofstream out(trainer);
    out << "#!/bin/sh\necho started >> " << marker << "\nsleep 0.5\nexit 0\n";
  }
  chmod(trainer.c_str(), 0755);

  DuplicatingCoordinator service;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);

  AgentOptions options;
  options.coordinator = absl::StrCat("127.0.0.1:", port);
  options.worker_id = "w1";
  options.hostname = "localhost";
  options.resources.cpu_slots = 2;
  options.workdir = absl::StrCat(TempDir(), "/work");
  options.checkpoint_root = absl::StrCat(TempDir(), "/ckpt");
  options.trainer = trainer;
  options.grace = absl::Seconds(2);
  options.base_env = {"PATH=/usr/bin:/bin"};
  options.flush_interval = absl::Milliseconds(100);
  Agent agent(options, nullptr);
  std::thread run([&] { agent.Run(); });
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (!service.Done() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(50));
  agent.Shutdown();
  run.join();
  server->Shutdown();

  ASSERT_TRUE(service.Done()) << "the agent did not heartbeat after the repeated assignment";
  std::ifstream in(marker);
  std::stringstream starts;
  starts << in.rdbuf();
  EXPECT_EQ(starts.str(), "started\n");
  EXPECT_EQ(service.final_reports(), 1);
  EXPECT_EQ(service.acked(), 3);  // every delivery acked, the ignored ones included
}

TEST(AgentTest, AssignmentsThatWouldEscapeTheRootsAreRefused) {
  // Regression: job id "../../x" made the agent write outside its workdir and checkpoint root.
  mesa::v1::Assignment a;
  a.set_attempt(1);
  for (const char* id : {"../../x", "..", ".", "", "a/b", "job 1", "job\n1"}) {
    a.set_job_id(id);
    const absl::Status s = Agent::CheckAssignment(a);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << id;
  }
  a.set_job_id(std::string(129, 'j'));
  EXPECT_FALSE(Agent::CheckAssignment(a).ok());
  a.set_job_id("job-42.1_b");
  EXPECT_TRUE(Agent::CheckAssignment(a).ok());
  a.set_checkpoint_dir("relative/ckpt");
  EXPECT_FALSE(Agent::CheckAssignment(a).ok());
  a.set_checkpoint_dir("/shared/ckpt/job-42.1_b");
  EXPECT_TRUE(Agent::CheckAssignment(a).ok());
  a.set_attempt(0);
  EXPECT_FALSE(Agent::CheckAssignment(a).ok());
}

TEST(AgentTest, OldAttemptDirectoriesArePrunedRecentOnesAndCheckpointsKept) {
  // Regression: nothing was ever deleted; attempt directories piled up on every worker.
  namespace fs = std::filesystem;
  AgentOptions options;
  options.worker_id = "w1";
  options.workdir = absl::StrCat(TempDir(), "/prune");
  options.checkpoint_root = absl::StrCat(options.workdir, "/checkpoints");
  options.attempt_retention = absl::Hours(24);
  const auto write = [](const std::string& path, fs::file_time_type when) {
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream(path) << "x\n";
    fs::last_write_time(path, when);
    fs::last_write_time(fs::path(path).parent_path(), when);
  };
  const auto now = fs::file_time_type::clock::now();
  const auto old = now - std::chrono::hours(24 * 10);
  write(options.workdir + "/jobs/job-1/attempt-1/rank-0.log", old);
  write(options.workdir + "/jobs/job-1/attempt-2/rank-0.log", old);
  write(options.workdir + "/jobs/job-2/attempt-1/rank-0.log", old);
  write(options.workdir + "/jobs/job-2/attempt-2/rank-0.log", now);  // still recent
  write(options.checkpoint_root + "/job-1/step_00000010/state.json", old);
  Agent agent(options, nullptr);
  EXPECT_EQ(agent.PruneAttemptDirs(), 3);
  EXPECT_FALSE(fs::exists(options.workdir + "/jobs/job-1"));  // left empty: removed too
  EXPECT_FALSE(fs::exists(options.workdir + "/jobs/job-2/attempt-1"));
  EXPECT_TRUE(fs::exists(options.workdir + "/jobs/job-2/attempt-2/rank-0.log"));
  EXPECT_TRUE(fs::exists(options.checkpoint_root + "/job-1/step_00000010/state.json"));
  options.attempt_retention = absl::ZeroDuration();  // 0 keeps everything
  write(options.workdir + "/jobs/job-3/attempt-1/rank-0.log", old);
  Agent keeper(options, nullptr);
  EXPECT_EQ(keeper.PruneAttemptDirs(), 0);
  EXPECT_TRUE(fs::exists(options.workdir + "/jobs/job-3/attempt-1"));
}

}  // namespace
}  // namespace mesa::worker
