// Memory helpers of the RG-LRU's scans (rglru_streaming_scan.cu, rglru_chained_scan.cu): kC
// consecutive channels as one load or store (a bf16 pair or float2 when kC = 2), float32 scratch
// read through L2 (written by other blocks of the same launch); the flags' acquire and release
// come from kernels/common/cuda/release_acquire.cuh.
#ifndef MESANET_KERNELS_RGLRU_CUDA_RGLRU_PACKED_IO_CUH_
#define MESANET_KERNELS_RGLRU_CUDA_RGLRU_PACKED_IO_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "kernels/common/cuda/release_acquire.cuh"

namespace mesa::kernels::rglru::cuda {

// Paired channels (kC = 2) need an even width and every pointer aligned to two elements.
inline bool PairedChannels(int64_t width, size_t element_bytes,
                           std::initializer_list<const void*> ptrs) {
  if (width % 2 != 0) return false;
  for (const void* ptr : ptrs) {
    if (ptr != nullptr && reinterpret_cast<uintptr_t>(ptr) % (2 * element_bytes) != 0) {
      return false;
    }
  }
  return true;
}

// The type of kC consecutive elements of T as one load: T itself, or its pair.
template <typename T>
struct PairOf;
template <>
struct PairOf<float> {
  using type = float2;
};
template <>
struct PairOf<__nv_bfloat16> {
  using type = __nv_bfloat162;
};
template <typename T, int kC>
using Packed = std::conditional_t<kC == 2, typename PairOf<T>::type, T>;

__device__ __forceinline__ void Unpack(float v, float* o) { o[0] = v; }
__device__ __forceinline__ void Unpack(float2 v, float* o) {
  o[0] = v.x;
  o[1] = v.y;
}
__device__ __forceinline__ void Unpack(__nv_bfloat16 v, float* o) { o[0] = __bfloat162float(v); }
__device__ __forceinline__ void Unpack(__nv_bfloat162 v, float* o) {
  const float2 f = __bfloat1622float2(v);
  o[0] = f.x;
  o[1] = f.y;
}
__device__ __forceinline__ void Repack(const float* v, float* out) { *out = v[0]; }
__device__ __forceinline__ void Repack(const float* v, float2* out) { *out = {v[0], v[1]}; }
__device__ __forceinline__ void Repack(const float* v, __nv_bfloat16* out) {
  *out = __float2bfloat16(v[0]);
}
__device__ __forceinline__ void Repack(const float* v, __nv_bfloat162* out) {
  *out = __floats2bfloat162_rn(v[0], v[1]);
}

template <typename T, int kC>
__device__ __forceinline__ void StoreC(T* base, int64_t i, const float (&v)[kC]) {
  using P = Packed<T, kC>;
  P packed;
  Repack(v, &packed);
  *reinterpret_cast<P*>(base + i) = packed;
}

// kC float32 values; kThroughL2 for scratch written by other blocks of this launch (L1 is not
// coherent).
template <int kC, bool kThroughL2 = false>
__device__ __forceinline__ void LoadF(const float* p, float (&v)[kC]) {
  if constexpr (kC == 2) {
    const auto* p2 = reinterpret_cast<const float2*>(p);
    const float2 f = kThroughL2 ? __ldcg(p2) : *p2;
    v[0] = f.x;
    v[1] = f.y;
  } else {
    v[0] = kThroughL2 ? __ldcg(p) : *p;
  }
}
template <int kC>
__device__ __forceinline__ void LoadL2(const float* p, float (&v)[kC]) {
  LoadF<kC, /*kThroughL2=*/true>(p, v);
}
template <int kC>
__device__ __forceinline__ void StoreF(float* p, const float (&v)[kC]) {
  if constexpr (kC == 2) {
    *reinterpret_cast<float2*>(p) = {v[0], v[1]};
  } else {
    p[0] = v[0];
  }
}

using ::mesa::kernels::cuda::LoadAcquire;
using ::mesa::kernels::cuda::StoreRelease;

}  // namespace mesa::kernels::rglru::cuda

#endif  // MESANET_KERNELS_RGLRU_CUDA_RGLRU_PACKED_IO_CUH_
