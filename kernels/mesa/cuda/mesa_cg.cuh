// Warp-level pieces of the per-chunk CG (docs/math.md §2.2–2.3), shared by the forward and the
// backward solve. One CTA = one (chunk, head), 4 warps; warp w owns chunk rows 16w..16w+15 and
// keeps its rows of the CG vectors p, r and w = A(p) in registers in mma accumulator layout
// (NT = DP/8 n-tiles of 16x8, 4 floats each); x lives in thread-private shared memory.
//
//   A(P) = diag(e^b) (P Mat) + ((P Key^T) ⊙ M) Val,  M[t,i] = e^{b_t - b_i} beta_i [i <= t]
// For the CG, Mat = H_c and Key = Val = K; then w = A(P) + lambda ⊙ p. The same routine gives
// the output O = X G_c^T + ... (Mat = G_c, Val = V) and the backward right-hand side
// U = E G_c + ((E V^T) ⊙ M) K (Mat = G_c read transposed, Key = V, Val = K).
//
// Each row is scaled to unit norm before the fp16 conversion (rows are independent systems, so
// the operator commutes with the scaling): fp16 then neither overflows nor underflows as the
// residual shrinks over 30 steps.
#ifndef MESANET_KERNELS_MESA_CUDA_MESA_CG_CUH_
#define MESANET_KERNELS_MESA_CUDA_MESA_CG_CUH_

#include <cstdio>
#include <cstdlib>

#include "kernels/common/cuda/tile_staging.cuh"
#include "kernels/mesa/cuda/mesa_kernels.h"

namespace mesa::kernels::cuda {

inline constexpr int kCgThreads = 128;
inline constexpr int kCgWarps = kCgThreads / 32;

// Dynamic smem of both CG kernels (CgForwardKernel, CgBackwardKernel), byte offsets. CM tiles
// (mma.cuh): no padding, wgmma- and ldmatrix-readable.
template <int DP, bool kWgmma>
struct CgSmemLayout {
  static constexpr int kMat = 0;  // DP x DP halves (fwd: H_c, then G_c; bwd: G_c, then H_c)
  static constexpr int kKey = kMat + DP * DP * 2;  // 64 x DP halves (K)
  static constexpr int kP =
      kKey + kChunk * DP * 2;  // 64 x DP halves (fwd: P for wgmma, then V; bwd: V for U, then P)
  static constexpr int kX = kP + kChunk * DP * 2;  // 64 x DP floats (x)
  static constexpr int kB2 = kX + kChunk * DP * 4;
  static constexpr int kBeta = kB2 + kChunk * 4;
  static constexpr int kLambda = kBeta + kChunk * 4;
  static constexpr int kKt = kLambda + DP * 4;  // wgmma: DP x 64 halves (K^T)
  static constexpr int kBytes = kKt + (kWgmma ? DP * kChunk * 2 : 0);
};
// wgmma at DP = 128: 115712 bytes and no static smem, so two CTAs fit one SM's 228 KB exactly
// (1 KB reserved per CTA).
static_assert(CgSmemLayout<128, true>::kBytes + 1024 <= 233472 / 2,
              "wgmma CG kernels must fit 2 CTAs/SM");

// Host: whether the CG kernels take the wgmma path. The wgmma kernels run only on compute
// capability 9.x devices (CgDeviceIsSm90), elsewhere the mma.sync fallback runs (sm_80 code).
// MESA_CUDA_NO_WGMMA=1 forces the mma.sync path on Hopper too (testing the fallback, A/B timing).
inline bool CgUseWgmma() {
  static const bool use = [] {
    const char* e = std::getenv("MESA_CUDA_NO_WGMMA");
    return e == nullptr || e[0] == '\0' || e[0] == '0';
  }();
  return use;
}

// Host, diagnostics: with MESA_CUDA_OCC set, prints once per kernel instantiation its resident
// CTAs per SM, registers, static smem and local memory (spills) as the runtime sees them.
inline void ReportCgOccupancy(bool& done, const char* name, int dp, bool wgmma, const void* fn,
                              int dyn_bytes) {
  if (done) return;
  done = true;
  if (std::getenv("MESA_CUDA_OCC") == nullptr) return;
  int blocks = 0;
  cudaFuncAttributes at{};
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, fn, kCgThreads, dyn_bytes) !=
          cudaSuccess ||
      cudaFuncGetAttributes(&at, fn) != cudaSuccess) {
    std::printf("OCC %s: query failed\n", name);
    return;
  }
  std::printf(
      "OCC %s DP=%d wgmma=%d: %d CTAs/SM, %d regs, static smem %zu B, dynamic %d B, local %zu B\n",
      name, dp, wgmma ? 1 : 0, blocks, at.numRegs, at.sharedSizeBytes, dyn_bytes,
      at.localSizeBytes);
}

// Host: whether the current device is a Hopper part (the only one that runs the sm_90a code).
inline bool CgDeviceIsSm90() {
  int dev = 0, major = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
    return false;
  return major == 9;
}

template <int DP>
struct CgVec {
  float v[DP / 8][4];
};

// Builds the fp16 A fragment for k-step ks from a row-scaled accumulator-layout vector.
template <int DP>
__device__ __forceinline__ void MakeAFrag(uint32_t a[4], const CgVec<DP>& p, int ks, float s0,
                                          float s1) {
  a[0] = PackHalf2(p.v[2 * ks][0] * s0, p.v[2 * ks][1] * s0);
  a[1] = PackHalf2(p.v[2 * ks][2] * s1, p.v[2 * ks][3] * s1);
  a[2] = PackHalf2(p.v[2 * ks + 1][0] * s0, p.v[2 * ks + 1][1] * s0);
  a[3] = PackHalf2(p.v[2 * ks + 1][2] * s1, p.v[2 * ks + 1][3] * s1);
}

// Scores (16 x 64, accumulator layout) -> fp16 A fragments over the key index of (S ⊙ M),
// M[t,i] = e^{b_t - b_i} beta_i [i <= t]. Only key tiles kk <= warp are meaningful.
__device__ __forceinline__ void MaskScores(uint32_t sfrag[4][4], const float sacc[8][4],
                                           const float* s_b2, const float* s_beta, int warp,
                                           int lane) {
  const int g = lane >> 2, c = lane & 3;
  const int t0 = warp * 16 + g, t1 = t0 + 8;
  const float bt0 = s_b2[t0], bt1 = s_b2[t1];
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    if (kk <= warp) {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int i0 = kk * 16 + hh * 8 + 2 * c, i1 = i0 + 1;
        const float bi0 = s_b2[i0], bi1 = s_b2[i1], be0 = s_beta[i0], be1 = s_beta[i1];
        const float* sa = sacc[2 * kk + hh];
        const float m00 = i0 <= t0 ? exp2f(bt0 - bi0) * be0 : 0.f;
        const float m01 = i1 <= t0 ? exp2f(bt0 - bi1) * be1 : 0.f;
        const float m10 = i0 <= t1 ? exp2f(bt1 - bi0) * be0 : 0.f;
        const float m11 = i1 <= t1 ? exp2f(bt1 - bi1) * be1 : 0.f;
        sfrag[kk][2 * hh] = PackHalf2(sa[0] * m00, sa[1] * m01);
        sfrag[kk][2 * hh + 1] = PackHalf2(sa[2] * m10, sa[3] * m11);
      }
    }
  }
}

// acc += (S ⊙ M) Val over the causal key tiles; Val is a CM tile stored [key][DP].
template <int DP>
__device__ __forceinline__ void AddMaskedTimesVal(CgVec<DP>& acc, const uint32_t sfrag[4][4],
                                                  const __half* s_val, int warp, int lane) {
  constexpr int NT = DP / 8;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    if (kk <= warp) {
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        uint32_t b[4];
        LoadB_KN_Cm<DP>(b, s_val, kk * 16, np * 16, lane);
        Mma16816(acc.v[2 * np], sfrag[kk], b[0], b[1]);
        Mma16816(acc.v[2 * np + 1], sfrag[kk], b[2], b[3]);
      }
    }
  }
}

// acc = diag(rs) ((P diag(sc)) Mat) + (((P diag(sc)) Key^T) ⊙ M) Val for this warp's 16 rows,
// mma.sync on CM tiles (Mat DP x DP, Key and Val 64 x DP). kMatKN: Mat is stored [k][n], else
// [n][k]. Only the causal part is computed: rows of warp w need key rows i < 16(w+1).
template <int DP, bool kMatKN>
__device__ __forceinline__ void ApplyChunkOperator(CgVec<DP>& acc, const CgVec<DP>& p, float sc0,
                                                   float sc1, float rs0, float rs1,
                                                   const __half* s_mat, const __half* s_key,
                                                   const __half* s_val, const float* s_b2,
                                                   const float* s_beta, int warp, int lane) {
  constexpr int NT = DP / 8;
  float sacc[8][4];
#pragma unroll
  for (int i = 0; i < 8; ++i) sacc[i][0] = sacc[i][1] = sacc[i][2] = sacc[i][3] = 0.f;
#pragma unroll
  for (int ks = 0; ks < DP / 16; ++ks) {
    uint32_t a[4];
    MakeAFrag<DP>(a, p, ks, sc0, sc1);
#pragma unroll
    for (int np = 0; np < 4; ++np) {
      if (np <= warp) {
        uint32_t b[4];
        LoadB_NK_Cm<DP>(b, s_key, np * 16, ks * 16, lane);
        Mma16816(sacc[2 * np], a, b[0], b[1]);
        Mma16816(sacc[2 * np + 1], a, b[2], b[3]);
      }
    }
  }
  uint32_t sfrag[4][4];
  MaskScores(sfrag, sacc, s_b2, s_beta, warp, lane);
#pragma unroll
  for (int n = 0; n < NT; ++n) acc.v[n][0] = acc.v[n][1] = acc.v[n][2] = acc.v[n][3] = 0.f;
#pragma unroll
  for (int ks = 0; ks < DP / 16; ++ks) {
    uint32_t a[4];
    MakeAFrag<DP>(a, p, ks, sc0, sc1);
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t b[4];
      if constexpr (kMatKN) {
        LoadB_KN_Cm<DP>(b, s_mat, ks * 16, np * 16, lane);
      } else {
        LoadB_NK_Cm<DP>(b, s_mat, np * 16, ks * 16, lane);
      }
      Mma16816(acc.v[2 * np], a, b[0], b[1]);
      Mma16816(acc.v[2 * np + 1], a, b[2], b[3]);
    }
  }
#pragma unroll
  for (int n = 0; n < NT; ++n) {
    acc.v[n][0] *= rs0;
    acc.v[n][1] *= rs0;
    acc.v[n][2] *= rs1;
    acc.v[n][3] *= rs1;
  }
  AddMaskedTimesVal<DP>(acc, sfrag, s_val, warp, lane);
}

// ---------------------------------------------------------------------------------------------
// wgmma operator pieces (sm_90a; the wgmma CG below). Earlier designs and their timings: NOTES.md.

// K^T as a CM tile stored [DP][64 keys] (K-major over the keys: the B operand of (S ⊙ M) K), from
// the staged K tile. Call after K is staged and a barrier; the caller's next barrier (with the
// async-proxy fence the CG issues every iteration) publishes it.
template <int DP>
__device__ __forceinline__ void TransposeKeyTile(__half* s_kt, const __half* s_key) {
  for (int idx = threadIdx.x; idx < DP * (kChunk / 2); idx += blockDim.x) {
    const int d = idx / (kChunk / 2), key = (idx % (kChunk / 2)) * 2;
    const __half2 v = __halves2half2(s_key[CmOff<DP>(key, d)], s_key[CmOff<DP>(key + 1, d)]);
    *reinterpret_cast<__half2*>(s_kt + CmOff<kChunk>(d, key)) = v;
  }
}

// Writes P diag(sc) (fp16) for this warp's 16 rows to the CM tile s_p with stmatrix (8 per thread
// at DP = 128 instead of 64 32-bit stores). Generic-proxy writes: fence + barrier before wgmma.
template <int DP>
__device__ __forceinline__ void StorePTile(__half* s_p, const CgVec<DP>& p, float sc0, float sc1,
                                           int warp, int lane) {
  const int mi = lane >> 3, rr = lane & 7;
  __half* base = s_p + CmOff<DP>(warp * 16 + (mi & 1) * 8 + rr, (mi >> 1) * 8);
#pragma unroll
  for (int n = 0; n < DP / 8; n += 2) {
    uint32_t v[4];
    v[0] = PackHalf2(p.v[n][0] * sc0, p.v[n][1] * sc0);
    v[1] = PackHalf2(p.v[n][2] * sc1, p.v[n][3] * sc1);
    v[2] = PackHalf2(p.v[n + 1][0] * sc0, p.v[n + 1][1] * sc0);
    v[3] = PackHalf2(p.v[n + 1][2] * sc1, p.v[n + 1][3] * sc1);
    StMatrixX4(base + n * 64, v);  // CmOff: +64 halves per 8 columns
  }
}

// Row sums of a ⊙ b for the thread's two rows (g and g+8), reduced over the quad.
template <int DP>
__device__ __forceinline__ void RowDot(const CgVec<DP>& a, const CgVec<DP>& b, float& d0,
                                       float& d1) {
  float s0 = 0.f, s1 = 0.f;
#pragma unroll
  for (int n = 0; n < DP / 8; ++n) {
    s0 += a.v[n][0] * b.v[n][0] + a.v[n][1] * b.v[n][1];
    s1 += a.v[n][2] * b.v[n][2] + a.v[n][3] * b.v[n][3];
  }
  d0 = QuadSum(s0);
  d1 = QuadSum(s1);
}

__device__ __forceinline__ float SafeRsqrt(float x) { return x > 0.f ? rsqrtf(x) : 0.f; }

// The CG direction update p = r + beta p of both CG loops (beta per row: be0 for row g, be1 for
// g+8).
template <int DP>
__device__ __forceinline__ void CgNextDirection(CgVec<DP>& p, const CgVec<DP>& r, float be0,
                                                float be1) {
#pragma unroll
  for (int n = 0; n < DP / 8; ++n) {
    p.v[n][0] = r.v[n][0] + be0 * p.v[n][0];
    p.v[n][1] = r.v[n][1] + be0 * p.v[n][1];
    p.v[n][2] = r.v[n][2] + be1 * p.v[n][2];
    p.v[n][3] = r.v[n][3] + be1 * p.v[n][3];
  }
}

// Thread-private fp32 x in shared memory: element (n, e) of thread tid at (n*4+e)*128 + tid
// (conflict-free: consecutive threads, consecutive words).
__device__ __forceinline__ int XIndex(int n, int e) {
  return (n * 4 + e) * kCgThreads + threadIdx.x;
}

// Runs the CG for this warp's rows: on entry r = p = rhs, x (smem) = 0. Per MATH/mesa_types.h:
// x0 = 0, per-token scalars, freeze on non-positive curvature or zero residual, optional
// tolerance ||r|| <= tol ||r0||. Returns the number of x updates for rows g and g+8. The mma.sync
// fallback (sm_80, MESA_CUDA_NO_WGMMA=1): the operator per warp on mma.sync (H_c = Mat, Key = Val =
// K).
template <int DP>
__device__ __forceinline__ void RunCg(CgVec<DP>& p, CgVec<DP>& r, float* s_x, const __half* s_h,
                                      const __half* s_k, const float* s_b2, const float* s_beta,
                                      const float* s_lambda, int max_steps, float tol, int warp,
                                      int lane, int& steps0, int& steps1) {
  constexpr int NT = DP / 8;
  const int g = lane >> 2, c = lane & 3;
  const float rs0 = exp2f(s_b2[warp * 16 + g]), rs1 = exp2f(s_b2[warp * 16 + g + 8]);
  float d_old0, d_old1;
  RowDot<DP>(r, r, d_old0, d_old1);
  const float stop0 = tol * tol * d_old0, stop1 = tol * tol * d_old1;
  bool active0 = d_old0 > 0.f, active1 = d_old1 > 0.f;
  steps0 = steps1 = 0;
  for (int it = 0; it < max_steps; ++it) {
    if (!__syncthreads_or(active0 || active1)) break;  // CTA-uniform exit
    const float sc0 = active0 ? rsqrtf(d_old0) : 0.f, sc1 = active1 ? rsqrtf(d_old1) : 0.f;
    CgVec<DP> w;
    ApplyChunkOperator<DP, false>(w, p, sc0, sc1, rs0, rs1, s_h, s_k, s_k, s_b2, s_beta, warp,
                                  lane);
    const float un0 = active0 ? sqrtf(d_old0) : 0.f, un1 = active1 ? sqrtf(d_old1) : 0.f;
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      const float2 lam = *reinterpret_cast<const float2*>(s_lambda + n * 8 + 2 * c);
      w.v[n][0] = active0 ? w.v[n][0] * un0 + lam.x * p.v[n][0] : 0.f;
      w.v[n][1] = active0 ? w.v[n][1] * un0 + lam.y * p.v[n][1] : 0.f;
      w.v[n][2] = active1 ? w.v[n][2] * un1 + lam.x * p.v[n][2] : 0.f;
      w.v[n][3] = active1 ? w.v[n][3] * un1 + lam.y * p.v[n][3] : 0.f;
    }
    float pw0, pw1;
    RowDot<DP>(p, w, pw0, pw1);
    if (!(pw0 > 0.f)) active0 = false;
    if (!(pw1 > 0.f)) active1 = false;
    const float al0 = active0 ? d_old0 / pw0 : 0.f, al1 = active1 ? d_old1 / pw1 : 0.f;
    float rr0 = 0.f, rr1 = 0.f;
#pragma unroll
    for (int n = 0; n < NT; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float al = e < 2 ? al0 : al1;
        s_x[XIndex(n, e)] += al * p.v[n][e];
        r.v[n][e] -= al * w.v[n][e];
      }
      rr0 += r.v[n][0] * r.v[n][0] + r.v[n][1] * r.v[n][1];
      rr1 += r.v[n][2] * r.v[n][2] + r.v[n][3] * r.v[n][3];
    }
    const float dn0 = QuadSum(rr0), dn1 = QuadSum(rr1);
    steps0 += active0;
    steps1 += active1;
    if (!(dn0 > stop0)) active0 = false;  // also freezes an exactly-zero residual (tol = 0)
    if (!(dn1 > stop1)) active1 = false;
    const float be0 = active0 ? dn0 / d_old0 : 0.f, be1 = active1 ? dn1 / d_old1 : 0.f;
    CgNextDirection<DP>(p, r, be0, be1);
    d_old0 = dn0;
    d_old1 = dn1;
  }
}

// ---------------------------------------------------------------------------------------------
// wgmma CG (sm_90a path only): all three operator products on wgmma, few issued instructions per
// step.

// x layout: mma.sync fallback one float per (n, e) (XIndex); wgmma one float4 per n at
// (n * 128 + tid) * 4 floats (LDS.128/STS.128, conflict-free: consecutive threads, consecutive
// 16-byte words).
template <int DP, bool kWgmma>
__device__ __forceinline__ void XZero(float* s_x) {
  if constexpr (kWgmma) {
    float4* x4 = reinterpret_cast<float4*>(s_x) + threadIdx.x;
#pragma unroll
    for (int n = 0; n < DP / 8; ++n) x4[n * kCgThreads] = make_float4(0.f, 0.f, 0.f, 0.f);
  } else {
#pragma unroll
    for (int n = 0; n < DP / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) s_x[XIndex(n, e)] = 0.f;
  }
}
template <int DP, bool kWgmma>
__device__ __forceinline__ void XRead(CgVec<DP>& x, const float* s_x) {
  if constexpr (kWgmma) {
    const float4* x4 = reinterpret_cast<const float4*>(s_x) + threadIdx.x;
#pragma unroll
    for (int n = 0; n < DP / 8; ++n) {
      const float4 v = x4[n * kCgThreads];
      x.v[n][0] = v.x;
      x.v[n][1] = v.y;
      x.v[n][2] = v.z;
      x.v[n][3] = v.w;
    }
  } else {
#pragma unroll
    for (int n = 0; n < DP / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) x.v[n][e] = s_x[XIndex(n, e)];
  }
}

// (S ⊙ M) as fp16 A fragments for all four key tiles (zero above the warp's diagonal tile), for the
// register-A wgmma; the causal test only on the diagonal tile (kk == warp), off-diagonal tiles
// (kk < warp) are entirely causal.
__device__ __forceinline__ void MaskScoresWgmma(uint32_t sfrag[4][4], const float sacc[8][4],
                                                const float* s_b2, const float* s_beta, int warp,
                                                int lane) {
  const int g = lane >> 2, c = lane & 3;
  const int t0 = warp * 16 + g, t1 = t0 + 8;
  const float bt0 = s_b2[t0], bt1 = s_b2[t1];
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    if (kk < warp) {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int i0 = kk * 16 + hh * 8 + 2 * c;
        const float2 bi = *reinterpret_cast<const float2*>(s_b2 + i0);
        const float2 be = *reinterpret_cast<const float2*>(s_beta + i0);
        const float* sa = sacc[2 * kk + hh];
        sfrag[kk][2 * hh] = PackHalf2(sa[0] * (Ex2Approx(bt0 - bi.x) * be.x),
                                      sa[1] * (Ex2Approx(bt0 - bi.y) * be.y));
        sfrag[kk][2 * hh + 1] = PackHalf2(sa[2] * (Ex2Approx(bt1 - bi.x) * be.x),
                                          sa[3] * (Ex2Approx(bt1 - bi.y) * be.y));
      }
    } else if (kk == warp) {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int i0 = kk * 16 + hh * 8 + 2 * c, i1 = i0 + 1;
        const float2 bi = *reinterpret_cast<const float2*>(s_b2 + i0);
        const float2 be = *reinterpret_cast<const float2*>(s_beta + i0);
        const float* sa = sacc[2 * kk + hh];
        const float m00 = i0 <= t0 ? Ex2Approx(bt0 - bi.x) * be.x : 0.f;
        const float m01 = i1 <= t0 ? Ex2Approx(bt0 - bi.y) * be.y : 0.f;
        const float m10 = i0 <= t1 ? Ex2Approx(bt1 - bi.x) * be.x : 0.f;
        const float m11 = i1 <= t1 ? Ex2Approx(bt1 - bi.y) * be.y : 0.f;
        sfrag[kk][2 * hh] = PackHalf2(sa[0] * m00, sa[1] * m01);
        sfrag[kk][2 * hh + 1] = PackHalf2(sa[2] * m10, sa[3] * m11);
      }
    } else {
      sfrag[kk][0] = sfrag[kk][1] = sfrag[kk][2] = sfrag[kk][3] = 0u;
    }
  }
}

// Low descriptor words of the four wgmma operand tiles, computed once per CTA (WgmmaDescLo). One
// k-step (16 columns = two core matrices = 128 halves = 256 bytes) adds 256 >> 4 = 16.
struct CgDescLo {
  uint32_t p, key, mat, kt;
};

// wgmma operator: acc = diag(rs) (P H_c^T) + ((P K^T) ⊙ M) K for the CTA's 64 rows, all three
// products on wgmma. P (already scaled, fp16) is in s_p. Group 1: scores S = P K^T; group 2:
// P H_c^T. The mask of S runs while group 2 is in flight; then acc *= rs and one more chain
// acc += (S ⊙ M) K with A = S ⊙ M from registers and B = K^T (s_kt). Must be called by all 128
// threads after the barrier that publishes s_p. Loop-invariant descriptors: per wgmma one add to a
// low word instead of the mask/shift/or chain on the uniform datapath (building one takes ≈ 4
// instructions, and 36 descriptors per step were serialised in front of each HGMMA).
template <int DP>
__device__ __forceinline__ void ApplyCgOperatorWgmma(CgVec<DP>& acc, const CgDescLo& dl, float rs0,
                                                     float rs1, const float* s_b2,
                                                     const float* s_beta, int warp, int lane) {
#if MESA_HAS_WGMMA
  constexpr int NT = DP / 8;
  float sacc[8][4];
#pragma unroll
  for (int i = 0; i < 8; ++i) sacc[i][0] = sacc[i][1] = sacc[i][2] = sacc[i][3] = 0.f;
#pragma unroll
  for (int n = 0; n < NT; ++n) acc.v[n][0] = acc.v[n][1] = acc.v[n][2] = acc.v[n][3] = 0.f;
  constexpr uint32_t kSbo = DP * 16, kSboKt = kChunk * 16;
  WgmmaFence();
#pragma unroll
  for (int ks = 0; ks < DP / 16; ++ks) {
    WgmmaM64N64K16(sacc, WgmmaDescFromLo(dl.p + ks * 16, kSbo),
                   WgmmaDescFromLo(dl.key + ks * 16, kSbo));
  }
  WgmmaCommit();
#pragma unroll
  for (int ks = 0; ks < DP / 16; ++ks) {
    const uint64_t da = WgmmaDescFromLo(dl.p + ks * 16, kSbo),
                   db = WgmmaDescFromLo(dl.mat + ks * 16, kSbo);
    if constexpr (DP == 128) {
      WgmmaM64N128K16(acc.v, da, db);
    } else {
      WgmmaM64N64K16(acc.v, da, db);
    }
  }
  WgmmaCommit();
  WgmmaWaitOne();
  FenceAcc(sacc);
  uint32_t sfrag[4][4];
  MaskScoresWgmma(sfrag, sacc, s_b2, s_beta, warp, lane);
  WgmmaWaitAll();
  FenceAcc(acc.v);
#pragma unroll
  for (int n = 0; n < NT; ++n) {
    acc.v[n][0] *= rs0;
    acc.v[n][1] *= rs0;
    acc.v[n][2] *= rs1;
    acc.v[n][3] *= rs1;
  }
  WgmmaFence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const uint64_t db = WgmmaDescFromLo(dl.kt + kk * 16, kSboKt);
    if constexpr (DP == 128) {
      WgmmaM64N128K16RegA(acc.v, sfrag[kk], db);
    } else {
      WgmmaM64N64K16RegA(acc.v, sfrag[kk], db);
    }
  }
  WgmmaCommit();
  WgmmaWaitAll();
  FenceAcc(acc.v);
#else
  (void)acc;
  (void)dl;
  (void)rs0;
  (void)rs1;
  (void)s_b2;
  (void)s_beta;
  (void)warp;
  (void)lane;
#endif
}

// The CG loop of RunCg with the wgmma operator: P is written (stmatrix) before the loop's only
// barrier, which also carries the CTA-uniform exit test. Scalars: with sc = 1/sqrt(d_old) (rsqrtf,
// exact for subnormal d_old): un = d_old sc = sqrt(d_old), alpha = 1/(pw sc^2) = d_old/pw and beta
// = dn sc^2 = dn/d_old: one MUFU op each, no IEEE division/sqrt slow paths (they once took 7% of
// the stall samples: the residual of a converging row becomes subnormal). pw sc^2 >= lambda_min is
// a normal number. The λ combine has no 'active' selects (an inactive row has sc = 0, so its A(P)
// row is 0 and w = λ p is finite; alpha = 0 leaves x and r unchanged). x is updated as float4.
// Without wgmma (sm_80 pass) the loop body is empty: the host never launches the wgmma kernels
// there.
template <int DP>
__device__ __forceinline__ void RunCgWgmma(CgVec<DP>& p, CgVec<DP>& r, float* s_x, __half* s_p,
                                           const __half* s_h, const __half* s_k, const __half* s_kt,
                                           const float* s_b2, const float* s_beta,
                                           const float* s_lambda, int max_steps, float tol,
                                           int warp, int lane, int& steps0, int& steps1) {
  constexpr int NT = DP / 8;
  const int g = lane >> 2, c = lane & 3;
  const float rs0 = exp2f(s_b2[warp * 16 + g]), rs1 = exp2f(s_b2[warp * 16 + g + 8]);
  CgDescLo dl;
  dl.p = WgmmaDescLo(s_p, 128);
  dl.key = WgmmaDescLo(s_k, 128);
  dl.mat = WgmmaDescLo(s_h, 128);
  dl.kt = WgmmaDescLo(s_kt, 128);
  float4* x4 = reinterpret_cast<float4*>(s_x) + threadIdx.x;
  float d_old0, d_old1;
  RowDot<DP>(r, r, d_old0, d_old1);
  const float stop0 = tol * tol * d_old0, stop1 = tol * tol * d_old1;
  bool active0 = d_old0 > 0.f, active1 = d_old1 > 0.f;
  steps0 = steps1 = 0;
  for (int it = 0; it < max_steps; ++it) {
    const float sc0 = active0 ? rsqrtf(d_old0) : 0.f, sc1 = active1 ? rsqrtf(d_old1) : 0.f;
#if MESA_HAS_WGMMA
    StorePTile<DP>(s_p, p, sc0, sc1, warp, lane);
    FenceProxyAsyncSmem();
#endif
    if (!__syncthreads_or(active0 || active1)) break;  // CTA-uniform (wgmma is collective)
    CgVec<DP> w;
    ApplyCgOperatorWgmma<DP>(w, dl, rs0, rs1, s_b2, s_beta, warp, lane);
    const float un0 = d_old0 * sc0, un1 = d_old1 * sc1;
    float pw0 = 0.f, pw1 = 0.f, pw0b = 0.f, pw1b = 0.f;
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      const float2 lam = *reinterpret_cast<const float2*>(s_lambda + n * 8 + 2 * c);
      w.v[n][0] = w.v[n][0] * un0 + lam.x * p.v[n][0];
      w.v[n][1] = w.v[n][1] * un0 + lam.y * p.v[n][1];
      w.v[n][2] = w.v[n][2] * un1 + lam.x * p.v[n][2];
      w.v[n][3] = w.v[n][3] * un1 + lam.y * p.v[n][3];
      pw0 += p.v[n][0] * w.v[n][0];
      pw0b += p.v[n][1] * w.v[n][1];
      pw1 += p.v[n][2] * w.v[n][2];
      pw1b += p.v[n][3] * w.v[n][3];
    }
    pw0 = QuadSum(pw0 + pw0b);
    pw1 = QuadSum(pw1 + pw1b);
    if (!(pw0 > 0.f)) active0 = false;
    if (!(pw1 > 0.f)) active1 = false;
    const float al0 = active0 ? RcpApprox((pw0 * sc0) * sc0) : 0.f;
    const float al1 = active1 ? RcpApprox((pw1 * sc1) * sc1) : 0.f;
    float rr0 = 0.f, rr1 = 0.f, rr0b = 0.f, rr1b = 0.f;
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      float4 xv = x4[n * kCgThreads];
      xv.x += al0 * p.v[n][0];
      xv.y += al0 * p.v[n][1];
      xv.z += al1 * p.v[n][2];
      xv.w += al1 * p.v[n][3];
      x4[n * kCgThreads] = xv;
      r.v[n][0] -= al0 * w.v[n][0];
      r.v[n][1] -= al0 * w.v[n][1];
      r.v[n][2] -= al1 * w.v[n][2];
      r.v[n][3] -= al1 * w.v[n][3];
      rr0 += r.v[n][0] * r.v[n][0];
      rr0b += r.v[n][1] * r.v[n][1];
      rr1 += r.v[n][2] * r.v[n][2];
      rr1b += r.v[n][3] * r.v[n][3];
    }
    const float dn0 = QuadSum(rr0 + rr0b), dn1 = QuadSum(rr1 + rr1b);
    steps0 += active0;
    steps1 += active1;
    if (!(dn0 > stop0)) active0 = false;  // also freezes an exactly-zero residual (tol = 0)
    if (!(dn1 > stop1)) active1 = false;
    const float be0 = active0 ? (dn0 * sc0) * sc0 : 0.f, be1 = active1 ? (dn1 * sc1) * sc1 : 0.f;
    CgNextDirection<DP>(p, r, be0, be1);
    d_old0 = dn0;
    d_old1 = dn1;
  }
}

// Loads this thread's two rows (g, g+8 of warp's 16) of a token-major tensor into accumulator
// layout; zero for padding rows/columns.
template <int DP, typename T>
__device__ __forceinline__ void LoadRowsAcc(CgVec<DP>& out, const T* src, int64_t tok0, int len,
                                            int heads, int h, int D, int warp, int lane) {
  const int g = lane >> 2, c = lane & 3;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = warp * 16 + g + half * 8;
    const bool ok = row < len;
    const T* base = src + ((tok0 + row) * heads + h) * static_cast<int64_t>(D);
#pragma unroll
    for (int n = 0; n < DP / 8; ++n) {
      const int col = n * 8 + 2 * c;
      float2 f = make_float2(0.f, 0.f);
      if (ok && col < D) f = Load2(base + col);
      out.v[n][2 * half] = f.x;
      out.v[n][2 * half + 1] = f.y;
    }
  }
}

template <int DP, typename T>
__device__ __forceinline__ void StoreRowsAcc(const CgVec<DP>& in, T* dst, int64_t tok0, int len,
                                             int heads, int h, int D, int warp, int lane,
                                             float s0 = 1.f, float s1 = 1.f) {
  const int g = lane >> 2, c = lane & 3;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = warp * 16 + g + half * 8;
    if (row >= len) continue;
    const float s = half ? s1 : s0;
    T* base = dst + ((tok0 + row) * heads + h) * static_cast<int64_t>(D);
#pragma unroll
    for (int n = 0; n < DP / 8; ++n) {
      const int col = n * 8 + 2 * c;
      if (col < D) Store2(base + col, in.v[n][2 * half] * s, in.v[n][2 * half + 1] * s);
    }
  }
}

}  // namespace mesa::kernels::cuda

#endif  // MESANET_KERNELS_MESA_CUDA_MESA_CG_CUH_
