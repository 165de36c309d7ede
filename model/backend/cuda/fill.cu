// Fill of a buffer with one value rounded to T (tests poison outputs with NaN through
// CudaBackendControl::Fill / FillActivations; no CPU counterpart: CudaBackendControl is
// CUDA-only), and of the rows of positions that start a document (cpu::FillAtDocumentStarts).
#include "model/backend/cuda/backend_kernels.h"

#include <algorithm>
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

// Source row indices passed by value (kernel parameters), kGatherRows at a time.
constexpr int kGatherRows = 256;
struct GatherIndices {
  int32_t src[kGatherRows];
};

// Block row blockIdx.y copies its row with the blocks of x striding over the elements.
__global__ void GatherRowsKernel(float* base, int64_t row_elems, GatherIndices rows,
                                 int64_t first_dst) {
  const float* src = base + int64_t{rows.src[blockIdx.y]} * row_elems;
  float* dst = base + (first_dst + blockIdx.y) * row_elems;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < row_elems;
       i += int64_t{gridDim.x} * blockDim.x) {
    dst[i] = src[i];
  }
}

}  // namespace

cudaError_t LaunchGatherRows(float* base, int64_t row_elems, const int32_t* src_rows,
                             int64_t first_dst, int64_t count, cudaStream_t s) {
  for (int64_t done = 0; done < count; done += kGatherRows) {
    const int64_t n = std::min<int64_t>(kGatherRows, count - done);
    GatherIndices rows{};
    for (int64_t j = 0; j < n; ++j) rows.src[j] = src_rows[done + j];
    const int64_t blocks = std::min<int64_t>(64, (row_elems + kThreads - 1) / kThreads);
    if (cudaError_t e =
            Run(GatherRowsKernel, dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(n)),
                kThreads, 0, s, base, row_elems, rows, first_dst + done);
        e != cudaSuccess) {
      return e;
    }
  }
  return cudaSuccess;
}

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
