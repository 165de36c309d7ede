// Device helpers shared by the Mesa kernels: element loads for fp32/bf16/fp16 inputs, tile
// staging into padded fp16 shared memory, and the per-chunk gate prefix sums.
#ifndef MESANET_KERNELS_COMMON_CUDA_TILE_STAGING_CUH_
#define MESANET_KERNELS_COMMON_CUDA_TILE_STAGING_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/common/cuda/kernel_problem.h"
#include "kernels/common/cuda/mma.cuh"

namespace mesa::kernels::cuda {

inline constexpr float kLog2e = 1.4426950408889634f;

// Padded smem row stride (halves) for a DP-wide fp16 tile.
template <int DP>
inline constexpr int kStride = DP + 8;

// 8 consecutive elements (16-byte aligned groups since D % 16 == 0) as floats.
__device__ __forceinline__ void Load8(const float* p, float out[8]) {
  const float4 a = *reinterpret_cast<const float4*>(p);
  const float4 b = *reinterpret_cast<const float4*>(p + 4);
  out[0] = a.x;
  out[1] = a.y;
  out[2] = a.z;
  out[3] = a.w;
  out[4] = b.x;
  out[5] = b.y;
  out[6] = b.z;
  out[7] = b.w;
}
__device__ __forceinline__ void Load8(const __nv_bfloat16* p, float out[8]) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}
__device__ __forceinline__ void Load8(const __half* p, float out[8]) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  const __half2* h = reinterpret_cast<const __half2*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __half22float2(h[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

// Two consecutive elements.
__device__ __forceinline__ float2 Load2(const float* p) {
  return *reinterpret_cast<const float2*>(p);
}
__device__ __forceinline__ float2 Load2(const __nv_bfloat16* p) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
}
__device__ __forceinline__ void Store2(float* p, float a, float b) {
  *reinterpret_cast<float2*>(p) = make_float2(a, b);
}
__device__ __forceinline__ void Store2(__nv_bfloat16* p, float a, float b) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(a, b);
}
__device__ __forceinline__ void Store2(__half* p, float a, float b) {
  *reinterpret_cast<__half2*>(p) = __floats2half2_rn(a, b);
}

// Stages rows [0, 64) of a token-major tensor (row r = token tok0 + r, head h) into a CM-layout
// (see mma.cuh) fp16 tile: tile[r][d] = src * scalar * (row_scale ? row_scale[r] : 1) for r < len
// and d < D, zero elsewhere (padding rows and columns). Eight consecutive threads write the eight
// 16-byte rows of one core matrix (128 contiguous bytes: no bank conflicts).
template <int DP, typename T>
__device__ __forceinline__ void StageTokenTileCm(__half* tile, const T* src, int64_t tok0, int len,
                                                 int heads, int h, int D, float scalar,
                                                 const float* row_scale) {
  constexpr int kGroups = DP / 8;
  for (int idx = threadIdx.x; idx < kChunk * kGroups; idx += blockDim.x) {
    const int rest = idx >> 3, g = rest % kGroups, r = (rest / kGroups) * 8 + (idx & 7);
    float f[8];
    if (r < len && g * 8 < D) {
      Load8(src + ((tok0 + r) * heads + h) * static_cast<int64_t>(D) + g * 8, f);
      const float s = scalar * (row_scale ? row_scale[r] : 1.f);
#pragma unroll
      for (int i = 0; i < 8; ++i) f[i] *= s;
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) f[i] = 0.f;
    }
    uint4 u;
    u.x = PackHalf2(f[0], f[1]);
    u.y = PackHalf2(f[2], f[3]);
    u.z = PackHalf2(f[4], f[5]);
    u.w = PackHalf2(f[6], f[7]);
    *reinterpret_cast<uint4*>(tile + CmOff<DP>(r, g * 8)) = u;
  }
}

// Stages a DP x DP fp16 state (dense, [DP][DP]) into a CM-layout tile.
template <int DP>
__device__ __forceinline__ void StageStateTileCm(__half* tile, const __half* src) {
  constexpr int kGroups = DP / 8;
  for (int idx = threadIdx.x; idx < DP * kGroups; idx += blockDim.x) {
    const int rest = idx >> 3, g = rest % kGroups, r = (rest / kGroups) * 8 + (idx & 7);
    *reinterpret_cast<uint4*>(tile + CmOff<DP>(r, g * 8)) =
        *reinterpret_cast<const uint4*>(src + r * DP + g * 8);
  }
}

// Staging for 128-thread CTAs (the CG kernels): the DP x DP state tile by cp.async (all 16-byte
// copies in flight at once instead of one load-store round trip per loop step; the caller waits
// with CpAsyncWaitAll before the barrier that publishes the tile), and the token tile with all of a
// thread's global loads issued before the first conversion/store.
template <int DP, int kThreads>
__device__ __forceinline__ void StageStateTileCmAsync(__half* tile, const __half* src) {
  constexpr int kGroups = DP / 8;
  constexpr int kIters = DP * kGroups / kThreads;
  static_assert(DP * kGroups % kThreads == 0, "state tile split");
  // Not unrolled: cp.async does not block, and unrolled address arithmetic gets hoisted out of the
  // kernel's prologue/epilogue and kept live across the CG loop (ptxas then spills ~250 B).
#pragma unroll 1
  for (int j = 0; j < kIters; ++j) {
    const int idx = static_cast<int>(threadIdx.x) + j * kThreads;
    const int rest = idx >> 3, g = rest % kGroups, r = (rest / kGroups) * 8 + (idx & 7);
    CpAsync16(tile + CmOff<DP>(r, g * 8), src + r * DP + g * 8);
  }
}

template <int DP, int kThreads, typename T>
__device__ __forceinline__ void StageTokenTileCmBatched(__half* tile, const T* src, int64_t tok0,
                                                        int len, int heads, int h, int D) {
  constexpr int kGroups = DP / 8;
  constexpr int kIters = kChunk * kGroups / kThreads;
  static_assert(kChunk * kGroups % kThreads == 0, "token tile split");
  float f[kIters][8];
#pragma unroll
  for (int j = 0; j < kIters; ++j) {
    const int idx = static_cast<int>(threadIdx.x) + j * kThreads;
    const int rest = idx >> 3, g = rest % kGroups, r = (rest / kGroups) * 8 + (idx & 7);
    if (r < len && g * 8 < D) {
      Load8(src + ((tok0 + r) * heads + h) * static_cast<int64_t>(D) + g * 8, f[j]);
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) f[j][i] = 0.f;
    }
  }
#pragma unroll
  for (int j = 0; j < kIters; ++j) {
    const int idx = static_cast<int>(threadIdx.x) + j * kThreads;
    const int rest = idx >> 3, g = rest % kGroups, r = (rest / kGroups) * 8 + (idx & 7);
    uint4 u;
    u.x = PackHalf2(f[j][0], f[j][1]);
    u.y = PackHalf2(f[j][2], f[j][3]);
    u.z = PackHalf2(f[j][4], f[j][5]);
    u.w = PackHalf2(f[j][6], f[j][7]);
    *reinterpret_cast<uint4*>(tile + CmOff<DP>(r, g * 8)) = u;
  }
}

// Loads the chunk's gates: b2[t] = log2(e) * sum_{s<=t} log_gamma_s (in-chunk prefix), beta[t];
// zero for padding rows. Needs blockDim.x >= 64; ends with __syncthreads. lg: 64 floats of
// shared scratch.
__device__ __forceinline__ void LoadChunkGatesWith(float* lg, float* b2, float* beta_s,
                                                   const float* log_gamma, const float* beta,
                                                   int64_t tok0, int len, int heads, int h) {
  const int t = threadIdx.x;
  if (t < kChunk) {
    lg[t] = t < len ? log_gamma[(tok0 + t) * heads + h] : 0.f;
    if (beta_s != nullptr)
      beta_s[t] = (t < len && beta != nullptr) ? beta[(tok0 + t) * heads + h] : 0.f;
  }
  __syncthreads();
  if (t < kChunk) {
    float acc = 0.f;
    for (int s = 0; s <= t; ++s) acc += lg[s];
    b2[t] = acc * kLog2e;
  }
  __syncthreads();
}

// Same with a static 256-byte scratch.
__device__ __forceinline__ void LoadChunkGates(float* b2, float* beta_s, const float* log_gamma,
                                               const float* beta, int64_t tok0, int len, int heads,
                                               int h) {
  __shared__ float lg[kChunk];
  LoadChunkGatesWith(lg, b2, beta_s, log_gamma, beta, tok0, len, heads, h);
}

}  // namespace mesa::kernels::cuda

#endif  // MESANET_KERNELS_COMMON_CUDA_TILE_STAGING_CUH_
