// Also the GPU test (nccl_communicator_gpu_test): with a second argument --device=cuda it starts
// comm_check_cuda, which checks the NCCL communicator on device buffers (MPI only bootstraps).
//
// Starts comm_check under `mpirun -np N` (OpenMPI, as root, oversubscribed on CI's 2 cores) and
// checks the MPI communicator end to end: collectives on fresh random data, and that a rank that
// dies or hangs makes the job fail within a bound instead of hanging.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/comm/subprocess_for_test.h"

namespace mesa::model::testing {
namespace {

std::string g_comm_check;      // argv[1]: the comm_check binary
std::string g_device = "cpu";  // argv[2]: --device=cuda for the GPU test

std::string ExpectedComm() { return g_device == "cuda" ? "comm=nccl" : "comm=mpi"; }

ProcessResult Mpirun(int np, const std::string& mode, int timeout_s, absl::Duration bound) {
  ProcessSpec spec;
  spec.argv = MpirunArgs(np);
  spec.argv.insert(spec.argv.end(), {"-x", "MESA_COLLECTIVE_TIMEOUT_S", g_comm_check,
                                     "--mode=" + mode, "--device=" + g_device});
  spec.env = MpirunEnv();
  spec.env.push_back("MESA_COLLECTIVE_TIMEOUT_S=" + std::to_string(timeout_s));
  std::vector<ProcessResult> r = RunProcesses({spec}, bound);
  return r[0];
}

int CountOk(const std::string& output) {
  int n = 0;
  for (size_t pos = 0; (pos = output.find(": OK seed=", pos)) != std::string::npos; ++pos) ++n;
  return n;
}

TEST(MpiCommunicatorTest, CollectivesOnTwoRanks) {
  ProcessResult r = Mpirun(2, "collectives", 60, absl::Seconds(90));
  ASSERT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(CountOk(r.output), 2) << r.output;
  EXPECT_THAT(r.output, ::testing::HasSubstr(ExpectedComm()));
}

// Three ranks: shards of 1001 elements are 334 + 334 + 333 (last padded).
TEST(MpiCommunicatorTest, CollectivesOnThreeRanks) {
  if (g_device == "cuda") GTEST_SKIP() << "NCCL needs a GPU per rank; the GPU machine has 2";
  ProcessResult r = Mpirun(3, "collectives", 60, absl::Seconds(90));
  ASSERT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(CountOk(r.output), 3) << r.output;
}

// A rank that exits without MPI_Finalize: mpirun tears the job down and fails; nobody hangs.
TEST(MpiCommunicatorTest, RankExitingEarlyFailsTheJob) {
  ProcessResult r = Mpirun(2, "exit_early", 10, absl::Seconds(60));
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, ::testing::HasSubstr("exiting early on purpose"));
  EXPECT_THAT(r.output, ::testing::Not(::testing::HasSubstr("rank 0: OK")));
  EXPECT_LT(r.seconds, 30) << r.output;
}

// A rank that hangs: the others time out after MESA_COLLECTIVE_TIMEOUT_S (2 s) with a clear
// error, exit, and mpirun then kills the hung rank.
TEST(MpiCommunicatorTest, HungRankTimesOut) {
  ProcessResult r = Mpirun(2, "hang", 2, absl::Seconds(60));
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, ::testing::HasSubstr("hanging on purpose"));
  EXPECT_THAT(r.output, ::testing::HasSubstr("comm_check rank 0: DEADLINE_EXCEEDED"));
  EXPECT_THAT(r.output, ::testing::HasSubstr("a peer rank has died or hangs"));
  EXPECT_LT(r.seconds, 30) << r.output;
}

}  // namespace
}  // namespace mesa::model::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    fprintf(stderr, "usage: %s COMM_CHECK_BINARY\n", argv[0]);
    return 2;
  }
  mesa::model::testing::g_comm_check = argv[1];
  if (argc >= 3 && std::string(argv[2]) == "--device=cuda") mesa::model::testing::g_device = "cuda";
  return RUN_ALL_TESTS();
}
