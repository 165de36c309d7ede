// Fused attention backward (FlashAttention-2 style). A prepare kernel computes
// delta_i = do_i . o_i; then one CTA of 8 warps per (128-key tile, head, batch row) keeps dK and
// dV of its keys in registers (16 keys per warp) and walks the 64-query tiles that see them, the
// next tile's Q, dO, lse and delta prefetched (cp.async, two stages) while this one computes:
//   S^T = K Q^T, P^T = exp2(S^T * scale log2 e - lse log2 e), dP^T = V dO^T,
//   dS^T = scale P^T (dP^T - delta), dV += P^T dO, dK += dS^T Q,
// and dQ += dS K through dS^T in shared memory, accumulated in fp32 with atomics (one fp32
// [B,T,H,D] buffer; converted to bf16 afterwards). P is recomputed from lse: no T x T matrix.
#include <algorithm>
#include <cmath>

#include "kernels/attention/cuda/attention_common.cuh"

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

template <int DP, typename T>
__global__ void __launch_bounds__(kThreads)
    BackwardKernel(KernelShape sh, const T* __restrict__ q, const T* __restrict__ k,
                   const T* __restrict__ v, const T* __restrict__ d_o,
                   const float* __restrict__ lse, const float* __restrict__ delta, float* dq_acc,
                   T* dk, T* dv) {
  constexpr int kStride = DP + 8, kKv = kKeys * kStride, kQt = kTile * kStride;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* s_k = reinterpret_cast<bf16*>(smem_raw);
  bf16* s_v = s_k + kKv;
  bf16* s_q = s_v + kKv;                                              // [2] stages
  bf16* s_do = s_q + 2 * kQt;                                         // [2] stages
  bf16* s_ds = s_do + 2 * kQt;                                        // dS^T [key][query]
  float* s_lse = reinterpret_cast<float*>(s_ds + kKeys * kDsStride);  // [2][kTile]
  float* s_delta = s_lse + 2 * kTile;                                 // [2][kTile]

  const int kt = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
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
    // column half w / 4, in 32-column chunks added to dq_acc.
    const int wq = warp & 3, wd = warp >> 2;
    const int qrow_a = q0 + wq * 16 + g;
#pragma unroll
    for (int dc = 0; dc < DP / 64; ++dc) {
      const int col0 = wd * (DP / 2) + dc * 32;
      float dq[4][4];
#pragma unroll
      for (int i = 0; i < 4; ++i) dq[i][0] = dq[i][1] = dq[i][2] = dq[i][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < kKeys / 16; ++kk) {
        uint32_t a[4];
        LoadA_KM(a, H(s_ds), kDsStride, wq * 16, kk * 16, lane);
#pragma unroll
        for (int np = 0; np < 2; ++np) {
          uint32_t bk[4];
          LoadB_KN(bk, H(s_k), kStride, kk * 16, col0 + np * 16, lane);
          MmaBf16(dq[2 * np], a, bk[0], bk[1]);
          MmaBf16(dq[2 * np + 1], a, bk[2], bk[3]);
        }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = qrow_a + 8 * r;
        if (row >= sh.seq_len) continue;
        float* dst =
            dq_acc + ((static_cast<int64_t>(b) * sh.seq_len + row) * sh.heads + h) * sh.head_dim;
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
          const int col = col0 + nt * 8 + 2 * c;
          if (col < sh.head_dim) AtomicAdd2(dst + col, dq[nt][2 * r], dq[nt][2 * r + 1]);
        }
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

template <int DP, typename T>
cudaError_t Launch(const KernelShape& sh, const void* q, const void* k, const void* v,
                   const void* d_o, const float* lse, const float* delta, float* dq_acc, void* dk,
                   void* dv, cudaStream_t stream) {
  constexpr int kSmem = BackwardSmemBytes<DP>();
  static const cudaError_t attr = cudaFuncSetAttribute(
      BackwardKernel<DP, T>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (attr != cudaSuccess) return attr;
  const dim3 grid((sh.seq_len + kKeys - 1) / kKeys, sh.heads, sh.batch);
  BackwardKernel<DP, T><<<grid, kThreads, kSmem, stream>>>(
      sh, static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
      static_cast<const T*>(d_o), lse, delta, dq_acc, static_cast<T*>(dk), static_cast<T*>(dv));
  return cudaGetLastError();
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

cudaError_t LaunchBackward(const KernelShape& s, const void* q, const void* k, const void* v,
                           const void* d_o, const float* lse, const float* delta, float* dq_acc,
                           void* dk, void* dv, cudaStream_t stream) {
  const bool bf = s.dtype == DType::kBF16;
  if (s.head_dim <= 64) {
    return bf ? Launch<64, bf16>(s, q, k, v, d_o, lse, delta, dq_acc, dk, dv, stream)
              : Launch<64, float>(s, q, k, v, d_o, lse, delta, dq_acc, dk, dv, stream);
  }
  return bf ? Launch<128, bf16>(s, q, k, v, d_o, lse, delta, dq_acc, dk, dv, stream)
            : Launch<128, float>(s, q, k, v, d_o, lse, delta, dq_acc, dk, dv, stream);
}

cudaError_t LaunchConvertToBf16(const float* src, void* dst, int64_t n, cudaStream_t stream) {
  const int blocks = static_cast<int>(std::min<int64_t>((n + 255) / 256, 4096));
  ConvertKernel<<<blocks, 256, 0, stream>>>(src, static_cast<bf16*>(dst), n);
  return cudaGetLastError();
}

}  // namespace mesa::kernels::attention::cuda
