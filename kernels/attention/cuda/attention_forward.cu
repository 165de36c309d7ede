// Fused attention forward (FlashAttention-2 style): one CTA of 4 warps per (128-query tile, head,
// batch row), each warp owning 32 query rows (two m16 tiles, so that every K and V fragment read
// from shared memory feeds two MMAs); K and V tiles of 64 keys stream through shared memory
// (cp.async, two stages) while the warp keeps its running max, sum and output in registers
// (online softmax). Only the key tiles the causal window reaches are visited, and only tiles that
// straddle the window's edges or the sequence's end are masked.
#include <cmath>

#include "kernels/attention/cuda/attention_common.cuh"

namespace mesa::kernels::attention::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kRows = kBigTile;  // queries per CTA; 32 per warp

template <int DP>
constexpr int ForwardSmemBytes() {
  return (kRows + 4 * kTile) * (DP + 8) * 2;  // Q, then K and V in two stages each
}

template <int DP, typename T>
__global__ void __launch_bounds__(kThreads)
    ForwardKernel(KernelShape sh, const T* __restrict__ q, const T* __restrict__ k,
                  const T* __restrict__ v, T* o, float* lse) {
  constexpr int kStride = DP + 8, kKv = kTile * kStride;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* s_q = reinterpret_cast<bf16*>(smem_raw);
  bf16* s_k = s_q + kRows * kStride;  // [2] stages
  bf16* s_v = s_k + 2 * kKv;          // [2] stages

  // Grid (head x batch row, query tile), dispatched x first: every (head, batch row)'s longest
  // tile starts before any shorter one, so the last wave holds the shortest tiles.
  const int num_q_tiles = (sh.seq_len + kRows - 1) / kRows;
  const int qt = num_q_tiles - 1 - static_cast<int>(blockIdx.y);
  const int h = blockIdx.x % sh.heads, b = blockIdx.x / sh.heads;
  const int q0 = qt * kRows;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, c = lane & 3;
  const int q_last = min(q0 + kRows, sh.seq_len) - 1;
  const int k_first = sh.window > 0 ? max(0, q0 - sh.window + 1) : 0;
  const int kt_lo = k_first / kTile, kt_hi = q_last / kTile;
  const float sl2 = sh.scale * kLog2e;
  const int warp_row0 = q0 + warp * 32;
  // Row of accumulator element e (0..3) of m-tile mt: warp_row0 + 16 mt + g + 8 (e >> 1).

  LoadTile<DP, kRows>(s_q, q, sh, b, h, q0, tid, kThreads);
  LoadTile<DP, kTile>(s_k, k, sh, b, h, kt_lo * kTile, tid, kThreads);
  LoadTile<DP, kTile>(s_v, v, sh, b, h, kt_lo * kTile, tid, kThreads);
  AsyncCommit();

  float m[2][2], l[2][2];
  float acc[2][DP / 8][4];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
    m[mt][0] = m[mt][1] = -INFINITY;
    l[mt][0] = l[mt][1] = 0.f;
#pragma unroll
    for (int i = 0; i < DP / 8; ++i)
      acc[mt][i][0] = acc[mt][i][1] = acc[mt][i][2] = acc[mt][i][3] = 0.f;
  }

  for (int kt = kt_lo; kt <= kt_hi; ++kt) {
    const int stage = (kt - kt_lo) & 1;
    if (kt < kt_hi) {
      LoadTile<DP, kTile>(s_k + (stage ^ 1) * kKv, k, sh, b, h, (kt + 1) * kTile, tid, kThreads);
      LoadTile<DP, kTile>(s_v + (stage ^ 1) * kKv, v, sh, b, h, (kt + 1) * kTile, tid, kThreads);
      AsyncCommit();
      AsyncWait<1>();
    } else {
      AsyncWait<0>();
    }
    __syncthreads();
    const bf16* sk = s_k + stage * kKv;
    const bf16* sv = s_v + stage * kKv;
    const int k0 = kt * kTile;

    float s[2][8][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
      for (int i = 0; i < 8; ++i) s[mt][i][0] = s[mt][i][1] = s[mt][i][2] = s[mt][i][3] = 0.f;
    }
#pragma unroll
    for (int ks = 0; ks < DP / 16; ++ks) {
      uint32_t a[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
        LoadA_MK(a[mt], H(s_q), kStride, warp * 32 + mt * 16, ks * 16, lane);
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t bb[4];
        LoadB_NK(bb, H(sk), kStride, np * 16, ks * 16, lane);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          MmaBf16(s[mt][2 * np], a[mt], bb[0], bb[1]);
          MmaBf16(s[mt][2 * np + 1], a[mt], bb[2], bb[3]);
        }
      }
    }
    const bool need_mask =
        k0 + kTile - 1 > warp_row0 || (sh.window > 0 && k0 < warp_row0 + 31 - sh.window + 1) ||
        k0 + kTile > sh.seq_len || warp_row0 + 32 > sh.seq_len || sh.doc_start != nullptr;
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      const int row_a = warp_row0 + mt * 16 + g;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float x = s[mt][nt][e] * sl2;
          if (need_mask && !Visible(sh, b, row_a + 8 * (e >> 1), k0 + nt * 8 + 2 * c + (e & 1))) {
            x = -INFINITY;
          }
          s[mt][nt][e] = x;
        }
      }
      float mx[2] = {m[mt][0], m[mt][1]};
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        mx[0] = fmaxf(mx[0], fmaxf(s[mt][nt][0], s[mt][nt][1]));
        mx[1] = fmaxf(mx[1], fmaxf(s[mt][nt][2], s[mt][nt][3]));
      }
      float base[2], alpha[2], rs[2] = {0.f, 0.f};
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        base[r] = mx[r] == -INFINITY ? 0.f : mx[r];  // a row with nothing visible yet
        alpha[r] = exp2f(m[mt][r] - base[r]);
        m[mt][r] = mx[r];
      }
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          s[mt][nt][e] = exp2f(s[mt][nt][e] - base[e >> 1]);
          rs[e >> 1] += s[mt][nt][e];
        }
      }
      l[mt][0] = l[mt][0] * alpha[0] + rs[0];
      l[mt][1] = l[mt][1] * alpha[1] + rs[1];
#pragma unroll
      for (int i = 0; i < DP / 8; ++i) {
        acc[mt][i][0] *= alpha[0];
        acc[mt][i][1] *= alpha[0];
        acc[mt][i][2] *= alpha[1];
        acc[mt][i][3] *= alpha[1];
      }
    }
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      uint32_t a[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) AccToA(s[mt][2 * kk], s[mt][2 * kk + 1], a[mt]);
#pragma unroll
      for (int nd = 0; nd < DP / 16; ++nd) {
        uint32_t bb[4];
        LoadB_KN(bb, H(sv), kStride, kk * 16, nd * 16, lane);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          MmaBf16(acc[mt][2 * nd], a[mt], bb[0], bb[1]);
          MmaBf16(acc[mt][2 * nd + 1], a[mt], bb[2], bb[3]);
        }
      }
    }
    __syncthreads();  // the next iteration's loads overwrite this stage
  }

#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = warp_row0 + mt * 16 + g + 8 * r;
      const float sum = QuadSum(l[mt][r]);
      if (row >= sh.seq_len) continue;
      const float inv = 1.f / sum;
      const int64_t tok = (static_cast<int64_t>(b) * sh.seq_len + row) * sh.heads + h;
      T* dst = o + tok * sh.head_dim;
#pragma unroll
      for (int nt = 0; nt < DP / 8; ++nt) {
        const int col = nt * 8 + 2 * c;
        if (col < sh.head_dim) {
          Store2(dst + col, acc[mt][nt][2 * r] * inv, acc[mt][nt][2 * r + 1] * inv);
        }
      }
      if (lse != nullptr && c == 0) lse[tok] = m[mt][r] * kLn2 + logf(sum);
    }
  }
}

template <int DP, typename T>
cudaError_t Launch(const KernelShape& sh, const void* q, const void* k, const void* v, void* o,
                   float* lse, cudaStream_t stream) {
  constexpr int kSmem = ForwardSmemBytes<DP>();
  static const cudaError_t attr = cudaFuncSetAttribute(
      ForwardKernel<DP, T>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (attr != cudaSuccess) return attr;
  const dim3 grid(sh.heads * sh.batch, (sh.seq_len + kRows - 1) / kRows);
  ForwardKernel<DP, T>
      <<<grid, kThreads, kSmem, stream>>>(sh, static_cast<const T*>(q), static_cast<const T*>(k),
                                          static_cast<const T*>(v), static_cast<T*>(o), lse);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchForward(const KernelShape& s, const void* q, const void* k, const void* v,
                          void* o, float* lse, cudaStream_t stream) {
  const bool bf = s.dtype == DType::kBF16;
  if (s.head_dim <= 64) {
    return bf ? Launch<64, bf16>(s, q, k, v, o, lse, stream)
              : Launch<64, float>(s, q, k, v, o, lse, stream);
  }
  return bf ? Launch<128, bf16>(s, q, k, v, o, lse, stream)
            : Launch<128, float>(s, q, k, v, o, lse, stream);
}

}  // namespace mesa::kernels::attention::cuda
