// Device helpers of the DeltaNet-family CUDA kernels: bf16 tensor-core products on padded
// shared-memory tiles (warp level), tile staging from token-major tensors, chunk gates.
//
// All tensor-core operands are bf16 (fp32 accumulation): the delta rule's inputs need no range
// scaling then (bf16 has fp32's exponent range), unlike the Mesa kernels' fp16 operands.
// Tiles are row-major bf16 with rows padded by 8 elements (16 bytes), so that the 8 row addresses
// of one ldmatrix land in distinct banks; the ldmatrix loaders of kernels/common/cuda/mma.cuh work
// on any 16-bit element type and are reused through a pointer cast.
#ifndef MESANET_KERNELS_DELTANET_CUDA_DELTANET_COMMON_CUH_
#define MESANET_KERNELS_DELTANET_CUDA_DELTANET_COMMON_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/common/cuda/mma.cuh"
#include "kernels/common/cuda/tile_staging.cuh"
#include "kernels/deltanet/cuda/deltanet_kernels.h"

namespace mesa::kernels::deltanet::cuda {

using ::mesa::kernels::cuda::kChunk;
using ::mesa::kernels::cuda::Load8;
using ::mesa::kernels::cuda::Store2;
using bf16 = __nv_bfloat16;

// Padded row strides (elements) of the tiles.
template <int COLS>
inline constexpr int kPad = COLS + 8;

__device__ __forceinline__ void MmaBf16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ const __half* AsHalf(const bf16* p) {
  return reinterpret_cast<const __half*>(p);
}

__device__ __forceinline__ uint32_t PackBf162(float lo, float hi) {
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}

// acc[NT][4] (+)= A(rows m0..m0+15, K = KDIM) * B(K, columns n0..n0+8*NT-1), one warp.
//   kAKM: A is stored [k][m] (the product uses its transpose); else [m][k].
//   kBKN: B is stored [k][n]; else [n][k] (the product uses its transpose).
//   kNegA: subtracts the product instead (A fragments negated exactly: bf16 sign bits).
// Accumulator layout (mma m16n8k16): acc[j] = {(g, n0+8j+2c), (g, +1), (g+8, n0+8j+2c), (g+8, +1)}
// relative to m0, with g = lane / 4, c = lane % 4.
template <int NT, int KDIM, bool kAKM, bool kBKN, bool kNegA = false>
__device__ __forceinline__ void WarpGemm(float (&acc)[NT][4], const bf16* a, int lda, int m0,
                                         const bf16* b, int ldb, int n0, int lane) {
  static_assert(NT % 2 == 0 && KDIM % 16 == 0, "tile shape");
  using namespace ::mesa::kernels::cuda;  // NOLINT: the ldmatrix loaders
#pragma unroll
  for (int k0 = 0; k0 < KDIM; k0 += 16) {
    uint32_t af[4];
    if constexpr (kAKM) {
      LoadA_KM(af, AsHalf(a), lda, m0, k0, lane);
    } else {
      LoadA_MK(af, AsHalf(a), lda, m0, k0, lane);
    }
    if constexpr (kNegA) {
#pragma unroll
      for (int i = 0; i < 4; ++i) af[i] = NegHalf2(af[i]);
    }
#pragma unroll
    for (int j = 0; j < NT / 2; ++j) {
      uint32_t bfr[4];
      if constexpr (kBKN) {
        LoadB_KN(bfr, AsHalf(b), ldb, k0, n0 + 16 * j, lane);
      } else {
        LoadB_NK(bfr, AsHalf(b), ldb, n0 + 16 * j, k0, lane);
      }
      MmaBf16(acc[2 * j], af, bfr[0], bfr[1]);
      MmaBf16(acc[2 * j + 1], af, bfr[2], bfr[3]);
    }
  }
}

template <int NT>
__device__ __forceinline__ void ZeroAcc(float (&acc)[NT][4]) {
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] = 0.f;
}

// Writes a warp's accumulator tile (rows m0.., columns n0..) into a bf16 smem tile.
template <int NT>
__device__ __forceinline__ void StoreAccBf16(const float (&acc)[NT][4], bf16* tile, int ld, int m0,
                                             int n0, int lane) {
  const int g = lane >> 2, c = lane & 3;
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const int col = n0 + 8 * j + 2 * c;
    *reinterpret_cast<uint32_t*>(tile + (m0 + g) * ld + col) = PackBf162(acc[j][0], acc[j][1]);
    *reinterpret_cast<uint32_t*>(tile + (m0 + g + 8) * ld + col) = PackBf162(acc[j][2], acc[j][3]);
  }
}

// One butterfly stage of a 4 x 4 word transpose within a quad: a lane with `upper` swaps its
// words U0, U1 for words L0, L1 of lane ^ kMask (which does the reverse).
template <int kMask, int U0, int U1, int L0, int L1>
__device__ __forceinline__ void QuadExchange(uint32_t (&w)[4], bool upper) {
  uint32_t t0 = upper ? w[U0] : w[L0], t1 = upper ? w[U1] : w[L1];
  t0 = __shfl_xor_sync(0xffffffffu, t0, kMask);
  t1 = __shfl_xor_sync(0xffffffffu, t1, kMask);
  if (upper) {
    w[U0] = t0;
    w[U1] = t1;
  } else {
    w[L0] = t0;
    w[L1] = t1;
  }
}

// Stores a warp's accumulator tile (rows m0+g, m0+g+8 relative to the tile, columns n0..n0+8NT-1)
// into a row-major global tensor: dst[row0 + r * stride + col] = acc * (r's scale), for rows < len
// and columns < ncols (a multiple of 8). bf16: a 4 x 4 transpose of 32-bit words within each quad
// gives every lane 8 consecutive columns of one row, so that each store is 16 bytes and each
// quad writes 64 contiguous bytes of a row; fp32: 8-byte stores.
template <int NT, typename T>
__device__ __forceinline__ void StoreAccRows(const float (&acc)[NT][4], T* dst, int64_t row0,
                                             int64_t stride, int m0, int n0, int len, int ncols,
                                             int lane, float s_lo = 1.f, float s_hi = 1.f) {
  const int g = lane >> 2, c = lane & 3;
  if constexpr (sizeof(T) == 2) {
    static_assert(NT % 4 == 0, "quad transpose");
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = m0 + g + 8 * half;
      const float s = half ? s_hi : s_lo;
#pragma unroll
      for (int j0 = 0; j0 < NT; j0 += 4) {
        uint32_t w[4];
#pragma unroll
        for (int j = 0; j < 4; ++j)
          w[j] = PackBf162(s * acc[j0 + j][2 * half], s * acc[j0 + j][2 * half + 1]);
        // Transpose M[lane c][j] -> lane c holds the words of j-tile j0 + c from lanes 0..3.
        QuadExchange<2, 0, 1, 2, 3>(w, c & 2);
        QuadExchange<1, 0, 2, 1, 3>(w, c & 1);
        const int col = n0 + 8 * (j0 + c);
        if (r < len && col < ncols)
          *reinterpret_cast<uint4*>(dst + row0 + r * stride + col) =
              make_uint4(w[0], w[1], w[2], w[3]);
      }
    }
  } else {
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const int col = n0 + 8 * j + 2 * c;
      if (col < ncols) {
        const int r0 = m0 + g, r1 = r0 + 8;
        if (r0 < len) Store2(dst + row0 + r0 * stride + col, s_lo * acc[j][0], s_lo * acc[j][1]);
        if (r1 < len) Store2(dst + row0 + r1 * stride + col, s_hi * acc[j][2], s_hi * acc[j][3]);
      }
    }
  }
}

// sum_col acc[row][col] * tile[row][col] over the warp's columns, for its rows m0+g and m0+g+8
// (summed over the 4 lanes of a quad: every lane of the quad gets the row totals).
template <int NT>
__device__ __forceinline__ float2 RowDotBf16(const float (&acc)[NT][4], const bf16* tile, int ld,
                                             int m0, int n0, int lane) {
  const int g = lane >> 2, c = lane & 3;
  float lo = 0.f, hi = 0.f;
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const int col = n0 + 8 * j + 2 * c;
    const float2 a =
        __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(tile + (m0 + g) * ld + col));
    const float2 b = __bfloat1622float2(
        *reinterpret_cast<const __nv_bfloat162*>(tile + (m0 + g + 8) * ld + col));
    lo += acc[j][0] * a.x + acc[j][1] * a.y;
    hi += acc[j][2] * b.x + acc[j][3] * b.y;
  }
  return make_float2(::mesa::kernels::cuda::QuadSum(lo), ::mesa::kernels::cuda::QuadSum(hi));
}

// Stages `len` rows of a strided tensor into a bf16 tile of kCols columns (padded stride ld):
//   tile[r][j] = src[row0 + r * row_stride + j] * (row_scale ? row_scale[r] : 1)
// for r < len and j < valid_cols, zero elsewhere (rows len..63 and columns valid_cols..kCols-1).
// kCols and valid_cols are multiples of 8; src rows are 16-byte aligned groups of 8.
template <int kCols, typename T>
__device__ __forceinline__ void StageRows(bf16* tile, int ld, const T* src, int64_t row0,
                                          int64_t row_stride, int len, int valid_cols,
                                          const float* row_scale, int rows = kChunk) {
  constexpr int kGroups = kCols / 8;
  for (int idx = threadIdx.x; idx < rows * kGroups; idx += blockDim.x) {
    const int r = idx / kGroups, g = idx % kGroups;
    float f[8];
    if (r < len && g * 8 < valid_cols) {
      Load8(src + row0 + r * row_stride + g * 8, f);
      if (row_scale != nullptr) {
        const float s = row_scale[r];
#pragma unroll
        for (int i = 0; i < 8; ++i) f[i] *= s;
      }
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) f[i] = 0.f;
    }
    uint4 u;
    u.x = PackBf162(f[0], f[1]);
    u.y = PackBf162(f[2], f[3]);
    u.z = PackBf162(f[4], f[5]);
    u.w = PackBf162(f[6], f[7]);
    *reinterpret_cast<uint4*>(tile + r * ld + g * 8) = u;
  }
}

// The same for bf16 sources by cp.async (16-byte copies, all in flight at once; zero padding by
// plain stores). The caller waits (CpAsyncWaitAll) and publishes with a barrier.
template <int kCols>
__device__ __forceinline__ void StageRowsAsync(bf16* tile, int ld, const bf16* src, int64_t row0,
                                               int64_t row_stride, int len, int valid_cols,
                                               int rows = kChunk) {
  constexpr int kGroups = kCols / 8;
  for (int idx = threadIdx.x; idx < rows * kGroups; idx += blockDim.x) {
    const int r = idx / kGroups, g = idx % kGroups;
    bf16* dst = tile + r * ld + g * 8;
    if (r < len && g * 8 < valid_cols) {
      ::mesa::kernels::cuda::CpAsync16(dst, src + row0 + r * row_stride + g * 8);
    } else {
      *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
    }
  }
}

__device__ __forceinline__ void CpAsyncCommit() {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 800)
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
// Waits until at most N committed cp.async groups of this thread are pending.
template <int N>
__device__ __forceinline__ void CpAsyncWaitGroup() {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 800)
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

// An input tile (q, k, v or do; bf16 or fp32 in global memory): bf16 sources are copied
// asynchronously (the caller waits and publishes with a barrier), fp32 sources are converted here.
template <int kCols, typename T>
__device__ __forceinline__ void StageInput(bf16* tile, int ld, const T* src, int64_t row0,
                                           int64_t row_stride, int len, int valid_cols) {
  if constexpr (sizeof(T) == 2) {
    StageRowsAsync<kCols>(tile, ld, src, row0, row_stride, len, valid_cols);
  } else {
    StageRows<kCols>(tile, ld, src, row0, row_stride, len, valid_cols, nullptr);
  }
}

// tile[r][.] *= row_scale[r] for the 64 rows of a bf16 tile, in place (the caller publishes it
// with a barrier).
template <int kCols>
__device__ __forceinline__ void ScaleRowsInPlace(bf16* tile, int ld, const float* row_scale) {
  constexpr int kGroups = kCols / 8;
  for (int idx = threadIdx.x; idx < kChunk * kGroups; idx += blockDim.x) {
    const int r = idx / kGroups, g = idx % kGroups;
    uint4* p = reinterpret_cast<uint4*>(tile + r * ld + g * 8);
    uint4 u = *p;
    const float s = row_scale[r];
    uint32_t* w = reinterpret_cast<uint32_t*>(&u);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&w[i]));
      w[i] = PackBf162(f.x * s, f.y * s);
    }
    *p = u;
  }
}

// The sequential kernels' state block: value rows v0 + row0 + (0..15), key columns col0 + (0..8 NT)
// of a D x D fp32 state (or its gradient) held by one warp in accumulator layout. Load (zero where
// src is null or outside D x D) and store (fp32, clipped to D x D).
template <int NT>
__device__ __forceinline__ void LoadStateBlock(float (&st)[NT][4], const float* src, int D, int v0,
                                               int row0, int col0, int lane) {
  const int g = lane >> 2, c = lane & 3;
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int vr = v0 + row0 + g + 8 * (e >> 1), col = col0 + 8 * j + 2 * c + (e & 1);
      st[j][e] = (src != nullptr && vr < D && col < D) ? src[vr * D + col] : 0.f;
    }
}
template <int NT>
__device__ __forceinline__ void StoreStateBlock(const float (&st)[NT][4], float* dst, int D, int v0,
                                                int row0, int col0, int lane) {
  const int g = lane >> 2, c = lane & 3;
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int vr = v0 + row0 + g + 8 * (e >> 1), col = col0 + 8 * j + 2 * c + (e & 1);
      if (vr < D && col < D) dst[vr * D + col] = st[j][e];
    }
}
// Copies rows 0..rows-1 of a bf16 tile (kCols columns, padded stride ld) to global memory
// (dst[r * row_stride + j]) with 16-byte stores, the whole CTA; the tile must be published.
template <int kCols>
__device__ __forceinline__ void StoreTileRows(const bf16* tile, int ld, bf16* dst,
                                              int64_t row_stride, int rows) {
  constexpr int kGroups = kCols / 8;
  for (int idx = threadIdx.x; idx < rows * kGroups; idx += blockDim.x) {
    const int r = idx / kGroups, g = idx % kGroups;
    *reinterpret_cast<uint4*>(dst + r * row_stride + g * 8) =
        *reinterpret_cast<const uint4*>(tile + r * ld + g * 8);
  }
}

// Raises the kernel's dynamic shared-memory limit to `smem` bytes and launches it.
template <typename... Args>
cudaError_t LaunchWithSmem(void (*kernel)(Args...), dim3 grid, int threads, int smem,
                           cudaStream_t stream, Args... args) {
  if (cudaError_t e =
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
      e != cudaSuccess)
    return e;
  // All these kernels are limited by shared memory: ask for the largest carveout.
  if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                           cudaSharedmemCarveoutMaxShared);
      e != cudaSuccess)
    return e;
  kernel<<<grid, threads, smem, stream>>>(args...);
  return cudaGetLastError();
}

// Per-chunk gates in shared memory (64 entries each; zero past len):
//   b[r]   = sum_{s<=r} log_gamma_s (in-chunk prefix; 0 for DeltaNet)
//   gam[r] = e^{b_r},  dec[r] = e^{b_{len-1} - b_r} (r < len),  beta_s[r] = beta_r;
//   *gam_last = e^{b_{len-1}} (1 when len == 0).
// Needs blockDim.x >= 64; ends with __syncthreads.
struct ChunkGates {
  float b[kChunk];
  float gam[kChunk];
  float dec[kChunk];
  float beta[kChunk];
  float tmp[kChunk];  // kernel-specific scratch
  float gam_last;
};

// A chunk's raw gate inputs held by the thread that stores them (LoadGates splits into the global
// loads and the rest, so that the sequential kernels can fetch the next chunk's gates early).
struct GateRegs {
  float a0, a1;  // log_gamma of rows 2t, 2t+1 (t < 32)
  float beta;    // beta of row t (t < 64)
};

__device__ __forceinline__ GateRegs FetchGates(const float* log_gamma, const float* beta,
                                               int64_t tok0, int len, int heads, int h) {
  const int t = threadIdx.x;
  GateRegs r{0.f, 0.f, 0.f};
  if (t < 32 && log_gamma != nullptr) {
    if (2 * t < len) r.a0 = log_gamma[(tok0 + 2 * t) * heads + h];
    if (2 * t + 1 < len) r.a1 = log_gamma[(tok0 + 2 * t + 1) * heads + h];
  }
  if (t < kChunk && t < len) r.beta = beta[(tok0 + t) * heads + h];
  return r;
}

__device__ __forceinline__ void SetGates(ChunkGates* gs, const GateRegs& in, int len) {
  const int t = threadIdx.x;
  if (t < 32) {
    // Warp prefix sum over 64 entries: two per lane.
    float pair = in.a0 + in.a1;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const float y = __shfl_up_sync(0xffffffffu, pair, off);
      if (t >= off) pair += y;
    }
    const float excl = pair - (in.a0 + in.a1);
    gs->b[2 * t] = excl + in.a0;
    gs->b[2 * t + 1] = excl + in.a0 + in.a1;
  }
  if (t < kChunk) gs->beta[t] = in.beta;
  __syncthreads();
  if (t < kChunk) {
    const float last = len > 0 ? gs->b[len - 1] : 0.f;
    gs->gam[t] = t < len ? __expf(gs->b[t]) : 0.f;
    gs->dec[t] = t < len ? __expf(last - gs->b[t]) : 0.f;
    if (t == 0) gs->gam_last = __expf(last);
  }
  __syncthreads();
}

__device__ __forceinline__ void LoadGates(ChunkGates* gs, const float* log_gamma, const float* beta,
                                          int64_t tok0, int len, int heads, int h) {
  SetGates(gs, FetchGates(log_gamma, beta, tok0, len, heads, h), len);
}

}  // namespace mesa::kernels::deltanet::cuda

#endif  // MESANET_KERNELS_DELTANET_CUDA_DELTANET_COMMON_CUH_
