// Device helpers of the gated scan (gated_scan.h) that the operators' own gate and finishing
// kernels share with it: element conversions, the gate functions, and the document-start test.
#ifndef MESANET_KERNELS_COMMON_CUDA_GATED_SCAN_CUH_
#define MESANET_KERNELS_COMMON_CUDA_GATED_SCAN_CUH_

#include <cuda_bf16.h>

#include <cstdint>

namespace mesa::kernels::cuda::gated_scan {

__device__ __forceinline__ float ToF(float x) { return x; }
__device__ __forceinline__ float ToF(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T>
__device__ __forceinline__ T FromF(float x);
template <>
__device__ __forceinline__ float FromF<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromF<__nv_bfloat16>(float x) {
  return __float2bfloat16(x);
}

__device__ __forceinline__ float LogSigmoid(float z) {
  return z >= 0.f ? -log1pf(expf(-z)) : z - log1pf(expf(z));
}
__device__ __forceinline__ float Sigmoid(float z) { return 1.f / (1.f + expf(-z)); }
__device__ __forceinline__ float Softplus(float z) { return z > 20.f ? z : log1pf(expf(z)); }

// Whether token t of row b starts a document (Problem::doc_start's convention).
__device__ __forceinline__ bool Restarts(const int32_t* doc_start, bool at_row_start, int seq_len,
                                         int b, int t) {
  return doc_start != nullptr && (t > 0 || at_row_start) && doc_start[b * seq_len + t] == t;
}

}  // namespace mesa::kernels::cuda::gated_scan

#endif  // MESANET_KERNELS_COMMON_CUDA_GATED_SCAN_CUH_
