// Backward kernels (implicit differentiation, docs/math.md §3):
//   CgBackwardKernel : U = G_t^T e_t fused with the second CG solve e* = (H_t+Λ)^{-1} U; writes
//                      dq = e*, e*/s (fp16), dlambda, and the row term r = e.o - e*.H q*.
//   GlaBackwardKernel: per-chunk GLA backward for dv, dk, dbeta and the dlog_gamma summands.
//   GateScanKernel   : reverse cumsum over the sequence -> dlog_gamma.
//   GradMaxKernel    : per-(sequence, head) power-of-two scale of do for fp16 operands, read
//                      in token pieces (+ GradScaleFinishKernel).
#include <algorithm>

#include "kernels/common/cuda/ordered_sum.cuh"
#include "kernels/mesa/cuda/mesa_cg.cuh"

namespace mesa::kernels::cuda {
namespace {

// ---------------------------------------------------------------------------------------------
// The largest |do| of each (sequence, head), in pieces: CTA z of a (sequence, head) reads the z-th
// of gridDim.z token ranges and folds its maximum into max_bits by an integer atomicMax on the
// float's bits (order-free for non-negative floats, so the result is deterministic). Pieces keep
// every SM busy when there are few sequences (one long one: a CTA per (sequence, head) read 32k
// tokens alone). NaN is skipped as fmaxf skips it; infinity wins and GradScaleFinish maps it to 1.
template <typename T>
__global__ void GradMaxKernel(KernelProblem prob, const T* d_o, unsigned* max_bits) {
  const int seq = blockIdx.x, h = blockIdx.y, H = prob.heads, D = prob.head_dim;
  const int4 sinfo = prob.seqs[seq];
  const int per = (sinfo.y + gridDim.z - 1) / gridDim.z;
  const int t0 = blockIdx.z * per, t1 = min(sinfo.y, t0 + per);
  float m = 0.f;
  const int groups = D / 8;
  for (int idx = t0 * groups + threadIdx.x; idx < t1 * groups; idx += blockDim.x) {
    const int t = idx / groups, gi = idx % groups;
    float f[8];
    Load8(d_o + ((static_cast<int64_t>(sinfo.x) + t) * H + h) * D + gi * 8, f);
#pragma unroll
    for (int i = 0; i < 8; ++i) m = fmaxf(m, fabsf(f[i]));
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if ((threadIdx.x & 31) == 0 && m > 0.f) {
    atomicMax(max_bits + static_cast<size_t>(seq) * H + h, __float_as_uint(m));
  }
}

// scale = the power of two nearest the largest |do| (1 when it is 0 or not finite), in place.
__global__ void GradScaleFinishKernel(float* scale, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float m = scale[i];  // the bits GradMaxKernel left, read as a float
  scale[i] = (m > 0.f && isfinite(m)) ? exp2f(rintf(log2f(m))) : 1.f;
}

// ---------------------------------------------------------------------------------------------
// kWgmma: the wgmma CG (sm_90a; launched on compute capability 9.x only); else the mma.sync
// fallback (sm_80 devices, MESA_CUDA_NO_WGMMA=1).
template <int DP, typename T, bool kWgmma>
__global__ void __launch_bounds__(kCgThreads, 2)
    CgBackwardKernel(KernelProblem prob, CgBackwardArgs args) {
  using L = CgSmemLayout<DP, kWgmma>;
  constexpr int NT = DP / 8;
  extern __shared__ __align__(16) unsigned char smem[];
  __half* s_mat = reinterpret_cast<__half*>(smem + L::kMat);
  __half* s_key = reinterpret_cast<__half*>(smem + L::kKey);
  __half* s_p = reinterpret_cast<__half*>(smem + L::kP);
  float* s_x = reinterpret_cast<float*>(smem + L::kX);
  __half* s_vt = s_p;
  float* s_b2 = reinterpret_cast<float*>(smem + L::kB2);
  float* s_beta = reinterpret_cast<float*>(smem + L::kBeta);
  float* s_lambda = reinterpret_cast<float*>(smem + L::kLambda);
  __half* s_kt = reinterpret_cast<__half*>(smem + L::kKt);

  const int chunk = blockIdx.x, h = blockIdx.y;
  const int4 info = prob.chunks[chunk];
  const int64_t tok0 = info.y;
  const int len = info.z;
  const int H = prob.heads, D = prob.head_dim;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, c = lane & 3;
  const size_t state_off = (static_cast<size_t>(chunk) * H + h) * DP * DP;
  const float grad_scale = args.scale[static_cast<size_t>(info.x) * H + h];

  for (int d = threadIdx.x; d < DP; d += blockDim.x)
    s_lambda[d] = d < D ? args.lambda[h * D + d] : 1.f;
  if constexpr (kWgmma) {
    StageStateTileCmAsync<DP, kCgThreads>(s_mat,
                                          args.gc + state_off);  // in flight while K, V are staged
    StageTokenTileCmBatched<DP, kCgThreads>(s_key, static_cast<const T*>(args.k), tok0, len, H, h,
                                            D);
    StageTokenTileCmBatched<DP, kCgThreads>(s_vt, static_cast<const T*>(args.v), tok0, len, H, h,
                                            D);
    CpAsyncWaitAll();  // published by the barrier in LoadChunkGatesWith
    // x's smem as the gates' scratch (x is zeroed below): no static smem, 2 CTAs/SM.
    LoadChunkGatesWith(s_x, s_b2, s_beta, args.log_gamma, args.beta, tok0, len, H, h);  // syncs
    TransposeKeyTile<DP>(s_kt, s_key);  // published by the barriers below
  } else {
    StageTokenTileCm<DP>(s_key, static_cast<const T*>(args.k), tok0, len, H, h, D, 1.f, nullptr);
    StageTokenTileCm<DP>(s_vt, static_cast<const T*>(args.v), tok0, len, H, h, D, 1.f, nullptr);
    StageStateTileCm<DP>(s_mat, args.gc + state_off);
    LoadChunkGates(s_b2, s_beta, args.log_gamma, args.beta, tok0, len, H, h);  // syncs
  }

  // U = diag(e^b) E G_c + ((E V^T) ⊙ M) K  (rows: u_t = G_t^T e_t).
  const float rs0 = exp2f(s_b2[warp * 16 + g]), rs1 = exp2f(s_b2[warp * 16 + g + 8]);
  CgVec<DP> u;
  float uq0, uq1;
  {
    CgVec<DP> e;
    LoadRowsAcc<DP>(e, static_cast<const T*>(args.d_o), tok0, len, H, h, D, warp, lane);
    float n0, n1;
    RowDot<DP>(e, e, n0, n1);
    ApplyChunkOperator<DP, true>(u, e, SafeRsqrt(n0), SafeRsqrt(n1), rs0, rs1, s_mat, s_vt, s_key,
                                 s_b2, s_beta, warp, lane);
    const float m0 = sqrtf(n0), m1 = sqrtf(n1);
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      u.v[n][0] *= m0;
      u.v[n][1] *= m0;
      u.v[n][2] *= m1;
      u.v[n][3] *= m1;
    }
    LoadRowsAcc<DP>(e, args.q_star, tok0, len, H, h, D, warp, lane);
    RowDot<DP>(u, e, uq0, uq1);  // e_t . o_t = u_t . q*_t
  }
  __syncthreads();  // G_c and V no longer read
  if constexpr (kWgmma) {
    StageStateTileCmAsync<DP, kCgThreads>(s_mat, args.hc + state_off);
    XZero<DP, kWgmma>(s_x);
    CpAsyncWaitAll();
  } else {
    StageStateTileCm<DP>(s_mat, args.hc + state_off);
    XZero<DP, kWgmma>(s_x);
  }
  __syncthreads();

  const bool solve = args.max_steps > 0;
  CgVec<DP> x;
  if (solve) {
    CgVec<DP> p = u;
    int steps0, steps1;
    if constexpr (kWgmma) {
      RunCgWgmma<DP>(p, u, s_x, s_p, s_mat, s_key, s_kt, s_b2, s_beta, s_lambda, args.max_steps,
                     args.tolerance, warp, lane, steps0, steps1);
    } else {
      RunCg<DP>(p, u, s_x, s_mat, s_key, s_b2, s_beta, s_lambda, args.max_steps, args.tolerance,
                warp, lane, steps0, steps1);
    }
    XRead<DP, kWgmma>(x, s_x);
    if (args.steps != nullptr) {
      int s = c == 0 ? steps0 + steps1 : 0;
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
      if (lane == 0 && s > 0) atomicAdd(args.steps, static_cast<unsigned long long>(s));
    }
  } else {
    x = u;  // GLA: dq = G^T e and no H terms
  }
  StoreRowsAcc<DP>(x, static_cast<T*>(args.dq), tok0, len, H, h, D, warp, lane);
  const float es = solve ? 1.f / grad_scale : 0.f;
  StoreRowsAcc<DP>(x, args.estar16, tok0, len, H, h, D, warp, lane, es, es);

  // r_t = u.q* - e*.(q - λ⊙q*)  (H_t q*_t = q_t - λ⊙q*_t for the solved system),
  // dlambda -= sum_t q* ⊙ e*.
  CgVec<DP> qs, qv;
  LoadRowsAcc<DP>(qs, args.q_star, tok0, len, H, h, D, warp, lane);
  LoadRowsAcc<DP>(qv, static_cast<const T*>(args.q), tok0, len, H, h, D, warp, lane);
  float hq0 = 0.f, hq1 = 0.f;
#pragma unroll
  for (int n = 0; n < NT; ++n) {
    const float2 lam = *reinterpret_cast<const float2*>(s_lambda + n * 8 + 2 * c);
    hq0 += x.v[n][0] * (qv.v[n][0] - lam.x * qs.v[n][0]) +
           x.v[n][1] * (qv.v[n][1] - lam.y * qs.v[n][1]);
    hq1 += x.v[n][2] * (qv.v[n][2] - lam.x * qs.v[n][2]) +
           x.v[n][3] * (qv.v[n][3] - lam.y * qs.v[n][3]);
  }
  hq0 = solve ? QuadSum(hq0) : 0.f;
  hq1 = solve ? QuadSum(hq1) : 0.f;
  if (c == 0) {
    const int row0 = warp * 16 + g;
    if (row0 < len) args.r[(tok0 + row0) * H + h] = uq0 - hq0;
    if (row0 + 8 < len) args.r[(tok0 + row0 + 8) * H + h] = uq1 - hq1;
  }
  if (solve) {
#pragma unroll
    for (int n = 0; n < NT; ++n) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        float s = x.v[n][j] * qs.v[n][j] + x.v[n][j + 2] * qs.v[n][j + 2];
        s += __shfl_xor_sync(0xffffffffu, s, 4);
        s += __shfl_xor_sync(0xffffffffu, s, 8);
        s += __shfl_xor_sync(0xffffffffu, s, 16);
        const int col = n * 8 + 2 * c + j;
        // This chunk and warp's part; LaunchCgBackward sums the parts in a fixed order.
        if (g == 0 && col < D) {
          args.dlambda_partials[((static_cast<size_t>(chunk) * kCgWarps + warp) * H + h) * D +
                                col] = -s;
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// GLA backward for one (chunk, head). Rows i of the chunk (warp w owns 16w..16w+15), columns t:
//   S1 = (K Q*^T) ⊙ Z,  Z[i,t] = e^{b_t - b_i} [t >= i],  dec_i = e^{b_last - b_i}
//   A = dec ⊙ (K dG^T) + S1 E                       -> dv = beta A
//   B = dec ⊙ (K dH^T) - S1 E*
//   C = dec ⊙ (V dG + K dH) + ((V E^T - K E*^T) ⊙ Z) Q*   -> dk = beta (B + C)
//   dbeta = v.A + k.B,  dlog_gamma summand = r - beta dbeta.
// E = do/s, E* = e*/s, dG/dH are gradients w.r.t. the state after the chunk (scaled units).

// sacc (16 x 64 over t) += A_rows(16w.., over DP) * Bt^T where Bt is stored [t][DP]; only
// t-tiles >= 16w (anti-causal).
template <int DP>
__device__ __forceinline__ void RowScores(float sacc[8][4], const __half* s_arows,
                                          const __half* s_bt, bool negate, int warp, int lane) {
  constexpr int S = kStride<DP>;
#pragma unroll
  for (int ks = 0; ks < DP / 16; ++ks) {
    uint32_t a[4];
    LoadA_MK(a, s_arows, S, warp * 16, ks * 16, lane);
    if (negate) {
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = NegHalf2(a[i]);
    }
#pragma unroll
    for (int np = 0; np < 4; ++np) {
      if (np >= warp) {
        uint32_t b[4];
        LoadB_NK(b, s_bt, S, np * 16, ks * 16, lane);
        Mma16816(sacc[2 * np], a, b[0], b[1]);
        Mma16816(sacc[2 * np + 1], a, b[2], b[3]);
      }
    }
  }
}

// frag[kk] = fp16(sacc ⊙ Z) as A fragments over t.
__device__ __forceinline__ void MaskAntiCausal(uint32_t frag[4][4], const float sacc[8][4],
                                               const float* s_b2, int warp, int lane) {
  const int g = lane >> 2, c = lane & 3;
  const int i0 = warp * 16 + g, i1 = i0 + 8;
  const float bi0 = s_b2[i0], bi1 = s_b2[i1];
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    if (kk >= warp) {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int t0 = kk * 16 + hh * 8 + 2 * c, t1 = t0 + 1;
        const float bt0 = s_b2[t0], bt1 = s_b2[t1];
        const float* sa = sacc[2 * kk + hh];
        const float z00 = t0 >= i0 ? exp2f(bt0 - bi0) : 0.f;
        const float z01 = t1 >= i0 ? exp2f(bt1 - bi0) : 0.f;
        const float z10 = t0 >= i1 ? exp2f(bt0 - bi1) : 0.f;
        const float z11 = t1 >= i1 ? exp2f(bt1 - bi1) : 0.f;
        frag[kk][2 * hh] = PackHalf2(sa[0] * z00, sa[1] * z01);
        frag[kk][2 * hh + 1] = PackHalf2(sa[2] * z10, sa[3] * z11);
      }
    } else {
      frag[kk][0] = frag[kk][1] = frag[kk][2] = frag[kk][3] = 0u;
    }
  }
}

// The GLA backward runs 8 warps: warp w owns rows 16(w%4).. and output columns
// [col0, col0 + DP/2), col0 = (w/4) DP/2. Half-width accumulators are CgVec<DP/2>.
// acc += A_rows(16rw.., over DP) * Mat[:, col0..], Mat stored [n][k] (kNK) or [k][n].
template <int DP, bool kNK>
__device__ __forceinline__ void RowsTimesState(CgVec<DP / 2>& acc, const __half* s_arows,
                                               const __half* s_mat, int rw, int col0, int lane) {
  constexpr int S = kStride<DP>;
#pragma unroll
  for (int ks = 0; ks < DP / 16; ++ks) {
    uint32_t a[4];
    LoadA_MK(a, s_arows, S, rw * 16, ks * 16, lane);
#pragma unroll
    for (int np = 0; np < DP / 32; ++np) {
      uint32_t b[4];
      if constexpr (kNK) {
        LoadB_NK(b, s_mat, S, col0 + np * 16, ks * 16, lane);
      } else {
        LoadB_KN(b, s_mat, S, ks * 16, col0 + np * 16, lane);
      }
      Mma16816(acc.v[2 * np], a, b[0], b[1]);
      Mma16816(acc.v[2 * np + 1], a, b[2], b[3]);
    }
  }
}

// acc += frag (over t, tiles >= rw) * Tile[:, col0..], Tile stored [t][DP].
template <int DP>
__device__ __forceinline__ void FragTimesTile(CgVec<DP / 2>& acc, const uint32_t frag[4][4],
                                              const __half* s_tile, bool negate, int rw, int col0,
                                              int lane) {
  constexpr int S = kStride<DP>;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    if (kk >= rw) {
      uint32_t a[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = negate ? NegHalf2(frag[kk][i]) : frag[kk][i];
#pragma unroll
      for (int np = 0; np < DP / 32; ++np) {
        uint32_t b[4];
        LoadB_KN(b, s_tile, S, kk * 16, col0 + np * 16, lane);
        Mma16816(acc.v[2 * np], a, b[0], b[1]);
        Mma16816(acc.v[2 * np + 1], a, b[2], b[3]);
      }
    }
  }
}

template <int NC>
__device__ __forceinline__ void ZeroVec(CgVec<NC>& a) {
#pragma unroll
  for (int n = 0; n < NC / 8; ++n) a.v[n][0] = a.v[n][1] = a.v[n][2] = a.v[n][3] = 0.f;
}

template <int NC>
__device__ __forceinline__ void ScaleRows(CgVec<NC>& a, float s0, float s1) {
#pragma unroll
  for (int n = 0; n < NC / 8; ++n) {
    a.v[n][0] *= s0;
    a.v[n][1] *= s0;
    a.v[n][2] *= s1;
    a.v[n][3] *= s1;
  }
}

// Row dot (over this warp's columns) of a half-width accumulator with a padded fp16 tile's rows.
template <int DP>
__device__ __forceinline__ void RowDotTile(const CgVec<DP / 2>& a, const __half* s_tile, int rw,
                                           int col0, int lane, float& d0, float& d1) {
  constexpr int S = kStride<DP>;
  const int g = lane >> 2, c = lane & 3;
  float s0 = 0.f, s1 = 0.f;
#pragma unroll
  for (int n = 0; n < DP / 16; ++n) {
    const int col = col0 + n * 8 + 2 * c;
    const float2 x0 =
        __half22float2(*reinterpret_cast<const __half2*>(s_tile + (rw * 16 + g) * S + col));
    const float2 x1 =
        __half22float2(*reinterpret_cast<const __half2*>(s_tile + (rw * 16 + g + 8) * S + col));
    s0 += a.v[n][0] * x0.x + a.v[n][1] * x0.y;
    s1 += a.v[n][2] * x1.x + a.v[n][3] * x1.y;
  }
  d0 = QuadSum(s0);
  d1 = QuadSum(s1);
}

template <int DP, typename T>
__device__ __forceinline__ void StoreRowsHalf(const CgVec<DP / 2>& in, T* dst, int64_t tok0,
                                              int len, int heads, int h, int D, int rw, int col0,
                                              int lane, float s0, float s1) {
  const int g = lane >> 2, c = lane & 3;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = rw * 16 + g + half * 8;
    if (row >= len) continue;
    const float s = half ? s1 : s0;
    T* base = dst + ((tok0 + row) * heads + h) * static_cast<int64_t>(D);
#pragma unroll
    for (int n = 0; n < DP / 16; ++n) {
      const int col = col0 + n * 8 + 2 * c;
      if (col < D) Store2(base + col, in.v[n][2 * half] * s, in.v[n][2 * half + 1] * s);
    }
  }
}

inline constexpr int kGlaThreads = 256;

// ---------------------------------------------------------------------------------------------
// GLA backward. The products are ordered so that the two DP x DP state tiles (dG, dH) share one
// smem slot with Q*: smem 6 token tiles (104 KB at DP = 128; 153 KB and 1 CTA/SM before 2026-11-21,
// NOTES.md) and at most 128 registers, so that 2 CTAs (16 warps) fit per SM; token tiles staged
// with all of a thread's loads in flight, state tiles by cp.async.
//   1. S1 = (K Q*^T) ⊙ Z (fp16 fragments, kept), S2 = (V E^T - K E*^T) ⊙ Z, cc = S2 Q*  (Q* done)
//   2. dG into Q*'s slot: A = dec ⊙ K dG^T + S1 E -> dv, v.A;  tmp = V dG
//   3. dH into the same slot: tmp += K dH; cc += dec ⊙ tmp; B = dec ⊙ K dH^T - S1 E*, k.B;
//      dk = beta (B + cc)
template <int DP>
struct GlaSmem {
  static constexpr int S = kStride<DP>;
  static constexpr int kTile = kChunk * S * 2;
  static constexpr int kState = DP * S * 2;
  static constexpr int kK = 0, kV = kTile, kEs = 2 * kTile, kE = 3 * kTile, kQ = 4 * kTile;
  static constexpr int kSt = kQ;  // dG, then dH (after Q* is no longer read)
  static constexpr int kBytes = kQ + (kState > kTile ? kState : kTile);
};
// 2 x (dynamic + 1 KB static gates/dbeta scratch + 1 KB reserved) within the SM's 228 KB.
static_assert(2 * (GlaSmem<128>::kBytes + 1024 + 1024) <= 233472,
              "GLA backward must fit 2 CTAs/SM");

// Token tile into a padded fp16 tile, all of a thread's global loads issued before the first store.
template <int DP, int kThreads, typename T>
__device__ __forceinline__ void StageTokenTileBatched(__half* tile, const T* src, int64_t tok0,
                                                      int len, int heads, int h, int D,
                                                      float scalar) {
  constexpr int kGroups = DP / 8;
  constexpr int kIters = kChunk * kGroups / kThreads;
  static_assert(kChunk * kGroups % kThreads == 0, "token tile split");
  float f[kIters][8];
#pragma unroll
  for (int j = 0; j < kIters; ++j) {
    const int idx = static_cast<int>(threadIdx.x) + j * kThreads;
    const int r = idx / kGroups, g = idx % kGroups;
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
    const int r = idx / kGroups, g = idx % kGroups;
    uint4 u;
    u.x = PackHalf2(f[j][0] * scalar, f[j][1] * scalar);
    u.y = PackHalf2(f[j][2] * scalar, f[j][3] * scalar);
    u.z = PackHalf2(f[j][4] * scalar, f[j][5] * scalar);
    u.w = PackHalf2(f[j][6] * scalar, f[j][7] * scalar);
    *reinterpret_cast<uint4*>(tile + r * kStride<DP> + g * 8) = u;
  }
}

// DP x DP fp16 state into a padded tile by cp.async (the caller waits and syncs).
template <int DP, int kThreads>
__device__ __forceinline__ void StageStateTileAsync(__half* tile, const __half* src) {
  constexpr int kGroups = DP / 8;
  constexpr int kIters = DP * kGroups / kThreads;
  static_assert(DP * kGroups % kThreads == 0, "state tile split");
#pragma unroll
  for (int j = 0; j < kIters; ++j) {
    const int idx = static_cast<int>(threadIdx.x) + j * kThreads;
    const int r = idx / kGroups, g = idx % kGroups;
    CpAsync16(tile + r * kStride<DP> + g * 8, src + r * DP + g * 8);
  }
}

template <int DP, typename T>
__global__ void __launch_bounds__(kGlaThreads, 2)
    GlaBackwardKernel(KernelProblem prob, GlaBackwardArgs args) {
  using L = GlaSmem<DP>;
  extern __shared__ __align__(16) unsigned char smem[];
  __half* s_k = reinterpret_cast<__half*>(smem + L::kK);
  __half* s_v = reinterpret_cast<__half*>(smem + L::kV);
  __half* s_q = reinterpret_cast<__half*>(smem + L::kQ);
  __half* s_e = reinterpret_cast<__half*>(smem + L::kE);
  __half* s_es = reinterpret_cast<__half*>(smem + L::kEs);
  __half* s_st = reinterpret_cast<__half*>(smem + L::kSt);
  __shared__ float s_b2[kChunk], s_beta[kChunk], s_db[kChunk];

  const int chunk = blockIdx.x, h = blockIdx.y;
  const int4 info = prob.chunks[chunk];
  const int64_t tok0 = info.y;
  const int len = info.z;
  const int H = prob.heads, D = prob.head_dim;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int rw = warp & 3, chalf = warp >> 2, col0 = chalf * (DP / 2);
  const int g = lane >> 2, c = lane & 3;
  const size_t state_off = (static_cast<size_t>(chunk) * H + h) * DP * DP;
  const float gs = args.scale[static_cast<size_t>(info.x) * H + h];

  StageTokenTileBatched<DP, kGlaThreads>(s_k, static_cast<const T*>(args.k), tok0, len, H, h, D,
                                         1.f);
  StageTokenTileBatched<DP, kGlaThreads>(s_q, args.q_star, tok0, len, H, h, D, 1.f);
  StageTokenTileBatched<DP, kGlaThreads>(s_v, static_cast<const T*>(args.v), tok0, len, H, h, D,
                                         1.f);
  StageTokenTileBatched<DP, kGlaThreads>(s_e, static_cast<const T*>(args.d_o), tok0, len, H, h, D,
                                         1.f / gs);
  StageTokenTileBatched<DP, kGlaThreads>(s_es, args.estar16, tok0, len, H, h, D, 1.f);
  LoadChunkGates(s_b2, s_beta, args.log_gamma, args.beta, tok0, len, H, h);  // syncs

  const int i0 = rw * 16 + g, i1 = i0 + 8;
  const float dec0 = exp2f(s_b2[kChunk - 1] - s_b2[i0]), dec1 = exp2f(s_b2[kChunk - 1] - s_b2[i1]);

  uint32_t s1[4][4];
  {
    float sacc[8][4] = {};
    RowScores<DP>(sacc, s_k, s_q, false, rw, lane);
    MaskAntiCausal(s1, sacc, s_b2, rw, lane);
  }
  CgVec<DP / 2> cc;
  ZeroVec<DP / 2>(cc);
  {
    uint32_t s2[4][4];
    {
      float sacc[8][4] = {};
      RowScores<DP>(sacc, s_v, s_e, false, rw, lane);
      RowScores<DP>(sacc, s_k, s_es, true, rw, lane);
      MaskAntiCausal(s2, sacc, s_b2, rw, lane);
    }
    FragTimesTile<DP>(cc, s2, s_q, false, rw, col0, lane);  // S2 Q*
  }
  __syncthreads();  // Q* no longer read: dG into its slot
  StageStateTileAsync<DP, kGlaThreads>(s_st, args.dgc + state_off);
  CpAsyncWaitAll();
  __syncthreads();

  float db0, db1;
  CgVec<DP / 2> tmp;
  {
    ZeroVec<DP / 2>(tmp);
    RowsTimesState<DP, true>(tmp, s_k, s_st, rw, col0, lane);  // K dG^T
    ScaleRows<DP / 2>(tmp, dec0, dec1);
    FragTimesTile<DP>(tmp, s1, s_e, false, rw, col0, lane);
    RowDotTile<DP>(tmp, s_v, rw, col0, lane, db0, db1);
    StoreRowsHalf<DP>(tmp, static_cast<T*>(args.dv), tok0, len, H, h, D, rw, col0, lane,
                      s_beta[i0] * gs, s_beta[i1] * gs);
  }
  ZeroVec<DP / 2>(tmp);
  RowsTimesState<DP, false>(tmp, s_v, s_st, rw, col0, lane);  // V dG
  __syncthreads();  // dG no longer read: dH into the same slot
  StageStateTileAsync<DP, kGlaThreads>(s_st, args.dhc + state_off);
  CpAsyncWaitAll();
  __syncthreads();
  RowsTimesState<DP, false>(tmp, s_k, s_st, rw, col0, lane);  // K dH
#pragma unroll
  for (int n = 0; n < DP / 16; ++n) {
    cc.v[n][0] += dec0 * tmp.v[n][0];
    cc.v[n][1] += dec0 * tmp.v[n][1];
    cc.v[n][2] += dec1 * tmp.v[n][2];
    cc.v[n][3] += dec1 * tmp.v[n][3];
  }
  {
    ZeroVec<DP / 2>(tmp);
    RowsTimesState<DP, true>(tmp, s_k, s_st, rw, col0, lane);  // K dH^T
    ScaleRows<DP / 2>(tmp, dec0, dec1);
    FragTimesTile<DP>(tmp, s1, s_es, true, rw, col0, lane);
    float kb0, kb1;
    RowDotTile<DP>(tmp, s_k, rw, col0, lane, kb0, kb1);
    db0 += kb0;
    db1 += kb1;
#pragma unroll
    for (int n = 0; n < DP / 16; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) tmp.v[n][e] += cc.v[n][e];
    StoreRowsHalf<DP>(tmp, static_cast<T*>(args.dk), tok0, len, H, h, D, rw, col0, lane,
                      s_beta[i0] * gs, s_beta[i1] * gs);
  }
  if (chalf == 1 && c == 0) {
    s_db[i0] = db0;
    s_db[i1] = db1;
  }
  __syncthreads();
  if (chalf == 0 && c == 0) {
    const float be0 = s_beta[i0], be1 = s_beta[i1];
    if (i0 < len) {
      const int64_t idx = (tok0 + i0) * H + h;
      const float dbeta = (db0 + s_db[i0]) * gs;
      args.dbeta[idx] = dbeta;
      args.dlog_gamma[idx] = args.r[idx] - be0 * dbeta;
    }
    if (i1 < len) {
      const int64_t idx = (tok0 + i1) * H + h;
      const float dbeta = (db1 + s_db[i1]) * gs;
      args.dbeta[idx] = dbeta;
      args.dlog_gamma[idx] = args.r[idx] - be1 * dbeta;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Reverse cumulative sum over each (sequence, head)'s tokens, 4096 at a time: each of 1024
// threads sums 4 consecutive (reversed) tokens, a block scan adds the totals before it, and the
// carry moves on. A 32-lane version walked a 32k-token sequence in 1024 dependent steps.
constexpr int kGateScanThreads = 1024, kGateScanPer = 4;
__global__ void __launch_bounds__(kGateScanThreads)
    GateScanKernel(KernelProblem prob, float* dlg, const float* r_final) {
  const int seq = blockIdx.x, h = blockIdx.y, H = prob.heads;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int4 sinfo = prob.seqs[seq];
  __shared__ float warp_total[kGateScanThreads / 32];
  float carry = 0.f;
  if (r_final != nullptr) {  // the state pass's parts, in slot order
    const float* parts = r_final + (static_cast<size_t>(seq) * H + h) * kRFinalSlots;
    for (int k = 0; k < kRFinalSlots; ++k) carry += parts[k];
  }
  for (int base = 0; base < sinfo.y; base += kGateScanThreads * kGateScanPer) {
    float v[kGateScanPer];
#pragma unroll
    for (int i = 0; i < kGateScanPer; ++i) {
      const int j = sinfo.y - 1 - (base + tid * kGateScanPer + i);  // counted from the last token
      v[i] = j >= 0 ? dlg[(static_cast<int64_t>(sinfo.x) + j) * H + h] : 0.f;
      if (i > 0) v[i] += v[i - 1];
    }
    const float own = v[kGateScanPer - 1];
    float incl = own;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const float n = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += n;
    }
    if (lane == 31) warp_total[warp] = incl;
    __syncthreads();
    if (warp == 0) {
      float w = warp_total[lane];
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const float n = __shfl_up_sync(0xffffffffu, w, o);
        if (lane >= o) w += n;
      }
      warp_total[lane] = w;
    }
    __syncthreads();
    const float before = carry + (warp > 0 ? warp_total[warp - 1] : 0.f) + (incl - own);
#pragma unroll
    for (int i = 0; i < kGateScanPer; ++i) {
      const int j = sinfo.y - 1 - (base + tid * kGateScanPer + i);
      if (j >= 0) dlg[(static_cast<int64_t>(sinfo.x) + j) * H + h] = before + v[i];
    }
    carry += warp_total[31];
    __syncthreads();  // warp_total is rewritten by the next tile
  }
}

template <int DP, typename T, bool kWgmma>
cudaError_t LaunchCgBwdOne(const KernelProblem& p, const CgBackwardArgs& a, cudaStream_t s) {
  constexpr int kBytes = CgSmemLayout<DP, kWgmma>::kBytes;
  auto* kernel = CgBackwardKernel<DP, T, kWgmma>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes);
  if (e != cudaSuccess) return e;
  static bool reported = false;
  ReportCgOccupancy(reported, "CgBackward", DP, kWgmma, reinterpret_cast<const void*>(kernel),
                    kBytes);
  kernel<<<dim3(p.num_chunks, p.heads), kCgThreads, kBytes, s>>>(p, a);
  return cudaGetLastError();
}

template <int DP, typename T>
cudaError_t LaunchCgBwd(const KernelProblem& p, const CgBackwardArgs& a, cudaStream_t s) {
  if (CgUseWgmma() && CgDeviceIsSm90()) return LaunchCgBwdOne<DP, T, true>(p, a, s);
  return LaunchCgBwdOne<DP, T, false>(p, a, s);
}

template <int DP, typename T>
cudaError_t LaunchGla(const KernelProblem& p, const GlaBackwardArgs& a, cudaStream_t s) {
  constexpr int bytes = GlaSmem<DP>::kBytes;
  auto* kernel = GlaBackwardKernel<DP, T>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e != cudaSuccess) return e;
  static bool reported = false;
  if (!reported) {
    reported = true;
    int blocks = 0;
    cudaFuncAttributes at{};
    if (std::getenv("MESA_CUDA_OCC") != nullptr &&
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kGlaThreads, bytes) ==
            cudaSuccess &&
        cudaFuncGetAttributes(&at, kernel) == cudaSuccess) {
      std::printf(
          "OCC GlaBackward DP=%d: %d CTAs/SM, %d regs, static smem %zu B, dynamic %d B, local %zu "
          "B\n",
          DP, blocks, at.numRegs, at.sharedSizeBytes, bytes, at.localSizeBytes);
    }
  }
  kernel<<<dim3(p.num_chunks, p.heads), kGlaThreads, bytes, s>>>(p, a);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchGradScale(const KernelProblem& p, const void* d_o, float* scale, cudaStream_t s) {
  if (p.num_seqs == 0) return cudaSuccess;
  const int n = p.num_seqs * p.heads;
  cudaError_t e = cudaMemsetAsync(scale, 0, sizeof(float) * n, s);
  if (e != cudaSuccess) return e;
  // About 4 CTAs per SM in all, and no piece shorter than 256 tokens (an average sequence's).
  const int avg_tokens = p.num_chunks * kChunk / p.num_seqs;
  const int pieces = std::max(1, std::min((4 * SmCount() + n - 1) / n, avg_tokens / 256));
  const dim3 grid(p.num_seqs, p.heads, pieces);
  unsigned* bits = reinterpret_cast<unsigned*>(scale);
  if (p.dtype == DType::kBF16) {
    GradMaxKernel<<<grid, 256, 0, s>>>(p, static_cast<const __nv_bfloat16*>(d_o), bits);
  } else {
    GradMaxKernel<<<grid, 256, 0, s>>>(p, static_cast<const float*>(d_o), bits);
  }
  GradScaleFinishKernel<<<(n + 255) / 256, 256, 0, s>>>(scale, n);
  return cudaGetLastError();
}

size_t CgDlambdaPartialFloats(const KernelProblem& p) {
  return static_cast<size_t>(p.num_chunks) * kCgWarps * p.heads * p.head_dim;
}

cudaError_t LaunchCgBackward(const KernelProblem& p, const CgBackwardArgs& a, cudaStream_t s) {
  if (p.num_chunks == 0) return cudaSuccess;
  if (a.max_steps > 0 && a.dlambda_partials == nullptr) return cudaErrorInvalidValue;  // caller bug
  const bool bf16 = p.dtype == DType::kBF16;
  cudaError_t e;
  if (p.padded_dim == 64) {
    e = bf16 ? LaunchCgBwd<64, __nv_bfloat16>(p, a, s) : LaunchCgBwd<64, float>(p, a, s);
  } else {
    e = bf16 ? LaunchCgBwd<128, __nv_bfloat16>(p, a, s) : LaunchCgBwd<128, float>(p, a, s);
  }
  if (e != cudaSuccess || a.max_steps <= 0) return e;  // no solve: dlambda is not touched
  // dlambda = Σ over (chunk, warp) of the parts, in a fixed order (ordered_sum.cuh).
  return LaunchSumPartsInOrder</*kSlices=*/32, /*kAccumulate=*/false>(
      static_cast<int64_t>(p.num_chunks) * kCgWarps, static_cast<int64_t>(p.heads) * p.head_dim,
      a.dlambda_partials, a.dlambda, s);
}

cudaError_t LaunchGlaBackward(const KernelProblem& p, const GlaBackwardArgs& a, cudaStream_t s) {
  if (p.num_chunks == 0) return cudaSuccess;
  const bool bf16 = p.dtype == DType::kBF16;
  if (p.padded_dim == 64)
    return bf16 ? LaunchGla<64, __nv_bfloat16>(p, a, s) : LaunchGla<64, float>(p, a, s);
  return bf16 ? LaunchGla<128, __nv_bfloat16>(p, a, s) : LaunchGla<128, float>(p, a, s);
}

cudaError_t LaunchGateScan(const KernelProblem& p, float* dlog_gamma, const float* r_final,
                           cudaStream_t s) {
  if (p.num_seqs == 0) return cudaSuccess;
  GateScanKernel<<<dim3(p.num_seqs, p.heads), kGateScanThreads, 0, s>>>(p, dlog_gamma, r_final);
  return cudaGetLastError();
}

}  // namespace mesa::kernels::cuda
