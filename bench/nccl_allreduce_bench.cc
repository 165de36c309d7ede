// nccl_allreduce_bench: all-reduce bandwidth through NcclCommunicator, measured like nccl-tests'
// all_reduce_perf (float sum, in place, `iters` back-to-back collectives timed together) and the
// way the trainer uses it (one blocking AllReduce at a time, watchdog polling included).
// Run with 2+ ranks, e.g. `mpirun -np 2 nccl_allreduce_bench` on a 2-GPU machine.
// Prints per size: "RESULT allreduce bytes=... ranks=N algbw_GBs=... busbw_GBs=...
// blocking_busbw_GBs=..." where busbw = algbw * 2 (N - 1) / N (nccl-tests' definition, comparable
// across N).
#include <cuda_runtime_api.h>

#include <cstdio>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/time/clock.h"
#include "base/cli_flags.h"
#include "model/comm/communicator_factory.h"

ABSL_FLAG(int64_t, min_bytes, 1 << 20, "Smallest message.");
ABSL_FLAG(int64_t, max_bytes, int64_t{1} << 30, "Largest message.");
ABSL_FLAG(int, iters, 20, "Timed collectives per size.");
ABSL_FLAG(int, warmup, 5, "Untimed collectives per size.");

int main(int argc, char** argv) {
  mesa::base::ParseFlagsOrExit(argc, argv,
                               "nccl_allreduce_bench (under mpirun -np 2+)\n"
                               "  All-reduce bandwidth through NcclCommunicator.");
  auto env = mesa::model::ReadCommEnvironment();
  if (!env.ok()) {
    fprintf(stderr, "%s\n", env.status().ToString().c_str());
    return 1;
  }
  auto comm = mesa::model::CreateCommunicatorFromEnv(*env, "cuda");
  if (!comm.ok()) {
    fprintf(stderr, "rank %d: %s\n", env->rank, comm.status().ToString().c_str());
    return 1;
  }
  mesa::model::Communicator& c = **comm;
  const int n = c.world_size();
  const double bus_factor = n > 1 ? 2.0 * (n - 1) / n : 1.0;
  float* buf = nullptr;
  if (cudaMalloc(reinterpret_cast<void**>(&buf), absl::GetFlag(FLAGS_max_bytes)) != cudaSuccess) {
    fprintf(stderr, "cudaMalloc of %lld bytes failed\n",
            static_cast<long long>(absl::GetFlag(FLAGS_max_bytes)));
    return 1;
  }
  cudaMemset(buf, 0, absl::GetFlag(FLAGS_max_bytes));
  const int iters = absl::GetFlag(FLAGS_iters);
  for (int64_t bytes = absl::GetFlag(FLAGS_min_bytes); bytes <= absl::GetFlag(FLAGS_max_bytes);
       bytes *= 2) {
    const int64_t count = bytes / sizeof(float);
    for (int i = 0; i < absl::GetFlag(FLAGS_warmup); ++i) {
      if (!c.AllReduce(buf, count, mesa::model::ReduceOp::kSum).ok()) return 1;
    }
    // nccl-tests style: queue them all, wait once.
    if (!c.Barrier().ok()) return 1;
    absl::Time t0 = absl::Now();
    for (int i = 0; i < iters; ++i) {
      if (!c.AllReduceAsync(buf, count, mesa::model::ReduceOp::kSum).ok()) return 1;
    }
    // Host time to queue them: when it approaches the queued time, the enqueue path (not the
    // links) is what limits small collectives.
    const double enqueue_s = absl::ToDoubleSeconds(absl::Now() - t0) / iters;
    if (absl::Status st = c.WaitAll(); !st.ok()) {
      fprintf(stderr, "%s\n", st.ToString().c_str());
      return 1;
    }
    const double queued_s = absl::ToDoubleSeconds(absl::Now() - t0) / iters;
    // Trainer style: one blocking collective at a time.
    if (!c.Barrier().ok()) return 1;
    t0 = absl::Now();
    for (int i = 0; i < iters; ++i) {
      if (!c.AllReduce(buf, count, mesa::model::ReduceOp::kSum).ok()) return 1;
    }
    const double blocking_s = absl::ToDoubleSeconds(absl::Now() - t0) / iters;
    if (c.rank() == 0) {
      const double algbw = bytes / queued_s / 1e9;
      printf(
          "RESULT allreduce bytes=%lld ranks=%d time_us=%.1f algbw_GBs=%.2f busbw_GBs=%.2f "
          "blocking_time_us=%.1f blocking_busbw_GBs=%.2f enqueue_us=%.1f\n",
          static_cast<long long>(bytes), n, queued_s * 1e6, algbw, algbw * bus_factor,
          blocking_s * 1e6, bytes / blocking_s / 1e9 * bus_factor, enqueue_s * 1e6);
      fflush(stdout);
    }
  }
  cudaFree(buf);
  return 0;
}
