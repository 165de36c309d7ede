#include "model/comm/communicator_factory.h"

#include <map>
#include <string>

#include "gtest/gtest.h"

namespace mesa::model {
namespace {

EnvLookup Env(std::map<std::string, std::string> vars) {
  auto owned = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [owned](const char* name) -> const char* {
    auto it = owned->find(name);
    return it == owned->end() ? nullptr : it->second.c_str();
  };
}

TEST(ReadCommEnvironmentTest, SingleProcessByDefault) {
  auto env = ReadCommEnvironment(-1, -1, Env({}));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->launcher, Launcher::kSingle);
  EXPECT_EQ(env->world_size, 1);
  EXPECT_EQ(env->timeout, absl::Seconds(300));
  auto comm = CreateCommunicatorFromEnv(*env, "cpu");
  ASSERT_TRUE(comm.ok());
  EXPECT_EQ((*comm)->name(), "local");
  // No NCCL linked into this test: a 1-rank CUDA job still gets the local communicator.
  EXPECT_EQ((*CreateCommunicatorFromEnv(*env, "cuda"))->name(), "local");
}

TEST(ReadCommEnvironmentTest, Mpirun) {
  auto env = ReadCommEnvironment(-1, -1,
                                 Env({{"OMPI_COMM_WORLD_RANK", "1"},
                                      {"OMPI_COMM_WORLD_SIZE", "4"},
                                      {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                      {"MESA_RANK", "3"}}));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->launcher, Launcher::kMpirun);
  EXPECT_EQ(env->rank, 1);
  EXPECT_EQ(env->world_size, 4);
  EXPECT_EQ(env->local_rank, 1);
  // Flags that contradict mpirun are an error that says so.
  auto bad = ReadCommEnvironment(
      2, -1, Env({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"}}));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("mpirun"), std::string::npos);
}

TEST(ReadCommEnvironmentTest, AgentLaunched) {
  auto env = ReadCommEnvironment(-1, -1,
                                 Env({{"MESA_RANK", "2"},
                                      {"MESA_WORLD_SIZE", "3"},
                                      {"MESA_LOCAL_RANK", "0"},
                                      {"MESA_JOB_ID", "j/1"},
                                      {"MESA_ATTEMPT", "4"},
                                      {"MESA_CHECKPOINT_DIR", "/ck/j"},
                                      {"MESA_COLLECTIVE_TIMEOUT_S", "7"}}));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->launcher, Launcher::kAgent);
  EXPECT_EQ(env->rank, 2);
  EXPECT_EQ(env->world_size, 3);
  EXPECT_EQ(env->rendezvous, "file:/ck/j/.rendezvous");
  EXPECT_EQ(env->key_prefix, "j-1.4");
  EXPECT_EQ(env->timeout, absl::Seconds(7));
  auto explicit_rv = ReadCommEnvironment(
      -1, -1, Env({{"MESA_RANK", "0"}, {"MESA_WORLD_SIZE", "2"}, {"MESA_RENDEZVOUS", "file:/r"}}));
  ASSERT_TRUE(explicit_rv.ok());
  EXPECT_EQ(explicit_rv->rendezvous, "file:/r");
  // Flags win over the environment outside mpirun.
  auto flags = ReadCommEnvironment(1, 2, Env({{"MESA_RENDEZVOUS", "/r"}}));
  ASSERT_TRUE(flags.ok());
  EXPECT_EQ(flags->rank, 1);
  EXPECT_EQ(flags->world_size, 2);
}

TEST(ReadCommEnvironmentTest, CommStreamPriority) {
  auto normal = ReadCommEnvironment(-1, -1, Env({}));
  ASSERT_TRUE(normal.ok());
  EXPECT_FALSE(normal->comm_stream_high_priority);
  auto high = ReadCommEnvironment(-1, -1, Env({{"MESA_NCCL_STREAM_PRIORITY", "high"}}));
  ASSERT_TRUE(high.ok());
  EXPECT_TRUE(high->comm_stream_high_priority);
}

TEST(ReadCommEnvironmentTest, Errors) {
  EXPECT_EQ(ReadCommEnvironment(-1, -1, Env({{"MESA_WORLD_SIZE", "x"}})).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadCommEnvironment(-1, -1, Env({{"MESA_RANK", "2"}, {"MESA_WORLD_SIZE", "2"}}))
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  // Several ranks but nowhere to meet.
  auto no_rv = ReadCommEnvironment(-1, -1, Env({{"MESA_RANK", "0"}, {"MESA_WORLD_SIZE", "2"}}));
  EXPECT_EQ(no_rv.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(no_rv.status().message().find("MESA_RENDEZVOUS"), std::string::npos);
  EXPECT_EQ(ReadCommEnvironment(-1, -1, Env({{"MESA_COLLECTIVE_TIMEOUT_S", "0"}})).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto prio = ReadCommEnvironment(-1, -1, Env({{"MESA_NCCL_STREAM_PRIORITY", "urgent"}}));
  EXPECT_EQ(prio.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(prio.status().message().find("MESA_NCCL_STREAM_PRIORITY"), std::string::npos);
  // CUDA with several ranks but no NCCL in the binary.
  auto env = ReadCommEnvironment(0, 2, Env({{"MESA_RENDEZVOUS", "/tmp/none"}}));
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(CreateCommunicatorFromEnv(*env, "cuda").status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace mesa::model
