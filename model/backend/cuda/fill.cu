// Fill of a buffer with one value rounded to T (tests poison outputs with NaN through
// CudaBackendControl::Fill / FillActivations; no CPU counterpart: CudaBackendControl is
// CUDA-only), and of the rows of positions that start a document (cpu::FillAtDocumentStarts).
#include "model/backend/cuda/backend_kernels.h"

#include <cstdint>

#include "model/backend/cuda/backend_common.cuh"

namespace mesa::model::cuda {
namespace {

template <typename T, int V>
__global__ void FillKernel(T* x, int64_t n, float value) {
  GridStride<V>(n, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    float o[W];
#pragma unroll
    for (int k = 0; k < W; ++k) o[k] = value;
    Store(x + i, o);
  });
}

// One thread per element of the b*t x cols buffer.
__global__ void FillAtDocumentStartsKernel(float* x, const int32_t* doc_start, int64_t t,
                                           int64_t cols, int64_t n, float value) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  const int64_t r = i / cols;
  if (doc_start[r] == r % t) x[i] = value;
}

}  // namespace

cudaError_t LaunchFillAtDocumentStarts(float* x, const int32_t* doc_start, int64_t b, int64_t t,
                                       int64_t cols, float value, cudaStream_t s) {
  const int64_t n = b * t * cols;
  if (n == 0) return cudaSuccess;
  return Run(FillAtDocumentStartsKernel, dim3(static_cast<unsigned>((n + kThreads - 1) / kThreads)),
             kThreads, 0, s, x, doc_start, t, cols, n, value);
}

template <typename T>
cudaError_t LaunchFill(T* x, int64_t n, float value, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  return Dispatch<T, kVecElementwise>(Aligned<kVecElementwise>(x), [&]<int V>() {
    return Run(FillKernel<T, V>, VecBlocks(n, V), kThreads, 0, s, x, n, value);
  });
}

// Both activation types (backend_kernels.h).
#define MESA_INSTANTIATE(T) template cudaError_t LaunchFill<T>(T*, int64_t, float, cudaStream_t);

MESA_INSTANTIATE(float)
MESA_INSTANTIATE(Bf16)

#undef MESA_INSTANTIATE

}  // namespace mesa::model::cuda
