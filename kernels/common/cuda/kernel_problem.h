// The problem description every chunked CUDA operator launches with (Mesa, DeltaNet family,
// attention): the chunk length, the element type of the token tensors, and the device chunk and
// sequence tables (chunks never straddle a sequence). Plain C++ so host code needs no nvcc.
//   chunks[c] = {sequence, first token (flat b*T+t), length, global id of the sequence's first
//   chunk} seqs[s]   = {first token, length, first chunk, number of chunks}
#ifndef MESANET_KERNELS_COMMON_CUDA_KERNEL_PROBLEM_H_
#define MESANET_KERNELS_COMMON_CUDA_KERNEL_PROBLEM_H_

#include <cuda_runtime.h>

namespace mesa::kernels::cuda {

inline constexpr int kChunk = 64;

enum class DType { kF32, kBF16 };

struct KernelProblem {
  int num_seqs = 0;
  int num_chunks = 0;
  int heads = 0;
  int head_dim = 0;              // D
  int padded_dim = 0;            // DP, 64 or 128
  const int4* chunks = nullptr;  // device [num_chunks]
  const int4* seqs = nullptr;    // device [num_seqs]
  DType dtype = DType::kF32;     // of q, k, v, o, do, dq, dk, dv
  int max_seq_chunks = 0;        // the longest sequence's chunks (host-side launch sizing)
};

// Streaming multiprocessors of the current device (asked once per process and device; 132, an
// H100's or H200's, if the runtime cannot tell): launches size their grids by it.
inline int SmCount() {
  static int count[16] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 16) return 132;
  if (count[dev] == 0) {
    int n = 0;
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n < 1) {
      n = 132;
    }
    count[dev] = n;
  }
  return count[dev];
}

}  // namespace mesa::kernels::cuda

#endif  // MESANET_KERNELS_COMMON_CUDA_KERNEL_PROBLEM_H_
