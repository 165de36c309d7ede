// Device helpers shared by the attention kernels: bf16 tensor-core MMA (m16n8k16, fp32
// accumulate), tile loads from [B,T,H,D] tensors into padded bf16 shared-memory tiles, and
// stores of accumulator fragments. Fragment layouts: kernels/common/cuda/mma.cuh.
#ifndef MESANET_KERNELS_ATTENTION_CUDA_ATTENTION_COMMON_CUH_
#define MESANET_KERNELS_ATTENTION_CUDA_ATTENTION_COMMON_CUH_

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/attention/cuda/attention_kernels.h"
#include "kernels/common/cuda/mma.cuh"

namespace mesa::kernels::attention::cuda {

using bf16 = __nv_bfloat16;
using ::mesa::kernels::cuda::LoadA_KM;
using ::mesa::kernels::cuda::LoadA_MK;
using ::mesa::kernels::cuda::LoadB_KN;
using ::mesa::kernels::cuda::LoadB_NK;
using ::mesa::kernels::cuda::MmaBf16;
using ::mesa::kernels::cuda::PackBf16;
using ::mesa::kernels::cuda::QuadSum;

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

// The ldmatrix loaders of mma.cuh read 16-bit elements whatever their type.
__device__ __forceinline__ const __half* H(const bf16* p) {
  return reinterpret_cast<const __half*>(p);
}

// A fragments (16 rows x 16 k) of k-step s from two adjacent accumulator n-tiles (2s, 2s+1).
__device__ __forceinline__ void AccToA(const float c0[4], const float c1[4], uint32_t a[4]) {
  a[0] = PackBf16(c0[0], c0[1]);
  a[1] = PackBf16(c0[2], c0[3]);
  a[2] = PackBf16(c1[0], c1[1]);
  a[3] = PackBf16(c1[2], c1[3]);
}

__device__ __forceinline__ void AsyncCopy16(bf16* dst, const void* src, bool valid) {
  asm volatile(
      "cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(::mesa::kernels::cuda::SmemAddr(dst)),
      "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void AsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void AsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Loads rows [row0, row0 + ROWS) of head h, batch b of a [B,T,H,D] tensor into a bf16 tile
// s[ROWS][DP + 8]; rows >= T and columns >= D are zero. bf16 sources go through cp.async (the
// caller commits and waits); fp32 sources are converted through registers.
template <int DP, int ROWS, typename T>
__device__ __forceinline__ void LoadTile(bf16* s, const T* g, const KernelShape& sh, int b, int h,
                                         int row0, int tid, int nthreads) {
  constexpr int kStride = DP + 8, kChunks = DP / 8;
  for (int i = tid; i < ROWS * kChunks; i += nthreads) {
    const int r = i / kChunks, c = (i % kChunks) * 8;
    const int t = row0 + r;
    const bool valid = t < sh.seq_len && c < sh.head_dim;
    const int64_t off =
        valid ? ((static_cast<int64_t>(b) * sh.seq_len + t) * sh.heads + h) * sh.head_dim + c : 0;
    bf16* dst = s + r * kStride + c;
    if constexpr (sizeof(T) == 2) {
      AsyncCopy16(dst, g + off, valid);
    } else {
      float4 x0 = make_float4(0.f, 0.f, 0.f, 0.f), x1 = x0;
      if (valid) {
        x0 = *reinterpret_cast<const float4*>(g + off);
        x1 = *reinterpret_cast<const float4*>(g + off + 4);
      }
      uint4 packed;
      packed.x = PackBf16(x0.x, x0.y);
      packed.y = PackBf16(x0.z, x0.w);
      packed.z = PackBf16(x1.x, x1.y);
      packed.w = PackBf16(x1.z, x1.w);
      *reinterpret_cast<uint4*>(dst) = packed;
    }
  }
}

// Stores two adjacent values (columns col, col + 1) of an output row.
template <typename T>
__device__ __forceinline__ void Store2(T* dst, float x0, float x1) {
  if constexpr (sizeof(T) == 2) {
    *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(x0, x1);
  } else {
    *reinterpret_cast<float2*>(dst) = make_float2(x0, x1);
  }
}

template <typename T>
__device__ __forceinline__ float LoadF(const T* p) {
  if constexpr (sizeof(T) == 2) {
    return __bfloat162float(*p);
  } else {
    return *p;
  }
}

// Whether query i may attend to key j (causal window; both inside the sequence).
__device__ __forceinline__ bool Visible(int i, int j, int window, int seq_len) {
  return j <= i && i < seq_len && (window == 0 || j > i - window);
}
// The same, and key j not before query i's document in row b (KernelShape::doc_start).
__device__ __forceinline__ bool Visible(const KernelShape& sh, int b, int i, int j) {
  return Visible(i, j, sh.window, sh.seq_len) &&
         (sh.doc_start == nullptr || j >= sh.doc_start[b * sh.seq_len + i]);
}

}  // namespace mesa::kernels::attention::cuda

#endif  // MESANET_KERNELS_ATTENTION_CUDA_ATTENTION_COMMON_CUH_
