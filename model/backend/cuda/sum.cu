// Deterministic fp32 -> double sums of the CUDA backend (fixed grid, fixed trees, no atomics):
// sum of squares for the gradient norm and the plain sum of the per-row losses. Must match
// CpuBackend::SumOfSquares (model/backend/cpu_backend.cc) and the loss sum returned by
// cpu::SoftcapCrossEntropyForward (model/layers/cpu_layers.cc).
#include "model/backend/cuda/backend_kernels.h"

#include <cstdint>

#include "model/backend/cuda/backend_common.cuh"

namespace mesa::model::cuda {
namespace {

// Fixed grid (kSumBlocks) and fixed trees: the same input gives the same bits every time.
template <bool kSquare>
__global__ void SumPartialsKernel(const float* __restrict__ x, int64_t n,
                                  double* __restrict__ partials) {
  double acc = 0.0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const double v = x[i];
    acc += kSquare ? v * v : v;
  }
  __shared__ double sh[kThreads];
  sh[threadIdx.x] = acc;
  __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) sh[threadIdx.x] += sh[threadIdx.x + o];
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = sh[0];
}

__global__ void SumFinalKernel(const double* __restrict__ partials, double* __restrict__ out) {
  __shared__ double sh[kSumBlocks];
  sh[threadIdx.x] = partials[threadIdx.x];
  __syncthreads();
  for (int o = kSumBlocks / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) sh[threadIdx.x] += sh[threadIdx.x + o];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = sh[0];
}

// sum (of squares when kSquare) of x[0, n) into *out, in two ordered passes.
template <bool kSquare>
cudaError_t LaunchSumOf(const float* x, int64_t n, double* partials, double* out, cudaStream_t s) {
  if (cudaError_t e = Run(SumPartialsKernel<kSquare>, kSumBlocks, kThreads, 0, s, x, n, partials);
      e != cudaSuccess) {
    return e;
  }
  return Run(SumFinalKernel, 1, kSumBlocks, 0, s, partials, out);
}

}  // namespace

cudaError_t LaunchSumOfSquares(const float* x, int64_t n, double* partials, double* out,
                               cudaStream_t s) {
  return LaunchSumOf<true>(x, n, partials, out, s);
}

cudaError_t LaunchSum(const float* x, int64_t n, double* partials, double* out, cudaStream_t s) {
  return LaunchSumOf<false>(x, n, partials, out, s);
}

}  // namespace mesa::model::cuda
