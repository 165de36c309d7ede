#include "launch/trainer_launch.h"

#include <map>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace mesa::launch {
namespace {

// The environment as the trainer would see it after the agent's exec.
std::map<std::string, std::string> AsMap(const std::vector<std::string>& entries) {
  std::map<std::string, std::string> out;
  for (const std::string& entry : entries) {
    const size_t eq = entry.find('=');
    out[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  return out;
}

EnvLookup LookupIn(const std::map<std::string, std::string>& vars) {
  return [&vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

TEST(TrainerLaunch, WhatTheAgentEncodesTheTrainerDecodes) {
  TrainerEnvironment sent;
  sent.job_id = "job-7";
  sent.attempt = 3;
  sent.rank = 2;
  sent.world_size = 4;
  sent.local_rank = 1;
  sent.coordinator = "10.0.0.1:50051";
  sent.worker_id = "node-b";
  sent.workers = {"node-a", "node-a", "node-b", "node-b"};
  sent.checkpoint_dir = "/ckpt/job-7";
  sent.collective_timeout_s = 42;
  sent.rendezvous = "file:/w/jobs/job-7/attempt-3/rendezvous";
  sent.tcp_host = "10.0.0.2";
  sent.gpu_index = 5;
  sent.cpu_threads = 6;
  const auto vars = AsMap(EncodeTrainerEnvironment(sent, {"PATH=/bin"}));
  auto got = DecodeTrainerEnvironment(LookupIn(vars));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->job_id, sent.job_id);
  EXPECT_EQ(got->attempt, 3);
  EXPECT_EQ(got->rank, 2);
  EXPECT_EQ(got->world_size, 4);
  EXPECT_EQ(got->local_rank, 1);
  EXPECT_EQ(got->coordinator, sent.coordinator);
  EXPECT_EQ(got->worker_id, "node-b");
  EXPECT_EQ(got->workers, sent.workers);
  EXPECT_EQ(got->checkpoint_dir, "/ckpt/job-7");
  EXPECT_EQ(got->collective_timeout_s, 42);
  EXPECT_EQ(got->rendezvous, sent.rendezvous);
  EXPECT_EQ(got->tcp_host, "10.0.0.2");
  EXPECT_EQ(got->device, "cuda");
  EXPECT_EQ(got->gpu_index, 5);
  EXPECT_EQ(got->cpu_threads, 6);
  EXPECT_EQ(vars.at("CUDA_VISIBLE_DEVICES"), "5");
  EXPECT_EQ(vars.at("OMP_NUM_THREADS"), "6");
  EXPECT_EQ(vars.at("PATH"), "/bin");
}

TEST(TrainerLaunch, CpuRanksSeeNoGpu) {
  TrainerEnvironment sent;
  const auto vars = AsMap(EncodeTrainerEnvironment(sent, {"CUDA_VISIBLE_DEVICES=0,1"}));
  EXPECT_EQ(vars.at("CUDA_VISIBLE_DEVICES"), "");
  EXPECT_EQ(vars.at(kEnvDevice), "cpu");
  EXPECT_EQ(vars.count(kEnvGpuIndex), 0u);
  EXPECT_EQ(vars.at(kEnvCpuThreads), "1");
}

TEST(TrainerLaunch, AgentOwnedVariablesAreReplacedAndTuningIsInherited) {
  const auto vars = AsMap(EncodeTrainerEnvironment(
      TrainerEnvironment{},
      {"MESA_RANK=9", "MESA_SOMETHING_OLD=1", "OMP_NUM_THREADS=64", "MESA_GRAD_BUCKET_MB=4",
       "MESA_NCCL_STREAM_PRIORITY=high", "MESA_PEAK_FLOPS=1e15", "HOME=/root"}));
  EXPECT_EQ(vars.at(kEnvRank), "0");
  EXPECT_EQ(vars.count("MESA_SOMETHING_OLD"), 0u);
  EXPECT_EQ(vars.at("OMP_NUM_THREADS"), "1");
  EXPECT_EQ(vars.at(kEnvGradBucketMb), "4");
  EXPECT_EQ(vars.at(kEnvNcclStreamPriority), "high");
  EXPECT_EQ(vars.at("HOME"), "/root");
  auto got = DecodeTrainerEnvironment(LookupIn(vars));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->grad_bucket_mb, 4);
  EXPECT_EQ(got->nccl_stream_priority, "high");
  EXPECT_EQ(got->peak_flops, 1e15);
}

TEST(TrainerLaunch, NothingSetGivesTheDefaults) {
  std::map<std::string, std::string> none;
  auto got = DecodeTrainerEnvironment(LookupIn(none));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->rank, 0);
  EXPECT_EQ(got->world_size, 1);
  EXPECT_EQ(got->gpu_index, -1);
  EXPECT_EQ(got->collective_timeout_s, 300);
  EXPECT_LT(got->grad_bucket_mb, 0);
  EXPECT_TRUE(got->device.empty());
}

TEST(TrainerLaunch, BadValuesNameTheVariable) {
  for (const auto& [name, value] :
       std::vector<std::pair<std::string, std::string>>{{kEnvRank, "two"},
                                                        {kEnvRank, "-1"},
                                                        {kEnvWorldSize, "0"},
                                                        {kEnvCollectiveTimeoutS, "0"},
                                                        {kEnvCpuThreads, "1.5"},
                                                        {kEnvDevice, "tpu"},
                                                        {kEnvGradBucketMb, "-3"},
                                                        {kEnvGradBucketMb, "nan"},
                                                        {kEnvNcclStreamPriority, "urgent"},
                                                        {kEnvPeakFlops, "0"}}) {
    std::map<std::string, std::string> vars = {{name, value}};
    auto got = DecodeTrainerEnvironment(LookupIn(vars));
    ASSERT_FALSE(got.ok()) << name << "=" << value;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(got.status().message(), name)) << got.status();
  }
}

TEST(TrainerLaunch, ArgvAndCheckpointDir) {
  EXPECT_EQ(TrainerArgv("/bin/mesa-train", {"/a/job.yaml", 3, "/a"}),
            (std::vector<std::string>{"/bin/mesa-train", "--config", "/a/job.yaml", "--events_fd",
                                      "3", "--workdir", "/a"}));
  EXPECT_EQ(JobCheckpointDir("", "/ckpt", "job-1"), "/ckpt/job-1");
  EXPECT_EQ(JobCheckpointDir("/mine", "/ckpt", "job-1"), "/mine");
}

}  // namespace
}  // namespace mesa::launch
