// comm_check: the program the communicator tests start under mpirun (or as agent-style ranks
// with MESA_RANK/MESA_WORLD_SIZE): builds the communicator from the environment, exactly as
// mesa-train does, and checks it.
//   --mode=collectives  every collective on fresh random data (seed drawn by rank 0, printed)
//   --mode=exit_early   the last rank exits at once (no MPI_Finalize); the others all-reduce and
//                       must get an error or be torn down, not hang
//   --mode=hang         the last rank sleeps; the others must time out (MESA_COLLECTIVE_TIMEOUT_S)
// comm_check_cuda (built with MESA_COMM_CHECK_CUDA and the NCCL library) takes --device=cuda and
// checks the NCCL communicator on device buffers (GPU machine only).
// Prints "comm_check rank R: OK ..." or "comm_check rank R: <status>" and exits 0 / 1.
#include <unistd.h>

#include <cstdio>
#include <random>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/cli_flags.h"
#include "model/comm/comm_check.h"
#include "model/comm/communicator_factory.h"

#ifdef MESA_COMM_CHECK_CUDA
#include <cuda_runtime_api.h>
#endif

ABSL_FLAG(std::string, mode, "collectives", "collectives, exit_early or hang");
ABSL_FLAG(std::string, device, "cpu", "cpu (MPI/TCP); cuda needs the NCCL build");

namespace {

// Where the checked buffers live: host memory, or device memory for NCCL.
mesa::model::CommMemory MemoryFor(const std::string& device) {
#ifdef MESA_COMM_CHECK_CUDA
  if (device == "cuda") {
    return {[](size_t bytes) {
              void* p = nullptr;
              if (cudaMalloc(&p, bytes) != cudaSuccess) abort();
              return p;
            },
            [](void* p) { cudaFree(p); },
            [](void* dst, const void* src, size_t bytes, bool to_device) {
              if (cudaMemcpy(dst, src, bytes,
                             to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost) !=
                  cudaSuccess) {
                abort();
              }
            }};
  }
#endif
  (void)device;
  return mesa::model::HostMemory();
}

}  // namespace

int main(int argc, char** argv) {
  mesa::base::ParseFlagsOrExit(
      argc, argv,
      "comm_check --mode=collectives|exit_early|... (under mpirun or as agent-style ranks)\n"
      "  Checks the communicator.");
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string mode = absl::GetFlag(FLAGS_mode);
  auto env = mesa::model::ReadCommEnvironment();
  if (!env.ok()) {
    printf("comm_check: %s\n", env.status().ToString().c_str());
    return 1;
  }
  const int rank = env->rank, world = env->world_size;
  const bool last = rank == world - 1 && world > 1;
  if (mode == "exit_early" && last) {
    printf("comm_check rank %d: exiting early on purpose\n", rank);
    _exit(7);  // no MPI_Finalize, no goodbye on sockets: like a crash
  }
  const absl::Time start = absl::Now();
  auto comm = mesa::model::CreateCommunicatorFromEnv(*env, absl::GetFlag(FLAGS_device));
  if (!comm.ok()) {
    printf("comm_check rank %d: %s\n", rank, comm.status().ToString().c_str());
    return 1;
  }
  absl::Status status;
  std::string detail;
  if (mode == "collectives") {
    uint64_t seed = rank == 0 ? std::random_device()() : 0;
    status = (*comm)->BroadcastBytes(&seed, sizeof(seed), 0);
    if (status.ok()) {
      status = mesa::model::CheckCollectives(**comm, seed, MemoryFor(absl::GetFlag(FLAGS_device)));
    }
    detail = absl::StrCat("seed=", seed);
  } else if (mode == "exit_early" || mode == "hang") {
    if (mode == "hang" && last) {
      printf("comm_check rank %d: hanging on purpose\n", rank);
      sleep(120);  // the test kills us long before
      return 0;
    }
    const mesa::model::CommMemory memory = MemoryFor(absl::GetFlag(FLAGS_device));
    std::vector<float> ones(1000, 1.0f);
    float* grads = static_cast<float*>(memory.allocate(sizeof(float) * ones.size()));
    memory.copy(grads, ones.data(), sizeof(float) * ones.size(), true);
    // A few rounds: the failure must surface whichever collective is in flight.
    for (int i = 0; i < 3 && status.ok(); ++i) {
      status = (*comm)->AllReduce(grads, ones.size(), mesa::model::ReduceOp::kSum);
    }
    if (status.ok()) status = (*comm)->Barrier();
  } else {
    status = absl::InvalidArgumentError(absl::StrCat("unknown --mode=", mode));
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (!status.ok()) {
    printf("comm_check rank %d: %s (after %.1fs)\n", rank, status.ToString().c_str(), seconds);
    fflush(stdout);
    _exit(1);  // skip destructors: a failed communicator must not wait for its peers
  }
  printf("comm_check rank %d: OK %s world=%d comm=%s (%.2fs)\n", rank, detail.c_str(), world,
         (*comm)->name().c_str(), seconds);
  comm->reset();
  return 0;
}
