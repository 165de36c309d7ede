// Backward kernels of the DeltaNet-family CUDA operator (kernels/deltanet/README.md, "Chunked
// backward"), after a recompute of the forward's chunk quantities (Prepare, StateForward):
//   StateBackward (sequential, reverse, one CTA per sequence, head and value block): dX and the
//                 gradients w.r.t. the chunk-end states, ds0.
//   ChunkBackward (parallel, one CTA per chunk and head): dq, dk, dv, dbeta, dlog_gamma.
#include "kernels/deltanet/cuda/deltanet_common.cuh"

namespace mesa::kernels::deltanet::cuda {
namespace {

template <int DP>
constexpr int StateBackwardSmemBytes() {
  constexpr int BV = kValueBlock;
  return (3 * kChunk * kPad<DP> + kChunk * kPad<64> + 3 * kChunk * kPad<BV> + BV * kPad<DP>)*2 +
         static_cast<int>(sizeof(ChunkGates));
}

// 8 warps, laid out as in StateForwardKernel (deltanet_forward.cu).
template <int DP, typename T>
__global__ void __launch_bounds__(256, 2)
    StateBackwardKernel(KernelProblem p, StateBackwardArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int BV = kValueBlock, LD = kPad<DP>, L64 = kPad<64>, LV = kPad<BV>;
  constexpr int NTS = DP / 16;
  static_assert(BV == 64, "warp layout");
  bf16* ws = reinterpret_cast<bf16*>(smem);
  bf16* qs = ws + kChunk * LD;
  bf16* ks = qs + kChunk * LD;
  bf16* ps = ks + kChunk * LD;
  bf16* dos = ps + kChunk * L64;   // dO (the block's value columns)
  bf16* dogs = dos + kChunk * LV;  // diag(gamma) dO
  bf16* dxb = dogs + kChunk * LV;
  bf16* dsb = dxb + kChunk * LV;
  ChunkGates* gs = reinterpret_cast<ChunkGates*>(dsb + BV * LD);

  const int seq = blockIdx.x, h = blockIdx.y, v0 = blockIdx.z * BV;
  const int4 sq = p.seqs[seq];
  const int first = sq.z, nc = sq.w;
  const int H = p.heads, D = p.head_dim;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2;
  const int rw = 16 * (warp & 3), cv = 32 * (warp >> 2);
  const int s_row0 = 16 * (warp & 3), s_col0 = (DP / 2) * (warp >> 2);
  const int64_t state_off = (static_cast<int64_t>(seq) * H + h) * D * D;

  float ds[NTS][4];
  LoadStateBlock(ds, a.ds_final == nullptr ? nullptr : a.ds_final + state_off, D, v0, s_row0,
                 s_col0, lane);

  int4 ch_next = nc > 0 ? p.chunks[first + nc - 1] : make_int4(0, 0, 0, 0);
  GateRegs gates_next = FetchGates(a.log_gamma, a.beta, ch_next.y, ch_next.z, H, h);
#pragma unroll 1
  for (int ci = nc - 1; ci >= 0; --ci) {
    const int chunk = first + ci;
    const int4 ch = ch_next;
    const int tok0 = ch.y, len = ch.z;
    const GateRegs gates = gates_next;
    if (ci > 0) {  // the next chunk's gates, a chunk ahead
      ch_next = p.chunks[chunk - 1];
      gates_next = FetchGates(a.log_gamma, a.beta, ch_next.y, ch_next.z, H, h);
    }
    const int64_t in_row0 = (static_cast<int64_t>(tok0) * H + h) * D;
    const int64_t in_stride = static_cast<int64_t>(H) * D;
    const int64_t ws_row0 = (static_cast<int64_t>(tok0) * H + h) * DP;
    const int64_t ws_stride = static_cast<int64_t>(H) * DP;
    StageRowsAsync<DP>(ws, LD, a.w, ws_row0, ws_stride, len, DP);
    StageRowsAsync<64>(ps, L64, a.p + (static_cast<int64_t>(chunk) * H + h) * kChunk * kChunk, 0,
                       kChunk, kChunk, kChunk);
    StageInput<BV>(dos, LV, static_cast<const T*>(a.d_o), in_row0 + v0, in_stride, len, D - v0);
    StageInput<DP>(qs, LD, static_cast<const T*>(a.q), in_row0, in_stride, len, D);
    StageInput<DP>(ks, LD, static_cast<const T*>(a.k), in_row0, in_stride, len, D);
    StoreAccBf16(ds, dsb, LD, s_row0, s_col0, lane);
    SetGates(gs, gates, len);
    ::mesa::kernels::cuda::CpAsyncWaitAll();
    __syncthreads();
    StoreTileRows<DP>(dsb, LD, a.ds_chunk + ((static_cast<int64_t>(chunk) * H + h) * DP + v0) * DP,
                      DP, BV);

    // diag(gamma) dO for the state update (read after the next barrier).
    for (int idx = tid; idx < kChunk * BV / 8; idx += blockDim.x) {
      const int r = idx / (BV / 8), g8 = idx % (BV / 8);
      uint4 u = *reinterpret_cast<const uint4*>(dos + r * LV + g8 * 8);
      const float sc = gs->gam[r];
      uint32_t* w = reinterpret_cast<uint32_t*>(&u);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 f = __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&w[i]));
        w[i] = PackBf162(f.x * sc, f.y * sc);
      }
      *reinterpret_cast<uint4*>(dogs + r * LV + g8 * 8) = u;
    }
    // dX = P^T dO + diag(dec) K dS^T.
    float dx[4][4], kd[4][4];
    ZeroAcc(dx);
    ZeroAcc(kd);
    WarpGemm<4, kChunk, true, true>(dx, ps, L64, rw, dos, LV, cv, lane);
    WarpGemm<4, DP, false, false>(kd, ks, LD, rw, dsb, LD, cv, lane);
    {
      const float d0 = gs->dec[rw + g], d1 = gs->dec[rw + g + 8];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        dx[j][0] += d0 * kd[j][0];
        dx[j][1] += d0 * kd[j][1];
        dx[j][2] += d1 * kd[j][2];
        dx[j][3] += d1 * kd[j][3];
      }
    }
    StoreAccBf16(dx, dxb, LV, rw, cv, lane);
    __syncthreads();  // dxb, dogs complete
    StoreTileRows<BV>(dxb, LV, a.dx + ws_row0 + v0, ws_stride, len);

    // dS <- gamma_n dS + (diag(gamma) dO)^T Q - dX^T W.
    const float gl = gs->gam_last;
#pragma unroll
    for (int j = 0; j < NTS; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) ds[j][e] *= gl;
    WarpGemm<NTS, kChunk, true, true>(ds, dogs, LV, s_row0, qs, LD, s_col0, lane);
    WarpGemm<NTS, kChunk, true, true, true>(ds, dxb, LV, s_row0, ws, LD, s_col0, lane);
    __syncthreads();
  }

  if (a.ds0 != nullptr) StoreStateBlock(ds, a.ds0 + state_off, D, v0, s_row0, s_col0, lane);
}

// Per-row sums of the chunk backward: db (gate log-prefix gradients) as one partial sum per warp,
// which only that warp adds to (in program order, no atomics), and dbeta as six partial sums per
// row (three terms x two column halves), each written by exactly one lane. Both are added in a
// fixed order at the end, so they repeat bit for bit.
constexpr int kBackwardWarps = 8;
struct RowSums {
  float db[kBackwardWarps][kChunk];
  float dbeta[6][kChunk];
};

// Shared memory of ChunkBackward, sized for 2 CTAs per SM at DP = 128 (~107 KB): five slots
// that change hands phase by phase (what each holds: ChunkBackwardKernel), the dP and E tiles,
// gates and row sums. The states S_c, dS_c (DP x DP) pass through in value-row halves.
template <int DP>
constexpr int CbTileBytes() {
  return kChunk * kPad<DP> * 2;
}
template <int DP>
constexpr int CbMixBytes() {  // A + P, later a half state, later half of dS_c
  return 2 * kChunk * kPad<64> * 2 > (DP / 2) * kPad<DP> * 2 ? 2 * kChunk * kPad<64> * 2
                                                             : (DP / 2) * kPad<DP> * 2;
}
template <int DP>
constexpr int ChunkBackwardSmemBytes() {
  return 4 * CbTileBytes<DP>() + CbMixBytes<DP>() + 2 * kChunk * kPad<64> * 2 +
         static_cast<int>(sizeof(ChunkGates) + sizeof(RowSums));
}
// Two CTAs per SM (228 KB of shared memory on Hopper, 1 KB of it reserved per CTA).
static_assert(2 * (ChunkBackwardSmemBytes<128>() + 1024) <= 228 * 1024, "2 CTAs per SM");

// Adds a row total (already summed over the quad) to the warp's own sums[row] from one lane of the
// quad (distinct rows per lane; __syncwarp orders it after the warp's earlier adds).
__device__ __forceinline__ void AddRow(float* sums, int row, float v, int lane) {
  __syncwarp();
  if ((lane & 3) == 0) sums[row] += v;
}
// Subtracts column totals from sums[]: col[j][e] is this lane's part of column
// c0 + 8 j + 2 (lane % 4) + e; the 8 lanes sharing a column (lane / 4 = 0..7) are summed by
// shuffles first; lanes 0-3 then subtract distinct columns from the warp's own sums.
__device__ __forceinline__ void SubtractColumns(float* sums, float (&col)[4][2], int c0, int lane) {
  __syncwarp();
#pragma unroll
  for (int j = 0; j < 4; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      float v = col[j][e];
      v += __shfl_xor_sync(0xffffffffu, v, 4);
      v += __shfl_xor_sync(0xffffffffu, v, 8);
      v += __shfl_xor_sync(0xffffffffu, v, 16);
      if ((lane >> 2) == 0) sums[c0 + 8 * j + 2 * (lane & 3) + e] -= v;
    }
}
// Stores a row total into its own partial-sum slot from one lane of the quad.
__device__ __forceinline__ void SetRow(float* slot, int row, float v, int lane) {
  if ((lane & 3) == 0) slot[row] = v;
}

// 8 warps; 2 CTAs per SM at DP = 128. Slots (ChunkBackwardSmemBytes), by phase:
//   u0: dX -> dR -> dS_c value rows DP/2..      u1: dO -> Q      u2: X      u3: K
//   mix: A + P -> S_c value rows 0..DP/2-1, then DP/2.. -> dS_c value rows 0..DP/2-1
// The three products with a state contract over its value rows, so each is summed over the two
// halves. Loads: (dO, K, X, dX, A, P) | S_c half 0 (overlaps dM) | S_c half 1 | Q, dS_c.
template <int DP, typename T>
__global__ void __launch_bounds__(256, 2)
    ChunkBackwardKernel(KernelProblem p, ChunkBackwardArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int LD = kPad<DP>, L64 = kPad<64>;
  constexpr int NTD = DP / 16;  // a warp's DP/2 columns of a 64 x DP product
  constexpr int HS = DP / 2;    // value rows of a state half
  bf16* u0 = reinterpret_cast<bf16*>(smem);
  bf16* dos = u0 + kChunk * LD;  // u1
  bf16* xs = dos + kChunk * LD;  // u2
  bf16* ks = xs + kChunk * LD;   // u3
  bf16* mix = ks + kChunk * LD;
  bf16* as = mix;
  bf16* ps = mix + kChunk * L64;
  bf16* dpg = reinterpret_cast<bf16*>(smem + 4 * CbTileBytes<DP>() + CbMixBytes<DP>());
  bf16* es = dpg + kChunk * L64;  // dM ⊙ Γ ⊙ beta_row (strictly lower)
  ChunkGates* gs = reinterpret_cast<ChunkGates*>(es + kChunk * L64);
  RowSums* rs = reinterpret_cast<RowSums*>(gs + 1);
  bf16* const dxs = u0;
  bf16* const drs = u0;
  bf16* const qs = dos;

  const int chunk = blockIdx.x, h = blockIdx.y;
  const int4 ch = p.chunks[chunk];
  const int tok0 = ch.y, len = ch.z;
  const int H = p.heads, D = p.head_dim;
  const bool gated = a.log_gamma != nullptr;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, c = lane & 3;
  const int rw = 16 * (warp & 3);         // the warp's 16 rows
  const int c64 = 32 * (warp >> 2);       // its 32 columns of a 64 x 64 product
  const int cd = (DP / 2) * (warp >> 2);  // its DP/2 columns of a 64 x DP product
  const int r0 = rw + g, r1 = r0 + 8;
  const int64_t in_row0 = (static_cast<int64_t>(tok0) * H + h) * D;
  const int64_t in_stride = static_cast<int64_t>(H) * D;
  const int64_t ws_row0 = (static_cast<int64_t>(tok0) * H + h) * DP;
  const int64_t ws_stride = static_cast<int64_t>(H) * DP;
  const int64_t ch_off = static_cast<int64_t>(chunk) * H + h;
  const bf16* s_c = a.s_chunk + ch_off * DP * DP;
  const bf16* ds_c = a.ds_chunk + ch_off * DP * DP;

  StageInput<DP>(dos, LD, static_cast<const T*>(a.d_o), in_row0, in_stride, len, D);
  StageInput<DP>(ks, LD, static_cast<const T*>(a.k), in_row0, in_stride, len, D);
  StageRowsAsync<DP>(xs, LD, a.x, ws_row0, ws_stride, len, DP);
  StageRowsAsync<DP>(dxs, LD, a.dx, ws_row0, ws_stride, len, DP);
  StageRowsAsync<64>(as, L64, a.a + ch_off * kChunk * kChunk, 0, kChunk, kChunk, kChunk);
  if (gated) StageRowsAsync<64>(ps, L64, a.p + ch_off * kChunk * kChunk, 0, kChunk, kChunk, kChunk);
  CpAsyncCommit();
  if (tid < kChunk) {
    for (int w = 0; w < kBackwardWarps; ++w) rs->db[w][tid] = 0.f;
    for (int slot = 0; slot < 6; ++slot) rs->dbeta[slot][tid] = 0.f;
  }
  LoadGates(gs, a.log_gamma, a.beta, tok0, len, H, h);
  ::mesa::kernels::cuda::CpAsyncWaitAll();
  __syncthreads();

  const float* b = gs->b;
  float gram[4][4];
  // Phase 1: dP = dO X^T -> dP ⊙ Γ and the P gate terms; K K^T for L; dR = A^T dX -> dv, dbeta.
  {
    float dp[4][4];
    ZeroAcc(dp);
    ZeroAcc(gram);
    WarpGemm<4, DP, false, false>(dp, dos, LD, rw, xs, LD, c64, lane);
    WarpGemm<4, DP, false, false>(gram, ks, LD, rw, ks, LD, c64, lane);
    float row_lo = 0.f, row_hi = 0.f, col[4][2] = {};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = rw + g + 8 * half;
        float v[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int i = c64 + 8 * j + 2 * c + e;
          const float gr = i <= r ? __expf(b[r] - b[i]) : 0.f;
          const float d = dp[j][2 * half + e];
          v[e] = d * gr;
          if (gated && i <= r) {
            const float gp = d * __bfloat162float(ps[r * L64 + i]);
            (half ? row_hi : row_lo) += gp;
            col[j][e] += gp;
          }
        }
        *reinterpret_cast<uint32_t*>(dpg + r * L64 + c64 + 8 * j + 2 * c) = PackBf162(v[0], v[1]);
      }
    }
    if (gated) {
      SubtractColumns(rs->db[warp], col, c64, lane);
      row_lo = ::mesa::kernels::cuda::QuadSum(row_lo);
      row_hi = ::mesa::kernels::cuda::QuadSum(row_hi);
      AddRow(rs->db[warp], r0, row_lo, lane);
      AddRow(rs->db[warp], r1, row_hi, lane);
    }
  }
  {
    float dr[NTD][4];
    ZeroAcc(dr);
    WarpGemm<NTD, kChunk, true, true>(dr, as, L64, rw, dxs, LD, cd, lane);
    __syncthreads();  // dX, A, P read: dR replaces dX, S_c's first half A and P
    StoreAccBf16(dr, drs, LD, rw, cd, lane);
    StageRowsAsync<DP>(mix, LD, s_c, 0, DP, HS, DP, HS);
    CpAsyncCommit();
    const T* v = static_cast<const T*>(a.v);
    float lo = 0.f, hi = 0.f;
#pragma unroll
    for (int j = 0; j < NTD; ++j) {
      const int col = cd + 8 * j + 2 * c;
      if (col < D) {
        if (r0 < len) {
          const float2 vv = ::mesa::kernels::cuda::Load2(v + in_row0 + r0 * in_stride + col);
          lo += dr[j][0] * vv.x + dr[j][1] * vv.y;
        }
        if (r1 < len) {
          const float2 vv = ::mesa::kernels::cuda::Load2(v + in_row0 + r1 * in_stride + col);
          hi += dr[j][2] * vv.x + dr[j][3] * vv.y;
        }
      }
    }
    StoreAccRows(dr, static_cast<T*>(a.dv), in_row0, in_stride, rw, cd, len, D, lane, gs->beta[r0],
                 gs->beta[r1]);
    SetRow(rs->dbeta[0 + (warp >> 2)], r0, ::mesa::kernels::cuda::QuadSum(lo), lane);
    SetRow(rs->dbeta[0 + (warp >> 2)], r1, ::mesa::kernels::cuda::QuadSum(hi), lane);
  }
  __syncthreads();  // dR published

  // Phase 2: dM = -dR X^T -> E, dbeta, L gate terms (while S_c's first half lands).
  {
    float dm[4][4];
    ZeroAcc(dm);
    WarpGemm<4, DP, false, false, true>(dm, drs, LD, rw, xs, LD, c64, lane);
    float row_lo = 0.f, row_hi = 0.f, gl_lo = 0.f, gl_hi = 0.f, col[4][2] = {};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = rw + g + 8 * half;
        float ev[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int i = c64 + 8 * j + 2 * c + e;
          ev[e] = 0.f;
          if (i < r) {
            const float gr = __expf(b[r] - b[i]);
            const float d = dm[j][2 * half + e];
            const float kk = gram[j][2 * half + e] * gr;
            (half ? row_hi : row_lo) += d * kk;
            ev[e] = d * gr * gs->beta[r];
            if (gated) {
              const float gl = d * kk * gs->beta[r];
              (half ? gl_hi : gl_lo) += gl;
              col[j][e] += gl;
            }
          }
        }
        *reinterpret_cast<uint32_t*>(es + r * L64 + c64 + 8 * j + 2 * c) = PackBf162(ev[0], ev[1]);
      }
    }
    SetRow(rs->dbeta[2 + (warp >> 2)], r0, ::mesa::kernels::cuda::QuadSum(row_lo), lane);
    SetRow(rs->dbeta[2 + (warp >> 2)], r1, ::mesa::kernels::cuda::QuadSum(row_hi), lane);
    if (gated) {
      SubtractColumns(rs->db[warp], col, c64, lane);
      AddRow(rs->db[warp], r0, ::mesa::kernels::cuda::QuadSum(gl_lo), lane);
      AddRow(rs->db[warp], r1, ::mesa::kernels::cuda::QuadSum(gl_hi), lane);
    }
  }

  // Phase 3: dO S_c and dR S_c, summed over the two value-row halves of S_c.
  float dqs[NTD][4], tmp[NTD][4];
  ZeroAcc(dqs);
  ZeroAcc(tmp);
  ::mesa::kernels::cuda::CpAsyncWaitAll();
  __syncthreads();
  WarpGemm<NTD, HS, false, true>(dqs, dos, LD, rw, mix, LD, cd, lane);
  WarpGemm<NTD, HS, false, true>(tmp, drs, LD, rw, mix, LD, cd, lane);
  __syncthreads();
  StageRowsAsync<DP>(mix, LD, s_c, static_cast<int64_t>(HS) * DP, DP, HS, DP, HS);
  ::mesa::kernels::cuda::CpAsyncWaitAll();
  __syncthreads();
  WarpGemm<NTD, HS, false, true>(dqs, dos + HS, LD, rw, mix, LD, cd, lane);
  WarpGemm<NTD, HS, false, true>(tmp, drs + HS, LD, rw, mix, LD, cd, lane);
  __syncthreads();  // dO, dR and S_c read: Q and dS_c replace them
  StageInput<DP>(qs, LD, static_cast<const T*>(a.q), in_row0, in_stride, len, D);
  StageRowsAsync<DP>(mix, LD, ds_c, 0, DP, HS, DP, HS);
  StageRowsAsync<DP>(u0, LD, ds_c, static_cast<int64_t>(HS) * DP, DP, HS, DP, HS);
  CpAsyncCommit();

  ::mesa::kernels::cuda::CpAsyncWaitAll();  // Q, dS_c
  __syncthreads();

  // dq = diag(gamma) dO S_c + (dP ⊙ Γ) K.
  {
    const float g0 = gs->gam[r0], g1 = gs->gam[r1];
    if (gated) {
      const float2 rd = RowDotBf16(dqs, qs, LD, rw, cd, lane);
      AddRow(rs->db[warp], r0, g0 * rd.x, lane);
      AddRow(rs->db[warp], r1, g1 * rd.y, lane);
    }
#pragma unroll
    for (int j = 0; j < NTD; ++j) {
      dqs[j][0] *= g0;
      dqs[j][1] *= g0;
      dqs[j][2] *= g1;
      dqs[j][3] *= g1;
    }
    WarpGemm<NTD, kChunk, false, true>(dqs, dpg, L64, rw, ks, LD, cd, lane);
    StoreAccRows(dqs, static_cast<T*>(a.dq), in_row0, in_stride, rw, cd, len, D, lane);
  }

  // dk = -diag(beta gamma) dR S_c + ... (the dbeta and gate terms of dR S_c first).
  float dk[NTD][4];
  {
    const float2 rd = RowDotBf16(tmp, ks, LD, rw, cd, lane);
    const float bg0 = gs->beta[r0] * gs->gam[r0], bg1 = gs->beta[r1] * gs->gam[r1];
    SetRow(rs->dbeta[4 + (warp >> 2)], r0, -gs->gam[r0] * rd.x, lane);
    SetRow(rs->dbeta[4 + (warp >> 2)], r1, -gs->gam[r1] * rd.y, lane);
    if (gated) {
      AddRow(rs->db[warp], r0, -bg0 * rd.x, lane);
      AddRow(rs->db[warp], r1, -bg1 * rd.y, lane);
    }
#pragma unroll
    for (int j = 0; j < NTD; ++j) {
      dk[j][0] = -bg0 * tmp[j][0];
      dk[j][1] = -bg0 * tmp[j][1];
      dk[j][2] = -bg1 * tmp[j][2];
      dk[j][3] = -bg1 * tmp[j][3];
    }
  }

  // Phase 4: dk += diag(dec) X dS_c + (dP ⊙ Γ)^T Q + E K + E^T K.
  {
    const int last = len - 1;
    float dkx[NTD][4];
    ZeroAcc(dkx);
    WarpGemm<NTD, HS, false, true>(dkx, xs, LD, rw, mix, LD, cd, lane);
    WarpGemm<NTD, HS, false, true>(dkx, xs + HS, LD, rw, u0, LD, cd, lane);
    const float d0 = gs->dec[r0], d1 = gs->dec[r1];
    if (gated) {
      const float2 rd = RowDotBf16(dkx, ks, LD, rw, cd, lane);
      const float v0 = d0 * rd.x, v1 = d1 * rd.y;
      float* db = rs->db[warp];
      __syncwarp();
      if ((lane & 3) == 0) {
        db[r0] -= v0;
        db[r1] -= v1;
      }
      // The chunk-end term: one add per warp (rd is the same on the 4 lanes of a quad).
      float t = (lane & 3) == 0 ? v0 + v1 : 0.f;
#pragma unroll
      for (int off = 4; off < 32; off <<= 1) t += __shfl_xor_sync(0xffffffffu, t, off);
      __syncwarp();
      if (lane == 0) db[last] += t;
    }
#pragma unroll
    for (int j = 0; j < NTD; ++j) {
      dk[j][0] += d0 * dkx[j][0];
      dk[j][1] += d0 * dkx[j][1];
      dk[j][2] += d1 * dkx[j][2];
      dk[j][3] += d1 * dkx[j][3];
    }
    WarpGemm<NTD, kChunk, true, true>(dk, dpg, L64, rw, qs, LD, cd, lane);
    WarpGemm<NTD, kChunk, false, true>(dk, es, L64, rw, ks, LD, cd, lane);
    WarpGemm<NTD, kChunk, true, true>(dk, es, L64, rw, ks, LD, cd, lane);
    StoreAccRows(dk, static_cast<T*>(a.dk), in_row0, in_stride, rw, cd, len, D, lane);
    if (gated) {
      // gamma_n <dS_c, S_c>: the decay of the whole chunk applied to the carried state. dS_c from
      // shared memory, S_c from global memory (L2: phase 3 loaded it), 16 bytes per load.
      constexpr int kGroups = DP / 8;
      float sdot = 0.f;
#pragma unroll
      for (int k = 0; k < DP * kGroups / 256; ++k) {
        const int idx = tid + 256 * k, r = idx / kGroups, g8 = idx % kGroups;
        uint4 x = *reinterpret_cast<const uint4*>(s_c + r * DP + g8 * 8);
        uint4 y =
            *reinterpret_cast<const uint4*>((r < HS ? mix + r * LD : u0 + (r - HS) * LD) + g8 * 8);
        const uint32_t* xw = reinterpret_cast<const uint32_t*>(&x);
        const uint32_t* yw = reinterpret_cast<const uint32_t*>(&y);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float2 a2 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&xw[e]));
          const float2 b2 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&yw[e]));
          sdot += a2.x * b2.x + a2.y * b2.y;
        }
      }
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) sdot += __shfl_xor_sync(0xffffffffu, sdot, off);
      __syncwarp();
      if (lane == 0) rs->db[warp][last] += gs->gam_last * sdot;
    }
  }
  __syncthreads();

  if (tid < len) {
    float dbeta = 0.f;
#pragma unroll
    for (int slot = 0; slot < 6; ++slot) dbeta += rs->dbeta[slot][tid];
    a.dbeta[(static_cast<int64_t>(tok0) + tid) * H + h] = dbeta;
  }
  if (gated && warp == 1) {
    // dlog_gamma_t = sum_{t <= r < len} db_r: a suffix scan, two rows per lane.
    float x0 = 0.f, x1 = 0.f;  // the warps' parts, in warp order
    for (int w = 0; w < kBackwardWarps; ++w) {
      if (2 * lane < len) x0 += rs->db[w][2 * lane];
      if (2 * lane + 1 < len) x1 += rs->db[w][2 * lane + 1];
    }
    const float pair = x0 + x1;
    float incl = pair;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const float y = __shfl_down_sync(0xffffffffu, incl, off);
      if (lane + off < 32) incl += y;
    }
    const float after = incl - pair;
    const int64_t gi = (static_cast<int64_t>(tok0) + 2 * lane) * H + h;
    if (2 * lane < len) a.dlog_gamma[gi] = x0 + x1 + after;
    if (2 * lane + 1 < len) a.dlog_gamma[gi + H] = x1 + after;
  }
}

template <int DP, typename T>
cudaError_t LaunchStateBackwardT(const KernelProblem& p, const StateBackwardArgs& a,
                                 cudaStream_t s) {
  return LaunchWithSmem(StateBackwardKernel<DP, T>, dim3(p.num_seqs, p.heads, DP / kValueBlock),
                        256, StateBackwardSmemBytes<DP>(), s, p, a);
}

template <int DP, typename T>
cudaError_t LaunchChunkBackwardT(const KernelProblem& p, const ChunkBackwardArgs& a,
                                 cudaStream_t s) {
  return LaunchWithSmem(ChunkBackwardKernel<DP, T>, dim3(p.num_chunks, p.heads), 256,
                        ChunkBackwardSmemBytes<DP>(), s, p, a);
}

}  // namespace

cudaError_t LaunchStateBackward(const KernelProblem& p, const StateBackwardArgs& a,
                                cudaStream_t s) {
  if (p.num_seqs == 0) return cudaSuccess;
  const bool bf = p.dtype == DType::kBF16;
  if (p.padded_dim == 64)
    return bf ? LaunchStateBackwardT<64, bf16>(p, a, s) : LaunchStateBackwardT<64, float>(p, a, s);
  return bf ? LaunchStateBackwardT<128, bf16>(p, a, s) : LaunchStateBackwardT<128, float>(p, a, s);
}

cudaError_t LaunchChunkBackward(const KernelProblem& p, const ChunkBackwardArgs& a,
                                cudaStream_t s) {
  if (p.num_chunks == 0) return cudaSuccess;
  const bool bf = p.dtype == DType::kBF16;
  if (p.padded_dim == 64)
    return bf ? LaunchChunkBackwardT<64, bf16>(p, a, s) : LaunchChunkBackwardT<64, float>(p, a, s);
  return bf ? LaunchChunkBackwardT<128, bf16>(p, a, s) : LaunchChunkBackwardT<128, float>(p, a, s);
}

}  // namespace mesa::kernels::deltanet::cuda
