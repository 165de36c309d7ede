// Sums of per-block partials in a fixed order, for kernels that avoid float atomics so that their
// results repeat bit for bit: out[i] = (or +=) Σ_k partials[k·n + i] over k in [0, parts), each
// column's parts cut into kSlices fixed slices (one warp each, loads coalesced across 32 columns)
// and the slices added in order: the association depends only on `parts`, never on scheduling.
#ifndef MESANET_KERNELS_COMMON_CUDA_ORDERED_SUM_CUH_
#define MESANET_KERNELS_COMMON_CUDA_ORDERED_SUM_CUH_

#include <cuda_runtime.h>

#include <cstdint>

namespace mesa::kernels::cuda {

template <int kSlices, bool kAccumulate>
__global__ void __launch_bounds__(32 * kSlices)
    SumPartsInOrderKernel(int64_t parts, int64_t n, const float* __restrict__ partials,
                          float* __restrict__ out) {
  __shared__ float slice_sum[kSlices][32];
  const int lane = threadIdx.x & 31, slice = threadIdx.x >> 5;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * 32 + lane;
  const int64_t per = (parts + kSlices - 1) / kSlices;
  const int64_t k0 = slice * per, k1 = min(parts, k0 + per);
  float sum = 0.f;
  if (i < n) {
#pragma unroll 4
    for (int64_t k = k0; k < k1; ++k) sum += partials[k * n + i];
  }
  slice_sum[slice][lane] = sum;
  __syncthreads();
  if (slice == 0 && i < n) {
    float total = 0.f;
    for (int s = 0; s < kSlices; ++s) total += slice_sum[s][lane];
    out[i] = kAccumulate ? out[i] + total : total;
  }
}

// kSlices: more for many parts per column (32 suits a thousand).
template <int kSlices, bool kAccumulate>
cudaError_t LaunchSumPartsInOrder(int64_t parts, int64_t n, const float* partials, float* out,
                                  cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  SumPartsInOrderKernel<kSlices, kAccumulate>
      <<<static_cast<unsigned>((n + 31) / 32), 32 * kSlices, 0, stream>>>(parts, n, partials, out);
  return cudaGetLastError();
}

}  // namespace mesa::kernels::cuda

#endif  // MESANET_KERNELS_COMMON_CUDA_ORDERED_SUM_CUH_
