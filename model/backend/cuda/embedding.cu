// Token embedding of the CUDA backend: out = table[token] * scale (forward) and the deterministic
// scatter-add d_table[token] += d_out * scale over positions grouped by token on the host
// (backward). Must match cpu::EmbeddingForward / cpu::EmbeddingBackward
// (model/layers/cpu_layers.cc).
#include "model/backend/cuda/backend_kernels.h"

#include <algorithm>
#include <cstdint>

#include "model/backend/cuda/backend_common.cuh"

namespace mesa::model::cuda {
namespace {

// Columns per access of the bf16 embedding backward (one thread owns V consecutive columns).
constexpr int kVecEmbedding = 4;

// V > 1 needs c % V == 0 (a pack stays in one row).
template <typename T, int V>
__global__ void EmbeddingForwardKernel(const int32_t* __restrict__ tokens,
                                       const float* __restrict__ table, T* __restrict__ out,
                                       int64_t n, int64_t c, float scale) {
  GridStride<V>(n * c, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    const int64_t row = i / c;
    const float* src = table + static_cast<int64_t>(tokens[row]) * c + (i - row * c);
    float o[W];
#pragma unroll
    for (int k = 0; k < W; ++k) o[k] = src[k] * scale;  // the table may be unaligned: scalar
    Store(out + i, o);
  });
}

// One block per token group: the positions of a token are summed in ascending order. A thread
// owns V consecutive columns (c % V == 0).
template <typename T, int V>
__global__ void EmbeddingBackwardKernel(const int32_t* __restrict__ order,
                                        const int32_t* __restrict__ seg_start,
                                        const int32_t* __restrict__ seg_token,
                                        const T* __restrict__ d_out, float* __restrict__ d_table,
                                        int64_t c, float scale) {
  const int seg = blockIdx.x;
  const int b = seg_start[seg], e = seg_start[seg + 1];
  float* row = d_table + static_cast<int64_t>(seg_token[seg]) * c;
  for (int64_t j = threadIdx.x * int64_t{V}; j < c; j += int64_t{blockDim.x} * V) {
    float acc[V];
#pragma unroll
    for (int k = 0; k < V; ++k) acc[k] = row[j + k];
    for (int i = b; i < e; ++i) {
      float d[V];
      Load(d_out + static_cast<int64_t>(order[i]) * c + j, d);
#pragma unroll
      for (int k = 0; k < V; ++k) acc[k] += d[k] * scale;
    }
#pragma unroll
    for (int k = 0; k < V; ++k) row[j + k] = acc[k];
  }
}

}  // namespace

template <typename T>
cudaError_t LaunchEmbeddingForward(const int32_t* tokens, const float* table, T* out, int64_t n,
                                   int64_t c, float scale, cudaStream_t s) {
  if (n * c == 0) return cudaSuccess;
  const bool vec = c % kVecElementwise == 0 && Aligned<kVecElementwise>(out);
  return Dispatch<T, kVecElementwise>(vec, [&]<int V>() {
    return Run(EmbeddingForwardKernel<T, V>, VecBlocks(n * c, V), kThreads, 0, s, tokens, table,
               out, n, c, scale);
  });
}

template <typename T>
cudaError_t LaunchEmbeddingBackward(const int32_t* order, const int32_t* seg_start,
                                    const int32_t* seg_token, int64_t num_segments, const T* d_out,
                                    float* d_table, int64_t c, float scale, cudaStream_t s) {
  if (num_segments == 0 || c == 0) return cudaSuccess;
  const bool vec = c % kVecEmbedding == 0 && Aligned<kVecEmbedding>(d_out);
  return Dispatch<T, kVecEmbedding>(vec, [&]<int V>() {
    const int threads = static_cast<int>(std::min<int64_t>(kThreads, ((c / V + 31) / 32) * 32));
    return Run(EmbeddingBackwardKernel<T, V>, static_cast<unsigned>(num_segments), threads, 0, s,
               order, seg_start, seg_token, d_out, d_table, c, scale);
  });
}

// Both activation types (backend_kernels.h).
#define MESA_INSTANTIATE(T)                                                                       \
  template cudaError_t LaunchEmbeddingForward<T>(const int32_t*, const float*, T*, int64_t,       \
                                                 int64_t, float, cudaStream_t);                   \
  template cudaError_t LaunchEmbeddingBackward<T>(const int32_t*, const int32_t*, const int32_t*, \
                                                  int64_t, const T*, float*, int64_t, float,      \
                                                  cudaStream_t);

MESA_INSTANTIATE(float)
MESA_INSTANTIATE(Bf16)

#undef MESA_INSTANTIATE

}  // namespace mesa::model::cuda
