// Bias add of the CUDA backend: out[r, j] += bias[j] (forward) and d_bias[j] += sum_r d_out[r, j]
// (backward: per-block column partials, then ReducePartials; no atomics). Must match
// cpu::BiasForward / cpu::BiasBackward (model/layers/cpu_layers.cc).
#include "model/backend/cuda/backend_kernels.h"

#include <cstdint>

#include "model/backend/cuda/backend_common.cuh"

namespace mesa::model::cuda {
namespace {

template <typename T, int V>
__global__ void BiasForwardKernel(T* out, const float* bias, int64_t total, int64_t n) {
  GridStride<V>(total, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    float o[W];
    Load(out + i, o);
    int64_t col = i % n;  // a pack may wrap into the next row (n = 6 for the gate biases)
#pragma unroll
    for (int k = 0; k < W; ++k) {
      o[k] += bias[col];
      if (++col == n) col = 0;
    }
    Store(out + i, o);
  });
}

// partials[blk][j] = sum over the block's rows of x[r][j].
template <typename T>
__global__ void ColumnPartialsKernel(const T* __restrict__ x, int64_t rows, int64_t n,
                                     float* __restrict__ partials) {
  const int64_t r0 = blockIdx.x * kRowsPerPartial;
  const int64_t r1 = min(rows, r0 + kRowsPerPartial);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    partials[blockIdx.x * n + j] = OrderedSum(x + r0 * n + j, r1 - r0, n, 0.f);
  }
}

}  // namespace

template <typename T>
cudaError_t LaunchBiasForward(T* out, const float* bias, int64_t rows, int64_t n, cudaStream_t s) {
  if (rows * n == 0) return cudaSuccess;
  return Dispatch<T, kVecElementwise>(Aligned<kVecElementwise>(out), [&]<int V>() {
    return Run(BiasForwardKernel<T, V>, VecBlocks(rows * n, V), kThreads, 0, s, out, bias, rows * n,
               n);
  });
}

template <typename T>
cudaError_t LaunchBiasBackward(const T* d_out, float* d_bias, float* partials, int64_t rows,
                               int64_t n, cudaStream_t s) {
  if (rows * n == 0) return cudaSuccess;
  const int64_t blocks = PartialRows(rows);
  if (cudaError_t e = Run(ColumnPartialsKernel<T>, static_cast<unsigned>(blocks), kThreads, 0, s,
                          d_out, rows, n, partials);
      e != cudaSuccess) {
    return e;
  }
  return ReducePartials(partials, blocks, n, d_bias, s);
}

// Both activation types (backend_kernels.h).
#define MESA_INSTANTIATE(T)                                                                    \
  template cudaError_t LaunchBiasForward<T>(T*, const float*, int64_t, int64_t, cudaStream_t); \
  template cudaError_t LaunchBiasBackward<T>(const T*, float*, float*, int64_t, int64_t,       \
                                             cudaStream_t);

MESA_INSTANTIATE(float)
MESA_INSTANTIATE(Bf16)

#undef MESA_INSTANTIATE

}  // namespace mesa::model::cuda
