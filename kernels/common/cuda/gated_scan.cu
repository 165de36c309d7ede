// The gated scan (gated_scan.h) on the GPU. Six kernels after the operator's gate kernel:
//   LocalState  per chunk: its own write Σ_i e^{b_end − b_i + lw_i − m^loc_end} v_i k_iᵀ (and n').
//   StatePass   per state element: the chunk-start states in order, m_c from the summaries.
//   Readout     per chunk: scores, the stabilised numerator and denominator, h; in the backward
//               also ê, δden, R and the chunk's own ∂S' term Σ_r g_r ê_r q_rᵀ.
//   ReversePass per state element: ∂S' after every chunk, in reverse.
//   Grad        per chunk: ∂q, ∂k, ∂v, ∂lw = k·∂k.
//   ForgetSum   per (row, head): ∂log f as the reverse cumulative sum of R − ∂lw (docs/math.md).
// Float32 SIMT arithmetic from shared-memory tiles (the tensor-core version is the next step).
#include "kernels/common/cuda/gated_scan.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/common/cuda/gated_scan.cuh"

namespace mesa::kernels::cuda::gated_scan {
namespace {

constexpr int kQ = kChunk;
constexpr int kD = kMaxDim;
constexpr int kLd = kD + 4;   // smem row stride (floats) of a token tile
constexpr int kSld = kQ + 4;  // smem row stride of a 64 × 64 score tile
constexpr int kThreads = 256;
constexpr int kPassBatch = 8;  // chunks whose states a pass thread loads at once
constexpr float kNegInf = -INFINITY;

// Sum over the 16 lanes that share a tile row (lanes l and l ^ 1, 2, 4, 8).
__device__ __forceinline__ float RowSum16(float v) {
  for (int o = 1; o < 16; o <<= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The register-tile product every kernel here is made of: acc[x][y] += Σ_{k < K} a(k, x) b(k, y),
// a and b reading shared memory (this thread's rows and columns of the tile).
template <int M, int N, typename A, typename B>
__device__ __forceinline__ void TileMac(float (&acc)[M][N], int K, A a, B b) {
  for (int k = 0; k < K; ++k) {
    float av[M], bv[N];
#pragma unroll
    for (int x = 0; x < M; ++x) av[x] = a(k, x);
#pragma unroll
    for (int y = 0; y < N; ++y) bv[y] = b(k, y);
#pragma unroll
    for (int x = 0; x < M; ++x)
#pragma unroll
      for (int y = 0; y < N; ++y) acc[x][y] += av[x] * bv[y];
  }
}

// Accessors of a kLd-strided token tile for TileMac with k along the columns: this thread's rows
// ty·4 + x (RowsOf) or tx + 16·y (ColsOf).
__device__ __forceinline__ auto RowsOf(const float* tile, int ty) {
  return [=](int k, int x) { return tile[(ty * 4 + x) * kLd + k]; };
}
__device__ __forceinline__ auto ColsOf(const float* tile, int tx) {
  return [=](int k, int y) { return tile[(tx + 16 * y) * kLd + k]; };
}
// ... with k along the rows: columns tx + 16·y of row k (a kLd or kSld tile).
__device__ __forceinline__ auto RowK(const float* tile, int ld, int tx) {
  return [=](int k, int y) { return tile[k * ld + tx + 16 * y]; };
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
// kQ × kLd tile, times `scale`, zero outside (rows ≥ n, columns ≥ D).
template <typename T>
__device__ void StageTokens(float* tile, const T* src, const Args& a, int b, int h, int t0, int n,
                            int D, float scale) {
  for (int idx = threadIdx.x; idx < kQ * kD; idx += kThreads) {
    const int r = idx / kD, j = idx % kD;
    float x = 0.f;
    if (r < n && j < D) x = ToF(src[((int64_t(b) * a.T + t0 + r) * a.H + h) * D + j]) * scale;
    tile[r * kLd + j] = x;
  }
}

// Rows [x0, x0 + 64) of a [Dv, Dk] state matrix into a 64 × kLd tile (zero outside).
__device__ void StageStateRows(float* tile, const float* state, const Args& a, int x0) {
  for (int idx = threadIdx.x; idx < 64 * kD; idx += kThreads) {
    const int xr = idx / kD, j = idx % kD, x = x0 + xr;
    tile[xr * kLd + j] = (x < a.Dv && j < a.Dk) ? state[int64_t(x) * a.Dk + j] : 0.f;
  }
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
// matrix; threads tile x by ty·8.. and j by tx + 16·jj) and slot[Dv·Dk + j] = Σ_r w[r] ks[r][j].
__device__ void StoreOuterSum(float* slot, const Args& a, int n, const float* us, const float* ks,
                              const float* w) {
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  float acc[8][8] = {};
  TileMac(
      acc, n, [&](int r, int x) { return us[r * kLd + ty * 8 + x]; },
      [&](int r, int jj) { return ks[r * kLd + tx + 16 * jj]; });
#pragma unroll
  for (int x = 0; x < 8; ++x) {
    const int row = ty * 8 + x;
#pragma unroll
    for (int jj = 0; jj < 8; ++jj) {
      const int j = tx + 16 * jj;
      if (row < a.Dv && j < a.Dk) slot[int64_t(row) * a.Dk + j] = acc[x][jj];
    }
  }
  for (int j = threadIdx.x; j < a.Dk; j += kThreads) {
    float sum = 0.f;
    for (int r = 0; r < n; ++r) sum += w[r] * ks[r * kLd + j];
    slot[int64_t(a.Dv) * a.Dk + j] = sum;
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) LocalStateKernel(Args a) {
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

// Shared memory of the Readout kernel (floats): q, k (later state rows), v (later ê), scores.
constexpr size_t kReadoutSmem =
    (3 * kQ * kLd + kQ * kSld) * sizeof(float) + sizeof(RowScalars) + 2 * kQ * sizeof(float);

template <typename T, bool kBackward>
__global__ void __launch_bounds__(kThreads)
    ReadoutKernel(Args a, void* h_out, const void* dh, float* m_final) {
  extern __shared__ float smem[];
  float* qs = smem;
  float* ks = qs + kQ * kLd;  // k, then 64 rows of S'_c at a time
  float* vs = ks + kQ * kLd;  // v, then ê
  float* ss = vs + kQ * kLd;  // W (q·k)
  RowScalars& rs = *reinterpret_cast<RowScalars*>(ss + kQ * kSld);
  float* den = reinterpret_cast<float*>(&rs + 1);
  float* gden = den + kQ;  // g_r δden_r
  const int c = blockIdx.x, h = blockIdx.y, b = blockIdx.z, bh = b * a.H + h;
  const int t0 = c * kQ, n = min(a.T - t0, kQ);
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  const float* start = a.states + (int64_t(bh) * a.chunks + c) * a.S;
  LoadRowScalars(rs, a, b, h, c, t0, n);
  StageTokens(qs, static_cast<const T*>(a.q), a, b, h, t0, n, a.Dk, 1.f);
  StageTokens(ks, static_cast<const T*>(a.k), a, b, h, t0, n, a.Dk, a.k_scale);
  StageTokens(vs, static_cast<const T*>(a.v), a, b, h, t0, n, a.Dv, 1.f);
  __syncthreads();
  {  // ss[r][i] = W[r, i] (q_r·k_i): rows ty*4.., columns tx + 16 jj
    float acc[4][4] = {};
    TileMac(acc, a.Dk, RowsOf(qs, ty), ColsOf(ks, tx));
#pragma unroll
    for (int x = 0; x < 4; ++x)
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        const int r = ty * 4 + x, i = tx + 16 * jj;
        ss[r * kSld + i] = Weight(rs, r, i, n) * acc[x][jj];
      }
  }
  __syncthreads();
  if (threadIdx.x < kQ) {  // den_r = Σ_i ss[r][i] + g_r n'_c·q_r
    const int r = threadIdx.x;
    float d = 0.f;
    for (int i = 0; i < kQ; ++i) d += ss[r * kSld + i];
    if (rs.g[r] != 0.f) {
      const float* nc = start + int64_t(a.Dv) * a.Dk;
      float nq = 0.f;
      for (int j = 0; j < a.Dk; ++j) nq += nc[j] * qs[r * kLd + j];
      d += rs.g[r] * nq;
    }
    den[r] = d;
  }
  // num[r][x] = Σ_i ss[r][i] v_i[x] + g_r (S'_c q_r)[x]: rows ty*4.., columns x = tx + 16 jj.
  float num[4][8] = {};
  TileMac(
      num, n, [&](int i, int x) { return ss[(ty * 4 + x) * kSld + i]; }, RowK(vs, kLd, tx));
  for (int half = 0; half * 64 < a.Dv; ++half) {
    __syncthreads();  // ks is free (scores done) / the previous half is consumed
    StageStateRows(ks, start, a, half * 64);
    __syncthreads();
    float part[4][4] = {};
    TileMac(part, a.Dk, RowsOf(qs, ty), ColsOf(ks, tx));
#pragma unroll
    for (int x = 0; x < 4; ++x)
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) num[x][half * 4 + jj] += rs.g[ty * 4 + x] * part[x][jj];
  }
  __syncthreads();  // den visible
  if constexpr (!kBackward) {
    if (m_final != nullptr && c == 0 && threadIdx.x == 0) {
      m_final[bh] = a.mstart[int64_t(bh) * (a.chunks + 1) + a.chunks];
    }
    T* out = static_cast<T*>(h_out);
#pragma unroll
    for (int x = 0; x < 4; ++x) {
      const int r = ty * 4 + x;
      if (r >= n) continue;
      const float scale = a.normalised ? 1.f / (fmaxf(fabsf(den[r]), expf(-rs.m[r])) + a.eps) : 1.f;
      const float skip = a.skip != nullptr ? a.skip[h] : 0.f;
      T* row = out + ((int64_t(b) * a.T + t0 + r) * a.H + h) * a.Dv;
#pragma unroll
      for (int jj = 0; jj < 8; ++jj) {
        const int xc = tx + 16 * jj;
        if (xc < a.Dv) row[xc] = FromF<T>(num[x][jj] * scale + skip * vs[r * kLd + xc]);
      }
    }
  } else {
    // ê = e / D, δden = −(e·h)/D sign(den) above the floor, R = ê·num + δden den (kPlain: ê = e,
    // δden = 0; the skip's gradients are the operator's).
    const T* e_in = static_cast<const T*>(dh);
    float e_hat[4][8];
#pragma unroll
    for (int x = 0; x < 4; ++x) {
      const int r = ty * 4 + x;
      const bool live = r < n;
      const float dr = live ? den[r] : 0.f, floor = live ? expf(-rs.m[r]) : 1.f;
      const float scale = a.normalised ? 1.f / (fmaxf(fabsf(dr), floor) + a.eps) : 1.f;
      const int64_t row = ((int64_t(b) * a.T + t0 + min(r, n - 1)) * a.H + h) * a.Dv;
      float e_h = 0.f;
#pragma unroll
      for (int jj = 0; jj < 8; ++jj) {
        const int xc = tx + 16 * jj;
        const float e = (live && xc < a.Dv) ? ToF(e_in[row + xc]) : 0.f;
        e_hat[x][jj] = e * scale;
        e_h += e * num[x][jj] * scale;
      }
      e_h = RowSum16(e_h);
      const float dd = a.normalised && fabsf(dr) > floor ? (dr >= 0.f ? -e_h : e_h) * scale : 0.f;
      if (tx == 0 && live) {
        const int64_t g = int64_t(bh) * a.T + t0 + r;
        a.dden[g] = dd;
        a.rescale[g] = e_h + dd * dr;
        gden[r] = rs.g[r] * dd;
      } else if (tx == 0) {
        gden[r] = 0.f;
      }
    }
    // g_r ê_r into vs (v is no longer needed), ê into the workspace.
#pragma unroll
    for (int x = 0; x < 4; ++x) {
      const int r = ty * 4 + x;
#pragma unroll
      for (int jj = 0; jj < 8; ++jj) {
        const int xc = tx + 16 * jj;
        vs[r * kLd + xc] = (r < n ? rs.g[r] : 0.f) * e_hat[x][jj];  // g_r ê_r
        if (r < n && xc < a.Dv) {
          a.ehat[((int64_t(b) * a.T + t0 + r) * a.H + h) * a.Dv + xc] = e_hat[x][jj];
        }
      }
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

constexpr size_t kGradSmem =
    (5 * kQ * kLd + 2 * kQ * kSld + kQ) * sizeof(float) + sizeof(RowScalars) + kQ * sizeof(float);

template <typename T>
__global__ void __launch_bounds__(kThreads)
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
  const int c = blockIdx.x, h = blockIdx.y, b = blockIdx.z, bh = b * a.H + h;
  const int t0 = c * kQ, n = min(a.T - t0, kQ);
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  const float* start = a.states + (int64_t(bh) * a.chunks + c) * a.S;
  const float* after = a.dstates + (int64_t(bh) * a.chunks + c) * a.S;
  LoadRowScalars(rs, a, b, h, c, t0, n);
  StageTokens(qs, static_cast<const T*>(a.q), a, b, h, t0, n, a.Dk, 1.f);
  StageTokens(ks, static_cast<const T*>(a.k), a, b, h, t0, n, a.Dk, a.k_scale);
  StageTokens(vs, static_cast<const T*>(a.v), a, b, h, t0, n, a.Dv, 1.f);
  for (int idx = threadIdx.x; idx < kQ * kD; idx += kThreads) {
    const int r = idx / kD, x = idx % kD;
    es[r * kLd + x] =
        (r < n && x < a.Dv) ? a.ehat[((int64_t(b) * a.T + t0 + r) * a.H + h) * a.Dv + x] : 0.f;
  }
  if (threadIdx.x < kQ) {
    const int r = threadIdx.x;
    dden[r] = r < n ? a.dden[int64_t(bh) * a.T + t0 + r] : 0.f;
  }
  __syncthreads();
  if (threadIdx.x < kQ) wend[threadIdx.x] = Weight(rs, n - 1, threadIdx.x, n);
  {  // as, sx: rows r = ty*4.., columns i = tx + 16 jj
    float ev[4][4] = {}, qk[4][4] = {};
    TileMac(ev, a.Dv, RowsOf(es, ty), ColsOf(vs, tx));
    TileMac(qk, a.Dk, RowsOf(qs, ty), ColsOf(ks, tx));
#pragma unroll
    for (int x = 0; x < 4; ++x)
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        const int r = ty * 4 + x, i = tx + 16 * jj;
        const float w = Weight(rs, r, i, n);
        as[r * kSld + i] = w * (ev[x][jj] + dden[r]);
        sx[r * kSld + i] = w * qk[x][jj];
      }
  }
  __syncthreads();
  // dq[r][j] = Σ_i as[r][i] k_i[j] + g_r (Σ_x ê_r[x] S'[x][j] + δden_r n'[j]).
  float dq[4][8] = {};
  TileMac(
      dq, n, [&](int i, int x) { return as[(ty * 4 + x) * kSld + i]; }, RowK(ks, kLd, tx));
  {
    float inter[4][8] = {};
    for (int half = 0; half * 64 < a.Dv; ++half) {
      StageStateRows(st, start, a, half * 64);
      __syncthreads();
      TileMac(inter, 64, RowsOf(es + half * 64, ty), RowK(st, kLd, tx));
      __syncthreads();
    }
    const float* nc = start + int64_t(a.Dv) * a.Dk;
    T* out = static_cast<T*>(dq_out);
#pragma unroll
    for (int x = 0; x < 4; ++x) {
      const int r = ty * 4 + x;
      if (r >= n) continue;
      T* row = out + ((int64_t(b) * a.T + t0 + r) * a.H + h) * a.Dk;
#pragma unroll
      for (int jj = 0; jj < 8; ++jj) {
        const int j = tx + 16 * jj;
        if (j >= a.Dk) continue;
        row[j] = FromF<T>(dq[x][jj] + rs.g[r] * (inter[x][jj] + dden[r] * nc[j]));
      }
    }
  }
  // dk[i][j] = Σ_r as[r][i] q_r[j] + wend_i (Σ_x v_i[x] ∂S'[x][j] + ∂n'[j]);
  // dv[i][x] = Σ_r sx[r][i] ê_r[x] + wend_i Σ_j k_i[j] ∂S'[x][j]. Rows i = ty*4...
  float dk[4][8] = {}, dv[4][8] = {};
  TileMac(
      dk, n, [&](int r, int x) { return as[r * kSld + ty * 4 + x]; }, RowK(qs, kLd, tx));
  TileMac(
      dv, n, [&](int r, int x) { return sx[r * kSld + ty * 4 + x]; }, RowK(es, kLd, tx));
  {
    float ik[4][8] = {}, iv[4][8] = {};
    for (int half = 0; half * 64 < a.Dv; ++half) {
      StageStateRows(st, after, a, half * 64);
      __syncthreads();
      // ik[i][j] += v_i[x] ∂S'[x][j]; iv[i][x] += k_i[j] ∂S'[x][j] for x in this half.
      TileMac(ik, 64, RowsOf(vs + half * 64, ty), RowK(st, kLd, tx));
      float part[4][4] = {};
      TileMac(part, a.Dk, RowsOf(ks, ty), ColsOf(st, tx));
#pragma unroll
      for (int x = 0; x < 4; ++x)
#pragma unroll
        for (int y = 0; y < 4; ++y) iv[x][half * 4 + y] += part[x][y];
      __syncthreads();
    }
    const float* dn = after + int64_t(a.Dv) * a.Dk;
    T* dk_o = static_cast<T*>(dk_out);
    T* dv_o = static_cast<T*>(dv_out);
#pragma unroll
    for (int x = 0; x < 4; ++x) {
      const int i = ty * 4 + x;
      const float w = wend[i];
      float di = 0.f;
      const bool live = i < n;
      const int64_t tok = (int64_t(b) * a.T + t0 + min(i, n - 1)) * a.H + h;
#pragma unroll
      for (int jj = 0; jj < 8; ++jj) {
        const int j = tx + 16 * jj;
        const float g = dk[x][jj] + w * (ik[x][jj] + (j < a.Dk ? dn[j] : 0.f));
        di += g * ks[i * kLd + j];
        if (live && j < a.Dk) dk_o[tok * a.Dk + j] = FromF<T>(g * a.k_scale);
        if (live && j < a.Dv) dv_o[tok * a.Dv + j] = FromF<T>(dv[x][jj] + w * iv[x][jj]);
      }
      di = RowSum16(di);
      if (tx == 0 && live) a.dig[int64_t(bh) * a.T + t0 + i] = di;
    }
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
