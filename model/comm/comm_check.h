// Numerical checks of a Communicator's collectives, run by every rank of a test (MPI under
// mpirun, TCP ranks in threads or processes, NCCL on GPUs).
//
// Each rank fills its buffers from Rank(seed, rank), so every rank can recompute what the others
// contributed and check the result of each collective element by element: all-reduce (sum and
// average, float and double), broadcast (every root), byte broadcast, reduce-scatter and
// all-gather on a layout whose last shard is padded, bucketed asynchronous all-reduce, barrier.
#ifndef MESANET_MODEL_COMM_COMM_CHECK_H_
#define MESANET_MODEL_COMM_COMM_CHECK_H_

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "model/comm/communicator.h"

namespace mesa::model {

// Copies between host and the communicator's memory (identity for CPU communicators; cudaMemcpy
// for NCCL). `to_device` is true for host→device.
using CommCopyFn = std::function<void(void* dst, const void* src, size_t bytes, bool to_device)>;
// Allocates/frees `bytes` of the communicator's memory.
struct CommMemory {
  std::function<void*(size_t bytes)> allocate;
  std::function<void(void*)> free;
  CommCopyFn copy;
};
CommMemory HostMemory();

// Runs every check; `seed` must be the same on every rank. The first mismatch is returned as
// an Internal error naming the collective, element and values.
absl::Status CheckCollectives(Communicator& comm, uint64_t seed,
                              const CommMemory& memory = HostMemory());

}  // namespace mesa::model

#endif  // MESANET_MODEL_COMM_COMM_CHECK_H_
