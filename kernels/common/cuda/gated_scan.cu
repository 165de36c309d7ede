// The gated scan (gated_scan.h) on the GPU. Six kernels after the operator's gate kernel:
//   LocalState  per chunk: its own write Σ_i e^{b_end − b_i + lw_i − m^loc_end} v_i k_iᵀ (and n').
//   StatePass   per state element: the chunk-start states in order, m_c from the summaries.
//   Readout     per chunk: scores, the stabilised numerator and denominator, h; in the backward
//               also ê, δden, R and the chunk's own ∂S' term Σ_r g_r ê_r q_rᵀ.
//   ReversePass per state element: ∂S' after every chunk, in reverse.
//   Grad        per chunk: ∂q, ∂k, ∂v, ∂lw = k·∂k.
//   ForgetSum   per (row, head): ∂log f as the reverse cumulative sum of R − ∂lw (docs/math.md).
// The chunk-local sums run on the tensor cores (tf32 mma.sync from float32 shared-memory tiles;
// three per sum, WarpMma); states and every sum are float32.
#include "kernels/common/cuda/gated_scan.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/common/cuda/gated_scan.cuh"
#include "kernels/common/cuda/mma.cuh"

namespace mesa::kernels::cuda::gated_scan {
namespace {

constexpr int kQ = kChunk;
constexpr int kD = kMaxDim;
constexpr int kLd = kD + 4;   // smem row stride (floats) of a token tile
constexpr int kSld = kQ + 4;  // smem row stride of a 64 × 64 score tile
constexpr int kThreads = 256;
constexpr int kPassBatch = 8;  // chunks whose states a pass thread loads at once
constexpr float kNegInf = -INFINITY;

// The warp-level tensor-core product every chunk-local sum here is made of: a warp's MT × NT
// tiles of 16 × 8 outputs at (row0, col0) accumulate Σ_{k < K} a(k, row) b(k, col), a and b reading
// shared memory (K a multiple of 8; the tiles are zero past their true extent). acc[mi][ni][e] is
// (row0 + 16 mi + g + 8 (e / 2), col0 + 8 ni + 2 c + e % 2) with g = lane / 4, c = lane % 4.
// kSplit runs each product as three tf32 ones (hi·hi + hi·lo + lo·hi, about 21 significant bits)
// instead of one (11).
template <bool kSplit, int MT, int NT, typename A, typename B>
__device__ __forceinline__ void WarpMma(float (&acc)[MT][NT][4], int K, int row0, int col0, A a,
                                        B b) {
  const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  auto split = [](float x, uint32_t& hi, uint32_t& lo) {
    hi = ToTf32(x);
    if constexpr (kSplit) lo = ToTf32(x - __uint_as_float(hi));
  };
  for (int k0 = 0; k0 < K; k0 += 8) {
    uint32_t ah[MT][4], al[MT][4], bh[NT][2], bl[NT][2];
#pragma unroll
    for (int mi = 0; mi < MT; ++mi) {
      const int r = row0 + 16 * mi + g;
      split(a(k0 + c, r), ah[mi][0], al[mi][0]);
      split(a(k0 + c, r + 8), ah[mi][1], al[mi][1]);
      split(a(k0 + c + 4, r), ah[mi][2], al[mi][2]);
      split(a(k0 + c + 4, r + 8), ah[mi][3], al[mi][3]);
    }
#pragma unroll
    for (int ni = 0; ni < NT; ++ni) {
      const int col = col0 + 8 * ni + g;
      split(b(k0 + c, col), bh[ni][0], bl[ni][0]);
      split(b(k0 + c + 4, col), bh[ni][1], bl[ni][1]);
    }
#pragma unroll
    for (int mi = 0; mi < MT; ++mi)
#pragma unroll
      for (int ni = 0; ni < NT; ++ni) {
        if constexpr (kSplit) {
          MmaTf32(acc[mi][ni], al[mi], bh[ni][0], bh[ni][1]);
          MmaTf32(acc[mi][ni], ah[mi], bl[ni][0], bl[ni][1]);
        }
        MmaTf32(acc[mi][ni], ah[mi], bh[ni][0], bh[ni][1]);
      }
  }
}

// f(row, col, value&) for each of this thread's accumulator elements (WarpMma's layout).
template <int MT, int NT, typename F>
__device__ __forceinline__ void ForEachOut(float (&acc)[MT][NT][4], int row0, int col0, F f) {
  const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
#pragma unroll
  for (int mi = 0; mi < MT; ++mi)
#pragma unroll
    for (int ni = 0; ni < NT; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        f(row0 + 16 * mi + g + 8 * (e >> 1), col0 + 8 * ni + 2 * c + (e & 1), acc[mi][ni][e]);
      }
}

__device__ __forceinline__ int RoundUp8(int x) { return (x + 7) & ~7; }

// Every sum runs as three tf32 products, even for bf16 operators. The forget gates' gradient is the
// reverse sum of R − ∂lw (ForgetSumKernel), two large terms that cancel: with single products the
// SSD's ∂A came out 20 % from the float64 oracle. And single products only where a bf16 output
// alone depends on them (the forward's h, ∂q, ∂v) made the mLSTM's training gradients noisy
// (grad norm 2–50 over steps 10–30 of MesaNet-small against 0.24–2 with three; same losses to
// 3 digits, 1 % more tokens/s). 2026-12-07, one H100.
inline constexpr bool kSplit = true;

// Warp placements over the 8 warps: a 64 × 64 output as 4 × 2 warps of 16 × 32 (Tile64), a
// 64 × 128 one as 4 × 2 of 16 × 64 (Tile64x128), a 128 × 128 one as 4 × 2 of 32 × 64 (Tile128).
struct WarpPlace {
  int row0, col0;
};
__device__ __forceinline__ int WarpId() { return threadIdx.x >> 5; }
__device__ __forceinline__ WarpPlace Tile64() {
  return {16 * (WarpId() & 3), 32 * (WarpId() >> 2)};
}
__device__ __forceinline__ WarpPlace Tile64x128() {
  return {16 * (WarpId() & 3), 64 * (WarpId() >> 2)};
}
__device__ __forceinline__ WarpPlace Tile128() {
  return {32 * (WarpId() & 3), 64 * (WarpId() >> 2)};
}

// Per-row sums of a 64 × 128 (Tile64x128) output: each thread's part for its rows g and g + 8,
// summed over the quad and then over the two column warps through `scratch` [2][kQ]; returns
// after a barrier, with scratch[0][r] + scratch[1][r] the row sums.
__device__ __forceinline__ void RowSums64x128(float part_lo, float part_hi, int row0,
                                              float* scratch) {
  const int lane = threadIdx.x & 31;
  part_lo = QuadSum(part_lo);
  part_hi = QuadSum(part_hi);
  if ((lane & 3) == 0) {
    float* mine = scratch + (WarpId() >> 2) * kQ;
    mine[row0 + (lane >> 2)] = part_lo;
    mine[row0 + (lane >> 2) + 8] = part_hi;
  }
  __syncthreads();
}

// Everything the kernels read and write; the workspace carved on the host.
struct Args : Buffers {
  int B, T, H, Dk, Dv, chunks;
  int64_t S;  // floats of one state: Dv*Dk (S') + Dk (n')
  const void *q, *k, *v;
  float k_scale, eps;
  bool normalised;
  const float* skip;
  const float *c0, *n0, *m0;
  const int32_t* doc_start;
  bool restart_at_row_start;
};

__device__ __forceinline__ bool Restarts(const Args& a, int b, int t) {
  return gated_scan::Restarts(a.doc_start, a.restart_at_row_start, a.T, b, t);
}

// Stages rows [0, n) of a [B,T,H,D] tensor (head h, from token t0 of row b) as floats into a
// kQ × kLd tile, times `scale`, zero outside (rows ≥ n, columns ≥ D). 16-byte loads where D and
// the base allow them.
template <typename T>
__device__ void StageTokens(float* tile, const T* src, const Args& a, int b, int h, int t0, int n,
                            int D, float scale) {
  constexpr int kVec = 16 / sizeof(T);
  if (D % kVec == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0) {
    for (int idx = threadIdx.x; idx < kQ * (kD / kVec); idx += kThreads) {
      const int r = idx / (kD / kVec), j = (idx % (kD / kVec)) * kVec;
      float x[kVec];
      if (r < n && j < D) {
        union {
          uint4 raw;
          T e[kVec];
        } u;
        u.raw =
            *reinterpret_cast<const uint4*>(src + ((int64_t(b) * a.T + t0 + r) * a.H + h) * D + j);
#pragma unroll
        for (int e = 0; e < kVec; ++e) x[e] = ToF(u.e[e]) * scale;
      } else {
#pragma unroll
        for (int e = 0; e < kVec; ++e) x[e] = 0.f;
      }
#pragma unroll
      for (int e = 0; e < kVec; ++e) tile[r * kLd + j + e] = x[e];
    }
    return;
  }
  for (int idx = threadIdx.x; idx < kQ * kD; idx += kThreads) {
    const int r = idx / kD, j = idx % kD;
    float x = 0.f;
    if (r < n && j < D) x = ToF(src[((int64_t(b) * a.T + t0 + r) * a.H + h) * D + j]) * scale;
    tile[r * kLd + j] = x;
  }
}

// Rows [0, kRows) × columns [0, kD) of a float32 matrix (row r at src + r·ld) into a kRows × kLd
// tile, zero outside rows < valid_rows and columns < cols. Each thread issues all its loads before
// storing any (16-byte ones where ld, cols and src allow), so a block has the whole tile in flight.
template <int kRows>
__device__ void StageFloatRows(float* tile, const float* src, int64_t ld, int valid_rows,
                               int cols) {
  constexpr int kVecs = kD / 4, kPer = kRows * kVecs / kThreads;
  static_assert(kRows * kVecs % kThreads == 0);
  if (ld % 4 == 0 && cols % 4 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0) {
    float4 v[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int idx = threadIdx.x + i * kThreads, r = idx / kVecs, j = (idx % kVecs) * 4;
      v[i] = r < valid_rows && j < cols ? *reinterpret_cast<const float4*>(src + r * ld + j)
                                        : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int idx = threadIdx.x + i * kThreads, r = idx / kVecs, j = (idx % kVecs) * 4;
      *reinterpret_cast<float4*>(tile + r * kLd + j) = v[i];
    }
    return;
  }
  for (int idx = threadIdx.x; idx < kRows * kD; idx += kThreads) {
    const int r = idx / kD, j = idx % kD;
    tile[r * kLd + j] = r < valid_rows && j < cols ? src[r * ld + j] : 0.f;
  }
}

// Rows [x0, x0 + kRows) of a [Dv, Dk] state matrix into a tile (zero outside).
template <int kRows = 64>
__device__ void StageStateRows(float* tile, const float* state, const Args& a, int x0) {
  StageFloatRows<kRows>(tile, state + int64_t(x0) * a.Dk, a.Dk, a.Dv - x0, a.Dk);
}

// The per-row scalars of one chunk, in shared memory.
struct RowScalars {
  float m[kQ], g[kQ], b[kQ], lw[kQ];
  int lr[kQ];
};

__device__ void LoadRowScalars(RowScalars& s, const Args& a, int b, int h, int c, int t0, int n) {
  const int bh = b * a.H + h;
  const float m_start = a.mstart[int64_t(bh) * (a.chunks + 1) + c];
  for (int r = threadIdx.x; r < kQ; r += kThreads) {
    if (r < n) {
      const int64_t g = int64_t(bh) * a.T + t0 + r;
      const int lr = a.lr[int64_t(b) * a.T + t0 + r];
      const float bc = a.bc[g], ml = a.ml[g];
      const float m = lr >= 0 ? ml : fmaxf(bc + m_start, ml);
      s.m[r] = m;
      s.g[r] = lr >= 0 ? 0.f : expf(bc + m_start - m);
      s.b[r] = bc;
      s.lw[r] = a.lw[g];
      s.lr[r] = lr;
    } else {
      s.m[r] = s.g[r] = s.b[r] = s.lw[r] = 0.f;
      s.lr[r] = kQ;
    }
  }
}

// W[r, i]: the weight of key i at row r (0 above the diagonal, across a reset, in padding).
__device__ __forceinline__ float Weight(const RowScalars& s, int r, int i, int n) {
  if (r >= n || i > r || i < s.lr[r]) return 0.f;
  return expf(s.b[r] - s.b[i] + s.lw[i] - s.m[r]);
}

// A state-shaped sum over the chunk's rows: slot[x][j] = Σ_r us[r][x] ks[r][j] (the [Dv, Dk]
// matrix, on the tensor cores) and slot[Dv·Dk + j] = Σ_r w[r] ks[r][j].
__device__ void StoreOuterSum(float* slot, const Args& a, int n, const float* us, const float* ks,
                              const float* w) {
  const WarpPlace p = Tile128();
  if (p.row0 < a.Dv && p.col0 < a.Dk) {
    float acc[2][8][4] = {};
    WarpMma<kSplit>(
        acc, RoundUp8(n), p.row0, p.col0, [&](int r, int x) { return us[r * kLd + x]; },
        [&](int r, int j) { return ks[r * kLd + j]; });
    ForEachOut(acc, p.row0, p.col0, [&](int x, int j, float& v) {
      if (x < a.Dv && j < a.Dk) slot[int64_t(x) * a.Dk + j] = v;
    });
  }
  for (int j = threadIdx.x; j < a.Dk; j += kThreads) {
    float sum = 0.f;
    for (int r = 0; r < n; ++r) sum += w[r] * ks[r * kLd + j];
    slot[int64_t(a.Dv) * a.Dk + j] = sum;
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads, 2) LocalStateKernel(Args a) {
  extern __shared__ float smem[];
  float* ks = smem;           // [kQ][kLd]
  float* vs = ks + kQ * kLd;  // [kQ][kLd], times w_i
  float* w = vs + kQ * kLd;   // [kQ]
  const int c = blockIdx.x, h = blockIdx.y, b = blockIdx.z, bh = b * a.H + h;
  const int t0 = c * kQ, n = min(a.T - t0, kQ);
  if (threadIdx.x < kQ) {
    const int r = threadIdx.x;
    float wr = 0.f;
    if (r < n) {
      const int64_t g = int64_t(bh) * a.T + t0 + r, end = int64_t(bh) * a.T + t0 + n - 1;
      if (r >= a.lr[int64_t(b) * a.T + t0 + n - 1]) {
        wr = expf(a.bc[end] - a.bc[g] + a.lw[g] - a.ml[end]);
      }
    }
    w[r] = wr;
  }
  StageTokens(ks, static_cast<const T*>(a.k), a, b, h, t0, n, a.Dk, a.k_scale);
  StageTokens(vs, static_cast<const T*>(a.v), a, b, h, t0, n, a.Dv, 1.f);
  __syncthreads();
  for (int idx = threadIdx.x; idx < kQ * kD; idx += kThreads)
    vs[(idx / kD) * kLd + idx % kD] *= w[idx / kD];
  __syncthreads();
  StoreOuterSum(a.states + (int64_t(bh) * a.chunks + c) * a.S, a, n, vs, ks, w);
}

// S'_{c+1} = e^{b_end + m_c − m_{c+1}} S'_c + e^{m^loc_end − m_{c+1}} (the chunk's own write),
// m_{c+1} = max(b_end + m_c, m^loc_end); the slot of chunk c then holds S'_c.
// m_final is written by the Readout (m0 may alias it, and other blocks still read m0 here).
__global__ void StatePassKernel(Args a, float* c_final, float* n_final) {
  const int h = blockIdx.y, b = blockIdx.z, bh = b * a.H + h;
  const int64_t e = blockIdx.x * int64_t(kThreads) + threadIdx.x;
  const bool valid = e < a.S, is_c = e < int64_t(a.Dv) * a.Dk;
  const int64_t c_elems = int64_t(a.Dv) * a.Dk;
  float run = 0.f, m = 0.f;
  if (a.c0 != nullptr) {
    m = a.m0[bh];
    if (valid) run = is_c ? a.c0[bh * c_elems + e] : a.n0[int64_t(bh) * a.Dk + (e - c_elems)];
  }
  const bool writer = blockIdx.x == 0 && threadIdx.x == 0;
  float* slots = a.states + int64_t(bh) * a.chunks * a.S + e;
  for (int c0 = 0; c0 < a.chunks; c0 += kPassBatch) {
    // The batch's own writes are loaded before any is replaced: kPassBatch loads in flight.
    float own[kPassBatch];
#pragma unroll
    for (int j = 0; j < kPassBatch; ++j) {
      own[j] = valid && c0 + j < a.chunks ? slots[int64_t(c0 + j) * a.S] : 0.f;
    }
#pragma unroll
    for (int j = 0; j < kPassBatch; ++j) {
      const int c = c0 + j;
      if (c >= a.chunks) break;
      const int64_t cs = int64_t(bh) * a.chunks + c;
      const float be = a.bend[cs], mle = a.mlend[cs];
      const bool cut = be == kNegInf;
      const float mn = cut ? mle : fmaxf(be + m, mle);
      const float decay = cut ? 0.f : expf(be + m - mn), wl = expf(mle - mn);
      if (writer) a.mstart[int64_t(bh) * (a.chunks + 1) + c] = m;
      if (valid) {
        slots[int64_t(c) * a.S] = run;
        run = decay * run + wl * own[j];
      }
      m = mn;
    }
  }
  if (writer) a.mstart[int64_t(bh) * (a.chunks + 1) + a.chunks] = m;
  if (valid) {
    a.final_state[int64_t(bh) * a.S + e] = run;
    if (c_final != nullptr) {
      if (is_c) {
        c_final[bh * c_elems + e] = run;
      } else if (n_final != nullptr) {
        n_final[int64_t(bh) * a.Dk + (e - c_elems)] = run;
      }
    }
  }
}

// Shared memory of the Readout kernel (floats): q, k, v (later g ê), the 128 rows of S'_c, scores;
// n'_c, the row scalars, den, g δden, the output scale and the row sums' scratch.
constexpr size_t kReadoutSmem =
    (5 * kQ * kLd + kQ * kSld + kD) * sizeof(float) + sizeof(RowScalars) + 5 * kQ * sizeof(float);

template <typename T, bool kBackward>
__global__ void __launch_bounds__(kThreads, 1)
    ReadoutKernel(Args a, void* h_out, const void* dh, float* m_final) {
  extern __shared__ float smem[];
  float* qs = smem;
  float* ks = qs + kQ * kLd;
  float* vs = ks + kQ * kLd;      // v, then g ê
  float* st = vs + kQ * kLd;      // S'_c (2 kQ rows)
  float* ss = st + 2 * kQ * kLd;  // W (q·k)
  float* ns = ss + kQ * kSld;     // n'_c
  RowScalars& rs = *reinterpret_cast<RowScalars*>(ns + kD);
  float* den = reinterpret_cast<float*>(&rs + 1);
  float* gden = den + kQ;        // g_r δden_r
  float* scale = gden + kQ;      // the readout's 1 / (max(|den|, e^{−m}) + eps), or 1
  float* row_sums = scale + kQ;  // [2][kQ]
  const int c = blockIdx.x, h = blockIdx.y, b = blockIdx.z, bh = b * a.H + h;
  const int t0 = c * kQ, n = min(a.T - t0, kQ);
  const float* start = a.states + (int64_t(bh) * a.chunks + c) * a.S;
  LoadRowScalars(rs, a, b, h, c, t0, n);
  StageStateRows<2 * kQ>(st, start, a, 0);
  for (int j = threadIdx.x; j < kD; j += kThreads) ns[j] = j < a.Dk ? start[a.Dv * a.Dk + j] : 0.f;
  StageTokens(qs, static_cast<const T*>(a.q), a, b, h, t0, n, a.Dk, 1.f);
  StageTokens(ks, static_cast<const T*>(a.k), a, b, h, t0, n, a.Dk, a.k_scale);
  StageTokens(vs, static_cast<const T*>(a.v), a, b, h, t0, n, a.Dv, 1.f);
  __syncthreads();
  {  // ss[r][i] = W[r, i] (q_r·k_i)
    const WarpPlace p = Tile64();
    float acc[1][4][4] = {};
    WarpMma<kSplit>(
        acc, RoundUp8(a.Dk), p.row0, p.col0, [&](int j, int r) { return qs[r * kLd + j]; },
        [&](int j, int i) { return ks[i * kLd + j]; });
    ForEachOut(acc, p.row0, p.col0,
               [&](int r, int i, float& v) { ss[r * kSld + i] = Weight(rs, r, i, n) * v; });
  }
  __syncthreads();         // ss complete
  if (threadIdx.x < kQ) {  // den_r = Σ_i ss[r][i] + g_r n'_c·q_r
    const int r = threadIdx.x;
    float d = 0.f;
    for (int i = 0; i < kQ; ++i) d += ss[r * kSld + i];
    if (rs.g[r] != 0.f) {
      float nq = 0.f;
      for (int j = 0; j < a.Dk; ++j) nq += ns[j] * qs[r * kLd + j];
      d += rs.g[r] * nq;
    }
    den[r] = d;
    const float floor = r < n ? expf(-rs.m[r]) : 1.f;
    scale[r] = a.normalised ? 1.f / (fmaxf(fabsf(d), floor) + a.eps) : 1.f;
  }
  __syncthreads();  // den and scale visible
  // num[r][x] = Σ_i ss[r][i] v_i[x] + Σ_j g_r q_r[j] S'_c[x][j]
  const WarpPlace p = Tile64x128();
  const bool live = p.col0 < a.Dv;
  float num[1][8][4] = {};
  if (live) {
    WarpMma<kSplit>(
        num, RoundUp8(n), p.row0, p.col0, [&](int i, int r) { return ss[r * kSld + i]; },
        [&](int i, int x) { return vs[i * kLd + x]; });
    WarpMma<kSplit>(
        num, RoundUp8(a.Dk), p.row0, p.col0,
        [&](int j, int r) { return rs.g[r] * qs[r * kLd + j]; },
        [&](int j, int x) { return st[x * kLd + j]; });
  }
  if constexpr (!kBackward) {
    if (m_final != nullptr && c == 0 && threadIdx.x == 0) {
      m_final[bh] = a.mstart[int64_t(bh) * (a.chunks + 1) + a.chunks];
    }
    if (!live) return;
    T* out = static_cast<T*>(h_out);
    const float skip = a.skip != nullptr ? a.skip[h] : 0.f;
    ForEachOut(num, p.row0, p.col0, [&](int r, int x, float& v) {
      if (r < n && x < a.Dv) {
        out[((int64_t(b) * a.T + t0 + r) * a.H + h) * a.Dv + x] =
            FromF<T>(v * scale[r] + skip * vs[r * kLd + x]);
      }
    });
  } else {
    // ê = e / D, δden = −(e·h)/D sign(den) above the floor, R = ê·num + δden den (kPlain: ê = e,
    // δden = 0; the skip's gradients are the operator's). First e·h per row.
    const T* e_in = static_cast<const T*>(dh);
    float e_h[2] = {0.f, 0.f};  // rows g and g + 8 of this warp
    ForEachOut(num, p.row0, p.col0, [&](int r, int x, float& v) {
      const bool in = r < n && x < a.Dv;
      const float e = in ? ToF(e_in[((int64_t(b) * a.T + t0 + r) * a.H + h) * a.Dv + x]) : 0.f;
      e_h[(r - p.row0) >> 3] += e * v * scale[r];
      v = e * scale[r];  // num becomes ê
    });
    RowSums64x128(e_h[0], e_h[1], p.row0, row_sums);
    if (threadIdx.x < kQ) {
      const int r = threadIdx.x;
      const bool in = r < n;
      const float sum = row_sums[r] + row_sums[kQ + r];
      const float dr = in ? den[r] : 0.f, floor = in ? expf(-rs.m[r]) : 1.f;
      const float dd =
          a.normalised && fabsf(dr) > floor ? (dr >= 0.f ? -sum : sum) * scale[r] : 0.f;
      if (in) {
        const int64_t g = int64_t(bh) * a.T + t0 + r;
        a.dden[g] = dd;
        a.rescale[g] = sum + dd * dr;
      }
      gden[r] = in ? rs.g[r] * dd : 0.f;
    }
    // g_r ê_r into vs (v is no longer needed), ê into the workspace.
    if (live) {
      ForEachOut(num, p.row0, p.col0, [&](int r, int x, float& v) {
        vs[r * kLd + x] = (r < n ? rs.g[r] : 0.f) * v;
        if (r < n && x < a.Dv) a.ehat[((int64_t(b) * a.T + t0 + r) * a.H + h) * a.Dv + x] = v;
      });
    }
    __syncthreads();
    // The chunk's own ∂S' term Σ_r g_r ê_r q_rᵀ [Dv, Dk] and ∂n' term Σ_r g_r δden_r q_r.
    StoreOuterSum(a.dstates + (int64_t(bh) * a.chunks + c) * a.S, a, n, vs, qs, gden);
  }
}

// ∂S' after chunk c, from the last chunk back: after(c − 1) = G_c after(c) + own(c), with
// G_c = e^{b_end + m_c − m_{c+1}} (0 across a reset); what is left is ∂S'_0.
__global__ void ReversePassKernel(Args a, const float* dc_final, const float* dn_final, float* dc0,
                                  float* dn0) {
  const int h = blockIdx.y, b = blockIdx.z, bh = b * a.H + h;
  const int64_t e = blockIdx.x * int64_t(kThreads) + threadIdx.x;
  if (e >= a.S) return;
  const int64_t c_elems = int64_t(a.Dv) * a.Dk;
  const bool is_c = e < c_elems;
  float run = 0.f;
  if (dc_final != nullptr) {
    run = is_c ? dc_final[bh * c_elems + e] : dn_final[int64_t(bh) * a.Dk + (e - c_elems)];
  }
  const float* ms = a.mstart + int64_t(bh) * (a.chunks + 1);
  float* slots = a.dstates + int64_t(bh) * a.chunks * a.S + e;
  for (int c1 = a.chunks - 1; c1 >= 0; c1 -= kPassBatch) {
    float own[kPassBatch];  // loaded before any is replaced, as in the forward pass
#pragma unroll
    for (int j = 0; j < kPassBatch; ++j) own[j] = c1 - j >= 0 ? slots[int64_t(c1 - j) * a.S] : 0.f;
#pragma unroll
    for (int j = 0; j < kPassBatch; ++j) {
      const int c = c1 - j;
      if (c < 0) break;
      const float be = a.bend[int64_t(bh) * a.chunks + c];
      const float keep = be == kNegInf ? 0.f : expf(be + ms[c] - ms[c + 1]);
      slots[int64_t(c) * a.S] = run;
      run = keep * run + own[j];
    }
  }
  if (dc0 != nullptr) {
    if (is_c) {
      dc0[bh * c_elems + e] = run;
    } else if (dn0 != nullptr) {
      dn0[int64_t(bh) * a.Dk + (e - c_elems)] = run;
    }
  }
}

constexpr size_t kGradSmem = (5 * kQ * kLd + 2 * kQ * kSld + kQ) * sizeof(float) +
                             sizeof(RowScalars) + 3 * kQ * sizeof(float);

template <typename T>
__global__ void __launch_bounds__(kThreads, 1)
    GradKernel(Args a, void* dq_out, void* dk_out, void* dv_out) {
  extern __shared__ float smem[];
  float* qs = smem;
  float* ks = qs + kQ * kLd;
  float* vs = ks + kQ * kLd;
  float* es = vs + kQ * kLd;   // ê
  float* st = es + kQ * kLd;   // 64 rows of a state matrix
  float* as = st + kQ * kLd;   // W (ê_r·v_i + δden_r)
  float* sx = as + kQ * kSld;  // W (q_r·k_i)
  float* wend = sx + kQ * kSld;
  RowScalars& rs = *reinterpret_cast<RowScalars*>(wend + kQ);
  float* dden = reinterpret_cast<float*>(&rs + 1);
  float* row_sums = dden + kQ;  // [2][kQ]
  const int c = blockIdx.x, h = blockIdx.y, b = blockIdx.z, bh = b * a.H + h;
  const int t0 = c * kQ, n = min(a.T - t0, kQ), kn = RoundUp8(n);
  const float* start = a.states + (int64_t(bh) * a.chunks + c) * a.S;
  const float* after = a.dstates + (int64_t(bh) * a.chunks + c) * a.S;
  LoadRowScalars(rs, a, b, h, c, t0, n);
  StageTokens(qs, static_cast<const T*>(a.q), a, b, h, t0, n, a.Dk, 1.f);
  StageTokens(ks, static_cast<const T*>(a.k), a, b, h, t0, n, a.Dk, a.k_scale);
  StageTokens(vs, static_cast<const T*>(a.v), a, b, h, t0, n, a.Dv, 1.f);
  StageFloatRows<kQ>(es, a.ehat + ((int64_t(b) * a.T + t0) * a.H + h) * a.Dv, int64_t(a.H) * a.Dv,
                     n, a.Dv);
  if (threadIdx.x < kQ) {
    const int r = threadIdx.x;
    dden[r] = r < n ? a.dden[int64_t(bh) * a.T + t0 + r] : 0.f;
  }
  __syncthreads();
  if (threadIdx.x < kQ) wend[threadIdx.x] = Weight(rs, n - 1, threadIdx.x, n);
  {  // as, sx [r][i]
    const WarpPlace p = Tile64();
    float ev[1][4][4] = {}, qk[1][4][4] = {};
    WarpMma<kSplit>(
        ev, RoundUp8(a.Dv), p.row0, p.col0, [&](int x, int r) { return es[r * kLd + x]; },
        [&](int x, int i) { return vs[i * kLd + x]; });
    WarpMma<kSplit>(
        qk, RoundUp8(a.Dk), p.row0, p.col0, [&](int j, int r) { return qs[r * kLd + j]; },
        [&](int j, int i) { return ks[i * kLd + j]; });
    ForEachOut(ev, p.row0, p.col0, [&](int r, int i, float& v) {
      as[r * kSld + i] = Weight(rs, r, i, n) * (v + dden[r]);
    });
    ForEachOut(qk, p.row0, p.col0,
               [&](int r, int i, float& v) { sx[r * kSld + i] = Weight(rs, r, i, n) * v; });
  }
  __syncthreads();
  const WarpPlace p = Tile64x128();
  const bool live_k = p.col0 < a.Dk, live_v = p.col0 < a.Dv;
  const int halves = (a.Dv + 63) / 64;
  {  // dq[r][j] = Σ_i as[r][i] k_i[j] + g_r (Σ_x ê_r[x] S'[x][j] + δden_r n'[j])
    float dq[1][8][4] = {};
    if (live_k) {
      WarpMma<kSplit>(
          dq, kn, p.row0, p.col0, [&](int i, int r) { return as[r * kSld + i]; },
          [&](int i, int j) { return ks[i * kLd + j]; });
    }
    for (int half = 0; half < halves; ++half) {
      StageStateRows(st, start, a, half * 64);
      __syncthreads();
      if (live_k) {
        WarpMma<kSplit>(
            dq, 64, p.row0, p.col0,
            [&](int x, int r) { return rs.g[r] * es[r * kLd + half * 64 + x]; },
            [&](int x, int j) { return st[x * kLd + j]; });
      }
      __syncthreads();
    }
    const float* nc = start + int64_t(a.Dv) * a.Dk;
    T* out = static_cast<T*>(dq_out);
    if (live_k) {
      ForEachOut(dq, p.row0, p.col0, [&](int r, int j, float& v) {
        if (r < n && j < a.Dk) {
          out[((int64_t(b) * a.T + t0 + r) * a.H + h) * a.Dk + j] =
              FromF<T>(v + rs.g[r] * dden[r] * nc[j]);
        }
      });
    }
  }
  // dk[i][j] = Σ_r as[r][i] q_r[j] + wend_i (Σ_x v_i[x] ∂S'[x][j] + ∂n'[j]);
  // dv[i][x] = Σ_r sx[r][i] ê_r[x] + wend_i Σ_j k_i[j] ∂S'[x][j].
  float dk[1][8][4] = {}, dv[1][8][4] = {};
  if (live_k) {
    WarpMma<kSplit>(
        dk, kn, p.row0, p.col0, [&](int r, int i) { return as[r * kSld + i]; },
        [&](int r, int j) { return qs[r * kLd + j]; });
  }
  if (live_v) {
    WarpMma<kSplit>(
        dv, kn, p.row0, p.col0, [&](int r, int i) { return sx[r * kSld + i]; },
        [&](int r, int x) { return es[r * kLd + x]; });
  }
  for (int half = 0; half < halves; ++half) {
    StageStateRows(st, after, a, half * 64);
    __syncthreads();
    if (live_k) {
      WarpMma<kSplit>(
          dk, 64, p.row0, p.col0,
          [&](int x, int i) { return wend[i] * vs[i * kLd + half * 64 + x]; },
          [&](int x, int j) { return st[x * kLd + j]; });
    }
    if (live_v && p.col0 == half * 64) {  // the warps whose columns x are this half's rows
      WarpMma<kSplit>(
          dv, RoundUp8(a.Dk), p.row0, p.col0,
          [&](int j, int i) { return wend[i] * ks[i * kLd + j]; },
          [&](int j, int x) { return st[(x - p.col0) * kLd + j]; });
    }
    __syncthreads();
  }
  const float* dn = after + int64_t(a.Dv) * a.Dk;
  T* dk_o = static_cast<T*>(dk_out);
  T* dv_o = static_cast<T*>(dv_out);
  float di[2] = {0.f, 0.f};  // ∂lw_i = k_i·∂k_i for rows g and g + 8 of this warp
  ForEachOut(dk, p.row0, p.col0, [&](int i, int j, float& v) {
    if (j >= a.Dk) return;
    const float g = v + wend[i] * dn[j];
    di[(i - p.row0) >> 3] += g * ks[i * kLd + j];
    if (i < n) dk_o[((int64_t(b) * a.T + t0 + i) * a.H + h) * a.Dk + j] = FromF<T>(g * a.k_scale);
  });
  if (live_v) {
    ForEachOut(dv, p.row0, p.col0, [&](int i, int x, float& v) {
      if (i < n && x < a.Dv) dv_o[((int64_t(b) * a.T + t0 + i) * a.H + h) * a.Dv + x] = FromF<T>(v);
    });
  }
  RowSums64x128(di[0], di[1], p.row0, row_sums);
  if (threadIdx.x < n) {
    const int i = threadIdx.x;
    a.dig[int64_t(bh) * a.T + t0 + i] = row_sums[i] + row_sums[kQ + i];
  }
}

// ∂log f_t = Σ_{s ≥ t, same document} (R_s − ∂lw_s) + Φ_final (0 at a document start), summed
// in double (the terms cancel: the sum is much smaller than they are); each thread a contiguous
// segment, the segments joined by a scan of their affine maps
// (acc_out = keep · acc_in + sum).
__global__ void __launch_bounds__(kThreads)
    ForgetSumKernel(Args a, const float* dc_final, const float* dn_final) {
  __shared__ double red[kThreads], sum_s[kThreads], carry_s[kThreads];
  __shared__ float keep_s[kThreads];
  const int bh = blockIdx.x, b = bh / a.H;
  double phi = 0.0;
  if (dc_final != nullptr) {
    const int64_t c_elems = int64_t(a.Dv) * a.Dk;
    const float* fs = a.final_state + int64_t(bh) * a.S;
    for (int64_t e = threadIdx.x; e < a.S; e += kThreads) {
      const float d =
          e < c_elems ? dc_final[bh * c_elems + e] : dn_final[int64_t(bh) * a.Dk + (e - c_elems)];
      phi += double(d) * fs[e];
    }
  }
  red[threadIdx.x] = phi;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  phi = red[0];
  const int per = (a.T + kThreads - 1) / kThreads;
  const int s0 = min(a.T, int(threadIdx.x) * per), s1 = min(a.T, s0 + per);
  const int64_t base = int64_t(bh) * a.T;
  float keep = 1.f;
  double sum = 0.0;
  for (int t = s1 - 1; t >= s0; --t) {
    sum += double(a.rescale[base + t]) - a.dig[base + t];
    if (Restarts(a, b, t)) {
      keep = 0.f;
      sum = 0.0;
    }
  }
  keep_s[threadIdx.x] = keep;
  sum_s[threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    double carry = phi;
    for (int s = kThreads - 1; s >= 0; --s) {
      carry_s[s] = carry;
      carry = keep_s[s] * carry + sum_s[s];
    }
  }
  __syncthreads();
  double acc = carry_s[threadIdx.x];
  for (int t = s1 - 1; t >= s0; --t) {
    acc += double(a.rescale[base + t]) - a.dig[base + t];
    const bool reset = Restarts(a, b, t);
    a.dlf[base + t] = reset ? 0.f : float(acc);
    if (reset) acc = 0.0;
  }
}

size_t Align(size_t x) { return (x + 255) & ~size_t(255); }

// The workspace's pieces in order; `base` null only sizes them.
size_t CarveInto(const Problem& p, char* base, Buffers* a) {
  const int64_t B = p.batch, T = p.seq_len, H = p.heads, C = p.Chunks(), S = p.StateFloats();
  size_t off = 0;
  auto take = [&](int64_t floats) {
    char* at = base == nullptr ? nullptr : base + off;
    off += Align(size_t(floats) * sizeof(float));
    return reinterpret_cast<float*>(at);
  };
  a->lw = take(B * H * T);
  a->bc = take(B * H * T);
  a->ml = take(B * H * T);
  a->lr = reinterpret_cast<int32_t*>(take(B * T));
  a->bend = take(B * H * C);
  a->mlend = take(B * H * C);
  a->mstart = take(B * H * (C + 1));
  a->states = take(B * H * C * S);
  a->final_state = take(B * H * S);
  a->dstates = take(B * H * C * S);
  a->ehat = take(B * T * H * p.value_dim);
  a->dden = take(B * H * T);
  a->rescale = take(B * H * T);
  a->dig = take(B * H * T);
  a->dlf = take(B * H * T);
  return off;
}

Args MakeArgs(const Problem& p, const Buffers& buffers) {
  Args a{};
  static_cast<Buffers&>(a) = buffers;
  a.B = int(p.batch);
  a.T = int(p.seq_len);
  a.H = int(p.heads);
  a.Dk = int(p.key_dim);
  a.Dv = int(p.value_dim);
  a.chunks = int(p.Chunks());
  a.S = p.StateFloats();
  a.q = p.q;
  a.k = p.k;
  a.v = p.v;
  a.k_scale = p.k_scale;
  a.eps = p.eps;
  a.normalised = p.readout == Readout::kNormalised;
  a.skip = p.skip;
  a.c0 = p.c0;
  a.n0 = p.n0;
  a.m0 = p.m0;
  a.doc_start = p.doc_start;
  a.restart_at_row_start = p.restart_at_row_start;
  return a;
}

template <typename T>
int ForwardStates(const Args& a, float* c_final, float* n_final, cudaStream_t s) {
  const size_t local_smem = (2 * kQ * kLd + kQ) * sizeof(float);
  cudaFuncSetAttribute(LocalStateKernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       int(local_smem));
  LocalStateKernel<T><<<dim3(a.chunks, a.H, a.B), kThreads, local_smem, s>>>(a);
  const unsigned tiles = unsigned((a.S + kThreads - 1) / kThreads);
  StatePassKernel<<<dim3(tiles, a.H, a.B), kThreads, 0, s>>>(a, c_final, n_final);
  return int(cudaGetLastError());
}

template <typename T>
int ForwardT(const Args& a, void* h, float* c_final, float* n_final, float* m_final,
             cudaStream_t s) {
  if (int e = ForwardStates<T>(a, c_final, n_final, s); e != 0) return e;
  cudaFuncSetAttribute(ReadoutKernel<T, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       int(kReadoutSmem));
  ReadoutKernel<T, false>
      <<<dim3(a.chunks, a.H, a.B), kThreads, kReadoutSmem, s>>>(a, h, nullptr, m_final);
  return int(cudaGetLastError());
}

template <typename T>
int BackwardT(const Args& a, const void* dh, const float* dc_final, const float* dn_final, void* dq,
              void* dk, void* dv, float* dc0, float* dn0, bool states_valid, cudaStream_t s) {
  if (!states_valid) {
    if (int e = ForwardStates<T>(a, nullptr, nullptr, s); e != 0) return e;
  }
  cudaFuncSetAttribute(ReadoutKernel<T, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       int(kReadoutSmem));
  ReadoutKernel<T, true>
      <<<dim3(a.chunks, a.H, a.B), kThreads, kReadoutSmem, s>>>(a, nullptr, dh, nullptr);
  const unsigned tiles = unsigned((a.S + kThreads - 1) / kThreads);
  ReversePassKernel<<<dim3(tiles, a.H, a.B), kThreads, 0, s>>>(a, dc_final, dn_final, dc0, dn0);
  cudaFuncSetAttribute(GradKernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kGradSmem));
  GradKernel<T><<<dim3(a.chunks, a.H, a.B), kThreads, kGradSmem, s>>>(a, dq, dk, dv);
  ForgetSumKernel<<<a.B * a.H, kThreads, 0, s>>>(a, dc_final, dn_final);
  return int(cudaGetLastError());
}

}  // namespace

bool Supported(const Problem& p) {
  return p.batch >= 1 && p.seq_len >= 1 && p.heads >= 1 && p.key_dim >= 1 && p.key_dim <= kMaxDim &&
         p.value_dim >= 1 && p.value_dim <= kMaxDim;
}

size_t WorkspaceBytes(const Problem& p) {
  Buffers b{};
  return CarveInto(p, nullptr, &b);
}

Buffers Carve(const Problem& p, void* workspace) {
  Buffers b{};
  CarveInto(p, static_cast<char*>(workspace), &b);
  return b;
}

int Forward(const Problem& p, const Buffers& buffers, void* h, float* c_final, float* n_final,
            float* m_final, void* stream) {
  if (!Supported(p)) return int(cudaErrorInvalidValue);
  const Args a = MakeArgs(p, buffers);
  auto s = static_cast<cudaStream_t>(stream);
  return p.bf16 ? ForwardT<__nv_bfloat16>(a, h, c_final, n_final, m_final, s)
                : ForwardT<float>(a, h, c_final, n_final, m_final, s);
}

int Backward(const Problem& p, const Buffers& buffers, const void* dh, const float* dc_final,
             const float* dn_final, void* dq, void* dk, void* dv, float* dc0, float* dn0,
             bool states_valid, void* stream) {
  if (!Supported(p)) return int(cudaErrorInvalidValue);
  const Args a = MakeArgs(p, buffers);
  auto s = static_cast<cudaStream_t>(stream);
  return p.bf16
             ? BackwardT<__nv_bfloat16>(a, dh, dc_final, dn_final, dq, dk, dv, dc0, dn0,
                                        states_valid, s)
             : BackwardT<float>(a, dh, dc_final, dn_final, dq, dk, dv, dc0, dn0, states_valid, s);
}

}  // namespace mesa::kernels::cuda::gated_scan
