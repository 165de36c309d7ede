// Forward kernels of the DeltaNet-family CUDA operator (kernels/deltanet/README.md, "Chunk form"):
//   Prepare      (parallel, one CTA per chunk and head): A = (I + L)^-1, P, W, U.
//   StateForward (sequential over the chunks of a sequence, one CTA per sequence, head and value
//                 block): X, o, chunk-start states, final state.
#include "kernels/deltanet/cuda/deltanet_common.cuh"

namespace mesa::kernels::deltanet::cuda {
namespace {

constexpr int kSolveLd = kChunk + 1;  // fp32 [64][65] tile of the triangular solve

// Shared memory of Prepare: K (kept to the end), a region that holds Q, then the fp32 solve tile
// (A in the lower triangle and diagonal, L transposed in the strict upper one), then V; a bf16
// tile that holds the solve's block scratch, then A diag(beta); the gates. ~44 KB at DP = 128:
// 5 CTAs per SM.
constexpr int kSolveBytes = kChunk * kSolveLd * 4;
template <int DP>
constexpr int PrepareRegionBytes() {
  return kChunk * kPad<DP> * 2 > kSolveBytes ? kChunk * kPad<DP> * 2 : kSolveBytes;
}
template <int DP>
constexpr int PrepareSmemBytes() {
  return kChunk * kPad<DP> * 2 + PrepareRegionBytes<DP>() + kChunk * kPad<64> * 2 +
         static_cast<int>(sizeof(ChunkGates));
}
static_assert(kChunk * kPad<64> * 2 >= 3 * 256 * 4, "the solve's block scratch fits the A tile");

template <int DP, typename T>
__global__ void __launch_bounds__(128) PrepareKernel(KernelProblem p, PrepareArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int LD = kPad<DP>, L64 = kPad<64>;
  bf16* ks = reinterpret_cast<bf16*>(smem);  // K, later diag(gamma) K
  unsigned char* region = smem + kChunk * LD * 2;
  bf16* qs = reinterpret_cast<bf16*>(region);    // Q, later V
  float* as = reinterpret_cast<float*>(region);  // the solve (after the score products)
  bf16* ab = reinterpret_cast<bf16*>(region + PrepareRegionBytes<DP>());  // A diag(beta), bf16
  float* solve_tmp = reinterpret_cast<float*>(ab);  // 3 blocks of 16 x 16, before ab
  ChunkGates* gs = reinterpret_cast<ChunkGates*>(ab + kChunk * L64);

  const int chunk = blockIdx.x, h = blockIdx.y;
  const int4 ch = p.chunks[chunk];
  const int tok0 = ch.y, len = ch.z;
  const int H = p.heads, D = p.head_dim;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, c = lane & 3;
  const int64_t in_row0 = (static_cast<int64_t>(tok0) * H + h) * D;
  const int64_t in_stride = static_cast<int64_t>(H) * D;

  StageInput<DP>(qs, LD, static_cast<const T*>(a.q), in_row0, in_stride, len, D);
  StageInput<DP>(ks, LD, static_cast<const T*>(a.k), in_row0, in_stride, len, D);
  LoadGates(gs, a.log_gamma, a.beta, tok0, len, H, h);
  ::mesa::kernels::cuda::CpAsyncWaitAll();
  __syncthreads();

  // Gram K K^T and scores Q K^T; warp w owns rows 16w..16w+15, all 64 columns. L[row][col]
  // (col < row) goes to as[col][row].
  {
    float gram[8][4], qk[8][4];
    ZeroAcc(gram);
    ZeroAcc(qk);
    WarpGemm<8, DP, false, false>(gram, ks, LD, 16 * warp, ks, LD, 0, lane);
    WarpGemm<8, DP, false, false>(qk, qs, LD, 16 * warp, ks, LD, 0, lane);
    __syncthreads();  // the solve tile overwrites Q
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = 16 * warp + g + 8 * half;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = 8 * j + 2 * c + e;
          const float gr = col <= row ? __expf(gs->b[row] - gs->b[col]) : 0.f;
          if (col < row) as[col * kSolveLd + row] = gs->beta[row] * gram[j][2 * half + e] * gr;
          qk[j][2 * half + e] *= gr;
        }
      }
    }
    StoreAccRows(qk, a.p + (static_cast<int64_t>(chunk) * H + h) * kChunk * kChunk, 0, kChunk,
                 16 * warp, 0, kChunk, kChunk, lane);
  }
  __syncthreads();

  // A = (I + L)^-1, blocked by 16 (fp32), A[i][j] at as[i][j] for i >= j (the strict upper
  // triangle holds L^T and reads as A = 0). Diagonal blocks by forward substitution, block w by
  // warp w (column j by the lane pair (2j, 2j+1), the pair splitting the sum by parity):
  //   A[i][j] = [i == j] - sum_{j <= m < i} L[i][m] A[m][j];
  // then block rows bi = 1..3: A_{bi,j} = -A_{bi,bi} sum_{j <= m < bi} L_{bi,m} A_{m,j} (blocks).
  {
    const int j = 16 * warp + (lane >> 1), parity = lane & 1;
    for (int ii = 0; ii < 16; ++ii) {
      const int i = 16 * warp + ii;
      float s = 0.f;
      for (int m = j + parity; m < i; m += 2) s += as[m * kSolveLd + i] * as[m * kSolveLd + j];
      s += __shfl_xor_sync(0xffffffffu, s, 1);
      if (parity == 0 && i >= j) as[i * kSolveLd + j] = i == j ? 1.f : -s;
      __syncwarp();
    }
  }
  __syncthreads();
  for (int bi = 1; bi < 4; ++bi) {
    for (int e = tid; e < bi * 256; e += blockDim.x) {
      const int jb = e >> 8, r = (e >> 4) & 15, col = e & 15;
      const int i = 16 * bi + r, jc = 16 * jb + col;
      float t = 0.f;
      for (int m = jc; m < 16 * bi; ++m) t += as[m * kSolveLd + i] * as[m * kSolveLd + jc];
      solve_tmp[e] = t;
    }
    __syncthreads();
    for (int e = tid; e < bi * 256; e += blockDim.x) {
      const int jb = e >> 8, r = (e >> 4) & 15, col = e & 15;
      const float* arow = as + (16 * bi + r) * kSolveLd + 16 * bi;
      float t = 0.f;
      for (int m = 0; m <= r; ++m) t += arow[m] * solve_tmp[(jb << 8) + (m << 4) + col];
      as[(16 * bi + r) * kSolveLd + 16 * jb + col] = -t;
    }
    __syncthreads();
  }

  // A to global (bf16) and A diag(beta) for W = (A diag(beta)) diag(gamma) K and
  // U = (A diag(beta)) V.
  {
    bf16* a_out = a.a + (static_cast<int64_t>(chunk) * H + h) * kChunk * kChunk;
    for (int idx = tid; idx < kChunk * kChunk / 2; idx += blockDim.x) {
      const int i = idx / (kChunk / 2), jj = 2 * (idx % (kChunk / 2));
      const float x0 = jj <= i ? as[i * kSolveLd + jj] : 0.f;
      const float x1 = jj + 1 <= i ? as[i * kSolveLd + jj + 1] : 0.f;
      *reinterpret_cast<uint32_t*>(a_out + i * kChunk + jj) = PackBf162(x0, x1);
      *reinterpret_cast<uint32_t*>(ab + i * L64 + jj) =
          PackBf162(x0 * gs->beta[jj], x1 * gs->beta[jj + 1]);
    }
  }
  __syncthreads();  // V overwrites the solve tile
  StageInput<DP>(qs, LD, static_cast<const T*>(a.v), in_row0, in_stride, len, D);
  if (a.log_gamma != nullptr) ScaleRowsInPlace<DP>(ks, LD, gs->gam);
  ::mesa::kernels::cuda::CpAsyncWaitAll();
  __syncthreads();

  // W = A diag(beta gamma) K and U = A diag(beta) V: rows 16w.., all DP columns.
  const int64_t ws_row0 = (static_cast<int64_t>(tok0) * H + h) * DP;
  const int64_t ws_stride = static_cast<int64_t>(H) * DP;
#pragma unroll 1
  for (int which = 0; which < 2; ++which) {
    float acc[DP / 8][4];
    ZeroAcc(acc);
    WarpGemm<DP / 8, kChunk, false, true>(acc, ab, L64, 16 * warp, which == 0 ? ks : qs, LD, 0,
                                          lane);
    StoreAccRows(acc, which == 0 ? a.w : a.u, ws_row0, ws_stride, 16 * warp, 0, len, DP, lane);
  }
}

template <int DP>
constexpr int StateForwardSmemBytes() {
  constexpr int BV = kValueBlock;
  return (3 * kChunk * kPad<DP> + kChunk * kPad<64> + 3 * kChunk * kPad<BV> + BV * kPad<DP>)*2 +
         static_cast<int>(sizeof(ChunkGates));
}

// 8 warps. Token-row products (X, o; 64 x BV): warp w owns rows 16 (w & 3).. and value columns
// 32 (w >> 2)..; the state block (BV x DP, fp32 registers): value rows 16 (w & 3).., key columns
// (DP / 2) (w >> 2)...
template <int DP, typename T>
__global__ void __launch_bounds__(256, 2) StateForwardKernel(KernelProblem p, StateForwardArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int BV = kValueBlock, LD = kPad<DP>, L64 = kPad<64>, LV = kPad<BV>;
  constexpr int NTS = DP / 16;  // state columns per warp: DP / 2
  static_assert(BV == 64, "warp layout");
  bf16* ws = reinterpret_cast<bf16*>(smem);
  bf16* qs = ws + kChunk * LD;
  bf16* ks = qs + kChunk * LD;
  bf16* ps = ks + kChunk * LD;
  bf16* us = ps + kChunk * L64;
  bf16* xb = us + kChunk * LV;   // X
  bf16* xdb = xb + kChunk * LV;  // diag(dec) X
  bf16* sb = xdb + kChunk * LV;
  ChunkGates* gs = reinterpret_cast<ChunkGates*>(sb + BV * LD);

  const int seq = blockIdx.x, h = blockIdx.y, v0 = blockIdx.z * BV;
  const int4 sq = p.seqs[seq];
  const int first = sq.z, nc = sq.w;
  const int H = p.heads, D = p.head_dim;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, c = lane & 3;
  const int rw = 16 * (warp & 3), cv = 32 * (warp >> 2);
  const int s_row0 = 16 * (warp & 3), s_col0 = (DP / 2) * (warp >> 2);
  const int64_t state_off = (static_cast<int64_t>(seq) * H + h) * D * D;

  float st[NTS][4];
  LoadStateBlock(st, a.s0 == nullptr ? nullptr : a.s0 + state_off, D, v0, s_row0, s_col0, lane);

  int4 ch_next = nc > 0 ? p.chunks[first] : make_int4(0, 0, 0, 0);
  GateRegs gates_next = FetchGates(a.log_gamma, a.beta, ch_next.y, ch_next.z, H, h);
#pragma unroll 1
  for (int ci = 0; ci < nc; ++ci) {
    const int chunk = first + ci;
    const int4 ch = ch_next;
    const int tok0 = ch.y, len = ch.z;
    const GateRegs gates = gates_next;
    if (ci + 1 < nc) {  // the next chunk's gates, a chunk ahead
      ch_next = p.chunks[chunk + 1];
      gates_next = FetchGates(a.log_gamma, a.beta, ch_next.y, ch_next.z, H, h);
    }
    const int64_t in_row0 = (static_cast<int64_t>(tok0) * H + h) * D;
    const int64_t in_stride = static_cast<int64_t>(H) * D;
    const int64_t ws_row0 = (static_cast<int64_t>(tok0) * H + h) * DP;
    const int64_t ws_stride = static_cast<int64_t>(H) * DP;
    StageRowsAsync<DP>(ws, LD, a.w, ws_row0, ws_stride, len, DP);
    StageRowsAsync<BV>(us, LV, a.u, ws_row0 + v0, ws_stride, len, BV);
    StageInput<DP>(ks, LD, static_cast<const T*>(a.k), in_row0, in_stride, len, D);
    if (a.o != nullptr) {
      StageInput<DP>(qs, LD, static_cast<const T*>(a.q), in_row0, in_stride, len, D);
      StageRowsAsync<64>(ps, L64, a.p + (static_cast<int64_t>(chunk) * H + h) * kChunk * kChunk, 0,
                         kChunk, kChunk, kChunk);
    }
    StoreAccBf16(st, sb, LD, s_row0, s_col0, lane);
    SetGates(gs, gates, len);
    ::mesa::kernels::cuda::CpAsyncWaitAll();
    __syncthreads();
    if (a.s_chunk != nullptr) {
      StoreTileRows<DP>(sb, LD, a.s_chunk + ((static_cast<int64_t>(chunk) * H + h) * DP + v0) * DP,
                        DP, BV);
    }

    // X = U - W S^T; stored as X (for o) and diag(dec) X (for the state update).
    float xa[4][4];
    ZeroAcc(xa);
    WarpGemm<4, DP, false, false, true>(xa, ws, LD, rw, sb, LD, cv, lane);
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = rw + g + 8 * (e >> 1), col = cv + 8 * j + 2 * c + (e & 1);
        xa[j][e] += __bfloat162float(us[row * LV + col]);
      }
    StoreAccBf16(xa, xb, LV, rw, cv, lane);
    {
      const float d0 = gs->dec[rw + g], d1 = gs->dec[rw + g + 8];
      float xd[4][4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        xd[j][0] = d0 * xa[j][0];
        xd[j][1] = d0 * xa[j][1];
        xd[j][2] = d1 * xa[j][2];
        xd[j][3] = d1 * xa[j][3];
      }
      StoreAccBf16(xd, xdb, LV, rw, cv, lane);
    }
    float oa[4][4];
    if (a.o != nullptr) {
      ZeroAcc(oa);
      WarpGemm<4, DP, false, false>(oa, qs, LD, rw, sb, LD, cv, lane);
      const float gm0 = gs->gam[rw + g], gm1 = gs->gam[rw + g + 8];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        oa[j][0] *= gm0;
        oa[j][1] *= gm0;
        oa[j][2] *= gm1;
        oa[j][3] *= gm1;
      }
    }
    __syncthreads();  // xb, xdb complete
    if (a.x != nullptr) StoreTileRows<BV>(xb, LV, a.x + ws_row0 + v0, ws_stride, len);

    if (a.o != nullptr) {
      WarpGemm<4, kChunk, false, true>(oa, ps, L64, rw, xb, LV, cv, lane);
      StoreAccRows(oa, static_cast<T*>(a.o), in_row0 + v0, in_stride, rw, cv, len, D - v0, lane);
    }
    // S <- gamma_n S + (diag(dec) X)^T K.
    const float gl = gs->gam_last;
#pragma unroll
    for (int j = 0; j < NTS; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) st[j][e] *= gl;
    WarpGemm<NTS, kChunk, true, true>(st, xdb, LV, s_row0, ks, LD, s_col0, lane);
    __syncthreads();
  }

  if (a.s_final != nullptr) StoreStateBlock(st, a.s_final + state_off, D, v0, s_row0, s_col0, lane);
}

template <int DP, typename T>
cudaError_t LaunchPrepareT(const KernelProblem& p, const PrepareArgs& a, cudaStream_t s) {
  return LaunchWithSmem(PrepareKernel<DP, T>, dim3(p.num_chunks, p.heads), 128,
                        PrepareSmemBytes<DP>(), s, p, a);
}

template <int DP, typename T>
cudaError_t LaunchStateForwardT(const KernelProblem& p, const StateForwardArgs& a, cudaStream_t s) {
  return LaunchWithSmem(StateForwardKernel<DP, T>, dim3(p.num_seqs, p.heads, DP / kValueBlock), 256,
                        StateForwardSmemBytes<DP>(), s, p, a);
}

}  // namespace

cudaError_t LaunchPrepare(const KernelProblem& p, const PrepareArgs& a, cudaStream_t s) {
  if (p.num_chunks == 0) return cudaSuccess;
  const bool bf = p.dtype == DType::kBF16;
  if (p.padded_dim == 64)
    return bf ? LaunchPrepareT<64, bf16>(p, a, s) : LaunchPrepareT<64, float>(p, a, s);
  return bf ? LaunchPrepareT<128, bf16>(p, a, s) : LaunchPrepareT<128, float>(p, a, s);
}

cudaError_t LaunchStateForward(const KernelProblem& p, const StateForwardArgs& a, cudaStream_t s) {
  if (p.num_seqs == 0) return cudaSuccess;
  const bool bf = p.dtype == DType::kBF16;
  if (p.padded_dim == 64)
    return bf ? LaunchStateForwardT<64, bf16>(p, a, s) : LaunchStateForwardT<64, float>(p, a, s);
  return bf ? LaunchStateForwardT<128, bf16>(p, a, s) : LaunchStateForwardT<128, float>(p, a, s);
}

}  // namespace mesa::kernels::deltanet::cuda
