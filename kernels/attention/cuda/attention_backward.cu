// Fused attention backward (FlashAttention-2 style). A prepare kernel computes
// delta_i = do_i . o_i; then one CTA of 8 warps per (128-key tile, head, batch row) keeps dK and
// dV of its keys in registers (16 keys per warp) and walks the 64-query tiles that see them, the
// next tile's Q, dO, lse and delta prefetched (cp.async, two stages) while this one computes:
//   S^T = K Q^T, P^T = exp2(S^T * scale log2 e - lse log2 e), dP^T = V dO^T,
//   dS^T = scale P^T (dP^T - delta), dV += P^T dO, dK += dS^T Q,
// and dQ += dS K through dS^T in shared memory, accumulated in fp32 (one fp32 [B,T,H,D] buffer;
// converted to bf16 afterwards). P is recomputed from lse: no T x T matrix.
//
// dQ's sum over key tiles: with float atomics by default (the order of the additions varies from
// run to run), or, ordered (a non-null dq_order: training.deterministic), in a fixed order: each
// query tile takes the key tiles that see it from the last down, each adding its part with a plain
// load and store when the tile's counter says it is its turn. Blocks take their key tiles from a
// ticket counter, the last key tile of a (row, head) first, so a block only ever waits for blocks
// that are already running (no deadlock), and the one it waits for reached the query tile two
// tiles earlier than it: in a full GPU it has usually long finished.
#include <algorithm>
#include <cmath>

#include "kernels/attention/cuda/attention_common.cuh"
#include "kernels/common/cuda/release_acquire.cuh"

namespace mesa::kernels::attention::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kKeys = kBigTile;  // keys per CTA; 16 per warp
constexpr int kDsStride = kTile + 8;

template <int DP>
constexpr int BackwardSmemBytes() {
  // K, V; Q and dO in two stages; dS^T; lse and delta in two stages.
  return (2 * kKeys + 4 * kTile) * (DP + 8) * 2 + kKeys * kDsStride * 2 + 4 * kTile * 4;
}

__device__ __forceinline__ void AtomicAdd2(float* dst, float x0, float x1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(dst), make_float2(x0, x1));
#else
  atomicAdd(dst, x0);
  atomicAdd(dst + 1, x1);
#endif
}

// Q, dO (cp.async for bf16) and lse (log2 units), delta of query tile q0 into one stage.
template <int DP, typename T>
__device__ __forceinline__ void LoadQueryTile(bf16* s_q, bf16* s_do, float* s_lse, float* s_delta,
                                              const T* q, const T* d_o, const float* lse,
                                              const float* delta, const KernelShape& sh, int b,
                                              int h, int q0, int tid) {
  LoadTile<DP, kTile>(s_q, q, sh, b, h, q0, tid, kThreads);
  LoadTile<DP, kTile>(s_do, d_o, sh, b, h, q0, tid, kThreads);
  if (tid < kTile) {
    const int i = q0 + tid;
    const int64_t row = (static_cast<int64_t>(b) * sh.seq_len + i) * sh.heads + h;
    s_lse[tid] = i < sh.seq_len ? lse[row] * kLog2e : INFINITY;
    s_delta[tid] = i < sh.seq_len ? delta[row] : 0.f;
  }
}

// The ordered dQ sums' counters: a ticket, then one per (row, head, query tile): how many key
// tiles have added their part.
__device__ __forceinline__ int* DqTurn(int* dq_order, const KernelShape& sh, int b, int h, int qt,
                                       int num_q_tiles) {
  return dq_order + 1 + (static_cast<int64_t>(b) * sh.heads + h) * num_q_tiles + qt;
}

// The block's key tile, head and row: its grid position, or (kOrdered) its ticket, the (row,
// head) pairs in order and within each the key tiles from the last.
template <bool kOrdered>
__device__ __forceinline__ void PlaceBlock(int* dq_order, int& kt, int& h, int& b) {
  if constexpr (kOrdered) {
    __shared__ int ticket;
    if (threadIdx.x == 0) ticket = atomicAdd(dq_order, 1);
    __syncthreads();
    const int key_tiles = gridDim.x, per_row = key_tiles * gridDim.y;
    b = ticket / per_row;
    h = ticket % per_row / key_tiles;
    kt = key_tiles - 1 - ticket % key_tiles;
  } else {
    kt = blockIdx.x;
    h = blockIdx.y;
    b = blockIdx.z;
  }
}

template <int DP, typename T, bool kOrdered>
__global__ void __launch_bounds__(kThreads)
    BackwardKernel(KernelShape sh, const T* __restrict__ q, const T* __restrict__ k,
                   const T* __restrict__ v, const T* __restrict__ d_o,
                   const float* __restrict__ lse, const float* __restrict__ delta, float* dq_acc,
                   int* dq_order, T* dk, T* dv) {
  constexpr int kStride = DP + 8, kKv = kKeys * kStride, kQt = kTile * kStride;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* s_k = reinterpret_cast<bf16*>(smem_raw);
  bf16* s_v = s_k + kKv;
  bf16* s_q = s_v + kKv;                                              // [2] stages
  bf16* s_do = s_q + 2 * kQt;                                         // [2] stages
  bf16* s_ds = s_do + 2 * kQt;                                        // dS^T [key][query]
  float* s_lse = reinterpret_cast<float*>(s_ds + kKeys * kDsStride);  // [2][kTile]
  float* s_delta = s_lse + 2 * kTile;                                 // [2][kTile]

  int kt, h, b;
  PlaceBlock<kOrdered>(dq_order, kt, h, b);
  const int k0 = kt * kKeys;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, c = lane & 3;
  const int num_q_tiles = (sh.seq_len + kTile - 1) / kTile;
  const int qt_lo = k0 / kTile;
  const int qt_hi = sh.window > 0 ? min(num_q_tiles - 1, (k0 + kKeys - 1 + sh.window - 1) / kTile)
                                  : num_q_tiles - 1;
  const float sl2 = sh.scale * kLog2e;
  const int key_a = k0 + warp * 16 + g, key_b = key_a + 8;
  const int warp_key0 = k0 + warp * 16;

  LoadTile<DP, kKeys>(s_k, k, sh, b, h, k0, tid, kThreads);
  LoadTile<DP, kKeys>(s_v, v, sh, b, h, k0, tid, kThreads);
  LoadQueryTile<DP>(s_q, s_do, s_lse, s_delta, q, d_o, lse, delta, sh, b, h, qt_lo * kTile, tid);
  AsyncCommit();

  float acc_dk[DP / 8][4], acc_dv[DP / 8][4];
#pragma unroll
  for (int i = 0; i < DP / 8; ++i) {
#pragma unroll
    for (int e = 0; e < 4; ++e) acc_dk[i][e] = acc_dv[i][e] = 0.f;
  }

  for (int qt = qt_lo; qt <= qt_hi; ++qt) {
    const int q0 = qt * kTile, stage = (qt - qt_lo) & 1;
    if (qt < qt_hi) {
      const int next = stage ^ 1;
      LoadQueryTile<DP>(s_q + next * kQt, s_do + next * kQt, s_lse + next * kTile,
                        s_delta + next * kTile, q, d_o, lse, delta, sh, b, h, q0 + kTile, tid);
      AsyncCommit();
      AsyncWait<1>();
    } else {
      AsyncWait<0>();
    }
    __syncthreads();
    const bf16* sq = s_q + stage * kQt;
    const bf16* sdo = s_do + stage * kQt;
    const float* slse = s_lse + stage * kTile;
    const float* sdelta = s_delta + stage * kTile;

    // S^T (16 keys of this warp x 64 queries) and dP^T.
    float st[8][4], dpt[8][4];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
#pragma unroll
      for (int e = 0; e < 4; ++e) st[i][e] = dpt[i][e] = 0.f;
    }
#pragma unroll
    for (int ks = 0; ks < DP / 16; ++ks) {
      uint32_t ak[4], av[4];
      LoadA_MK(ak, H(s_k), kStride, warp * 16, ks * 16, lane);
      LoadA_MK(av, H(s_v), kStride, warp * 16, ks * 16, lane);
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t bq[4], bd[4];
        LoadB_NK(bq, H(sq), kStride, np * 16, ks * 16, lane);
        LoadB_NK(bd, H(sdo), kStride, np * 16, ks * 16, lane);
        MmaBf16(st[2 * np], ak, bq[0], bq[1]);
        MmaBf16(st[2 * np + 1], ak, bq[2], bq[3]);
        MmaBf16(dpt[2 * np], av, bd[0], bd[1]);
        MmaBf16(dpt[2 * np + 1], av, bd[2], bd[3]);
      }
    }
    const bool need_mask =
        q0 < warp_key0 + 15 || (sh.window > 0 && q0 + kTile - 1 - sh.window + 1 > warp_key0) ||
        q0 + kTile > sh.seq_len || warp_key0 + 16 > sh.seq_len || sh.doc_start != nullptr;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int qi = nt * 8 + 2 * c + (e & 1);
        float p = exp2f(st[nt][e] * sl2 - slse[qi]);
        if (need_mask && !Visible(sh, b, q0 + qi, e < 2 ? key_a : key_b)) p = 0.f;
        st[nt][e] = p;                                          // P^T
        dpt[nt][e] = p * (dpt[nt][e] - sdelta[qi]) * sh.scale;  // dS^T
      }
    }
    // dV += P^T dO, dK += dS^T Q (k = query).
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      uint32_t ap[4], as[4];
      AccToA(st[2 * kk], st[2 * kk + 1], ap);
      AccToA(dpt[2 * kk], dpt[2 * kk + 1], as);
#pragma unroll
      for (int nd = 0; nd < DP / 16; ++nd) {
        uint32_t bd[4], bq[4];
        LoadB_KN(bd, H(sdo), kStride, kk * 16, nd * 16, lane);
        LoadB_KN(bq, H(sq), kStride, kk * 16, nd * 16, lane);
        MmaBf16(acc_dv[2 * nd], ap, bd[0], bd[1]);
        MmaBf16(acc_dv[2 * nd + 1], ap, bd[2], bd[3]);
        MmaBf16(acc_dk[2 * nd], as, bq[0], bq[1]);
        MmaBf16(acc_dk[2 * nd + 1], as, bq[2], bq[3]);
      }
      // dS^T rows of this warp into shared memory (bf16), for dQ.
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int nt = 2 * kk + half, col = nt * 8 + 2 * c;
        bf16* row = s_ds + (warp * 16 + g) * kDsStride + col;
        *reinterpret_cast<uint32_t*>(row) = PackBf16(dpt[nt][0], dpt[nt][1]);
        *reinterpret_cast<uint32_t*>(row + 8 * kDsStride) = PackBf16(dpt[nt][2], dpt[nt][3]);
      }
    }
    __syncthreads();
    // dQ (64 queries x DP) += dS K over the 128 keys: warp w takes queries 16 (w % 4).. and the
    // column half w / 4, in 32-column chunks.
    const int wq = warp & 3, wd = warp >> 2;
    const int qrow_a = q0 + wq * 16 + g;
    // Column chunk dc of the warp's dQ part, and its addition to dq_acc.
    auto part_of = [&](int dc, float(&part)[4][4]) {
      const int col0 = wd * (DP / 2) + dc * 32;
#pragma unroll
      for (int i = 0; i < 4; ++i) part[i][0] = part[i][1] = part[i][2] = part[i][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < kKeys / 16; ++kk) {
        uint32_t a[4];
        LoadA_KM(a, H(s_ds), kDsStride, wq * 16, kk * 16, lane);
#pragma unroll
        for (int np = 0; np < 2; ++np) {
          uint32_t bk[4];
          LoadB_KN(bk, H(s_k), kStride, kk * 16, col0 + np * 16, lane);
          MmaBf16(part[2 * np], a, bk[0], bk[1]);
          MmaBf16(part[2 * np + 1], a, bk[2], bk[3]);
        }
      }
    };
    auto add_part = [&](int dc, const float(&part)[4][4]) {
      const int col0 = wd * (DP / 2) + dc * 32;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = qrow_a + 8 * r;
        if (row >= sh.seq_len) continue;
        float* dst =
            dq_acc + ((static_cast<int64_t>(b) * sh.seq_len + row) * sh.heads + h) * sh.head_dim;
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
          const int col = col0 + nt * 8 + 2 * c;
          if (col >= sh.head_dim) continue;
          if constexpr (kOrdered) {  // through L2: other SMs wrote the sum so far
            float2 sum = __ldcg(reinterpret_cast<const float2*>(dst + col));
            sum.x += part[nt][2 * r];
            sum.y += part[nt][2 * r + 1];
            __stcg(reinterpret_cast<float2*>(dst + col), sum);
          } else {
            AtomicAdd2(dst + col, part[nt][2 * r], part[nt][2 * r + 1]);
          }
        }
      }
    };
    if constexpr (kOrdered) {
      // Every chunk first, then this key tile's turn at the query tile (the key tiles after it
      // have added theirs), the additions, and the turn handed on.
      float dq[DP / 64][4][4];
#pragma unroll
      for (int dc = 0; dc < DP / 64; ++dc) part_of(dc, dq[dc]);
      int* turn = DqTurn(dq_order, sh, b, h, qt, num_q_tiles);
      const int position = qt * kTile / kKeys - kt;
      if (tid == 0) {
        while (::mesa::kernels::cuda::LoadAcquire(turn) != position) __nanosleep(64);
      }
      __syncthreads();
#pragma unroll
      for (int dc = 0; dc < DP / 64; ++dc) add_part(dc, dq[dc]);
      __threadfence();
      __syncthreads();
      if (tid == 0) ::mesa::kernels::cuda::StoreRelease(turn, position + 1);
    } else {
#pragma unroll
      for (int dc = 0; dc < DP / 64; ++dc) {
        float dq[4][4];
        part_of(dc, dq);
        add_part(dc, dq);
      }
    }
    __syncthreads();  // the next iteration's prefetch overwrites this stage; dS^T is rewritten
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = r == 0 ? key_a : key_b;
    if (row >= sh.seq_len) continue;
    const int64_t off = ((static_cast<int64_t>(b) * sh.seq_len + row) * sh.heads + h) * sh.head_dim;
#pragma unroll
    for (int nt = 0; nt < DP / 8; ++nt) {
      const int col = nt * 8 + 2 * c;
      if (col < sh.head_dim) {
        Store2(dk + off + col, acc_dk[nt][2 * r], acc_dk[nt][2 * r + 1]);
        Store2(dv + off + col, acc_dv[nt][2 * r], acc_dv[nt][2 * r + 1]);
      }
    }
  }
}

// delta[row] = do[row] . o[row]: one warp per (b, t, h) row.
template <typename T>
__global__ void PrepareKernel(const T* __restrict__ o, const T* __restrict__ d_o, float* delta,
                              int64_t rows, int dim) {
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  float sum = 0.f;
  for (int e = lane; e < dim; e += 32) sum += LoadF(o + row * dim + e) * LoadF(d_o + row * dim + e);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (lane == 0) delta[row] = sum;
}

__global__ void ConvertKernel(const float* __restrict__ src, bf16* dst, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = __float2bfloat16(src[i]);
  }
}

template <int DP, typename T, bool kOrdered>
cudaError_t LaunchKernel(const KernelShape& sh, const void* q, const void* k, const void* v,
                         const void* d_o, const float* lse, const float* delta, float* dq_acc,
                         int* dq_order, void* dk, void* dv, cudaStream_t stream) {
  constexpr int kSmem = BackwardSmemBytes<DP>();
  static const cudaError_t attr = cudaFuncSetAttribute(
      BackwardKernel<DP, T, kOrdered>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (attr != cudaSuccess) return attr;
  const dim3 grid((sh.seq_len + kKeys - 1) / kKeys, sh.heads, sh.batch);
  BackwardKernel<DP, T, kOrdered><<<grid, kThreads, kSmem, stream>>>(
      sh, static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
      static_cast<const T*>(d_o), lse, delta, dq_acc, dq_order, static_cast<T*>(dk),
      static_cast<T*>(dv));
  return cudaGetLastError();
}

template <int DP, typename T>
cudaError_t Launch(const KernelShape& sh, const void* q, const void* k, const void* v,
                   const void* d_o, const float* lse, const float* delta, float* dq_acc,
                   int* dq_order, void* dk, void* dv, cudaStream_t stream) {
  return dq_order != nullptr ? LaunchKernel<DP, T, true>(sh, q, k, v, d_o, lse, delta, dq_acc,
                                                         dq_order, dk, dv, stream)
                             : LaunchKernel<DP, T, false>(sh, q, k, v, d_o, lse, delta, dq_acc,
                                                          nullptr, dk, dv, stream);
}

}  // namespace

cudaError_t LaunchBackwardPrepare(const KernelShape& s, const void* o, const void* d_o,
                                  float* delta, cudaStream_t stream) {
  const int64_t rows = static_cast<int64_t>(s.batch) * s.seq_len * s.heads;
  const int blocks = static_cast<int>((rows * 32 + 255) / 256);
  if (s.dtype == DType::kBF16) {
    PrepareKernel<bf16><<<blocks, 256, 0, stream>>>(
        static_cast<const bf16*>(o), static_cast<const bf16*>(d_o), delta, rows, s.head_dim);
  } else {
    PrepareKernel<float><<<blocks, 256, 0, stream>>>(
        static_cast<const float*>(o), static_cast<const float*>(d_o), delta, rows, s.head_dim);
  }
  return cudaGetLastError();
}

int64_t DqOrderInts(const KernelShape& s) {
  const int64_t q_tiles = (s.seq_len + kTile - 1) / kTile;
  return 1 + int64_t{s.batch} * s.heads * q_tiles;
}

cudaError_t LaunchBackward(const KernelShape& s, const void* q, const void* k, const void* v,
                           const void* d_o, const float* lse, const float* delta, float* dq_acc,
                           int* dq_order, void* dk, void* dv, cudaStream_t stream) {
  const bool bf = s.dtype == DType::kBF16;
  if (s.head_dim <= 64) {
    return bf ? Launch<64, bf16>(s, q, k, v, d_o, lse, delta, dq_acc, dq_order, dk, dv, stream)
              : Launch<64, float>(s, q, k, v, d_o, lse, delta, dq_acc, dq_order, dk, dv, stream);
  }
  return bf ? Launch<128, bf16>(s, q, k, v, d_o, lse, delta, dq_acc, dq_order, dk, dv, stream)
            : Launch<128, float>(s, q, k, v, d_o, lse, delta, dq_acc, dq_order, dk, dv, stream);
}

cudaError_t LaunchConvertToBf16(const float* src, void* dst, int64_t n, cudaStream_t stream) {
  const int blocks = static_cast<int>(std::min<int64_t>((n + 255) / 256, 4096));
  ConvertKernel<<<blocks, 256, 0, stream>>>(src, static_cast<bf16*>(dst), n);
  return cudaGetLastError();
}

}  // namespace mesa::kernels::attention::cuda
