// Fused single-token Mesa step (kernels/mesa/cuda/mesa_step_cuda.h): one CTA per (sequence, head).
//  1. H <- gamma H + beta k k^T in registers (the thread's row chunks; at 3 CTAs an SM some of
//     them in shared memory), written back at once.
//  2. CG on (H + diag lambda) q* = q exactly as kernels/mesa/step.cc: float32 vectors, float64
//     dot products, alpha and the direction ratio rounded to float32, the same stopping rule and
//     freezing. Per step: one matrix-vector product from registers (the direction through shared
//     memory) and two block reductions, with three barriers (CgThreeBarriers) or two
//     (CgTwoBarriers, which forms the next direction inside the product).
//  3. G <- gamma G + beta v k^T streamed from memory, o = G q* on the way.
#include <cuda_bf16.h>

#include "kernels/common/cuda/kernel_problem.h"
#include "kernels/common/cuda/mma.cuh"
#include "kernels/common/cuda/step_common.cuh"
#include "kernels/mesa/cuda/mesa_step_kernels.h"

namespace mesa::kernels::cuda {
namespace {

using step::BlockSum;
using step::LoadElem;
using step::RowSum;
using step::StoreElem;

// H chunks i >= kReg of this thread are in shared memory (s_h[(i - kReg) * kThreads + tid]),
// so that three CTAs fit an SM without spilling (kReg = L::kVec: all in registers).
template <class L, int kReg>
__device__ __forceinline__ float4 HChunk(const float4* hr, const float4* s_h, int i) {
  return i < kReg ? hr[i] : s_h[(i - kReg) * L::kThreads + threadIdx.x];
}

// This thread's part of H[row] . p (step::PartDot with the chunks where HChunk keeps them).
template <class L, int kReg>
__device__ __forceinline__ float PartDotH(const float4* hr, const float4* s_h, const float* p,
                                          int part) {
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
  for (int i = 0; i < L::kVec; ++i) {
    const float4 h = HChunk<L, kReg>(hr, s_h, i);
    const float4 v = *reinterpret_cast<const float4*>(p + L::Col(part, i));
    acc.x += h.x * v.x;
    acc.y += h.y * v.y;
    acc.z += h.z * v.z;
    acc.w += h.w * v.w;
  }
  return (acc.x + acc.y) + (acc.z + acc.w);
}

// CG of kernels/mesa/step.cc on (H + diag lambda) x = q, H = this thread's row chunks hr;
// returns the steps taken and leaves x (the row's component) in *x. Every thread of a row holds
// the row's r, p, w, x (the same bits). Three barriers a step: p is published, then p.w and r.r.
// The reductions count each row once by butterflies over the rows only (the sums of the former
// full-warp butterflies with zeros in the other lanes, bit for bit, one shuffle level fewer).
template <class L, int kReg>
__device__ __forceinline__ int CgThreeBarriers(const float4* hr, const float4* s_h, float q_i,
                                               float lam, int row, int part, int max_steps,
                                               float tolerance, float* s_p,
                                               double (*s_red)[L::kWarps], float* x) {
  float r = q_i, p = q_i;
  *x = 0.f;
  if (part == 0) s_p[row] = q_i;  // p0 = q (zero padded)
  double d_old = BlockSum<L::kWarps, L::TPR>(double(q_i) * q_i, s_red[1]);
  const double d0 = d_old;
  const double tol2 = double(tolerance) * tolerance;
  int steps = 0;
  if (!(d_old > 0)) return 0;
  for (int it = 0; it < max_steps; ++it) {
    const float w = RowSum<L::TPR>(PartDotH<L, kReg>(hr, s_h, s_p, part)) + p * lam;
    const double pw = BlockSum<L::kWarps, L::TPR>(double(p) * w, s_red[0]);
    if (!(pw > 0)) break;  // lost positivity to rounding: freeze
    const float alpha = static_cast<float>(d_old / pw);
    *x += alpha * p;
    r -= alpha * w;
    const double d_new = BlockSum<L::kWarps, L::TPR>(double(r) * r, s_red[1]);
    ++steps;
    if ((tolerance > 0 && d_new <= tol2 * d0) || !(d_new > 0)) break;
    const float ratio = static_cast<float>(d_new / d_old);
    p = r + ratio * p;
    if (part == 0) s_p[row] = p;  // every read of the old p ended before the last barrier
    d_old = d_new;
    __syncthreads();
  }
  return steps;
}

// The same CG with two barriers a step: r is published with r.r, and each thread forms its
// chunks of the next direction p' = r + ratio p from the shared r and the shared previous p
// (double-buffered) while multiplying, in the owner's bits (explicit fma on both sides). The
// reductions count each row once by butterflies over the rows only.
template <class L, int kReg>
__device__ __forceinline__ int CgTwoBarriers(const float4* hr, const float4* s_h, float q_i,
                                             float lam, int row, int part, int max_steps,
                                             float tolerance, float (*s_p)[L::DP], float* s_r,
                                             double (*s_red)[L::kWarps], float* x) {
  float r = q_i, p = q_i, ratio = 0.f;  // the first direction is r + 0 * p = q
  *x = 0.f;
  if (part == 0) {
    s_p[0][row] = q_i;
    s_r[row] = q_i;
  }
  double d_old = BlockSum<L::kWarps, L::TPR>(double(q_i) * q_i, s_red[1]);
  const double d0 = d_old;
  const double tol2 = double(tolerance) * tolerance;
  int steps = 0;
  if (!(d_old > 0)) return 0;
  for (int it = 0; it < max_steps; ++it) {
    const float* p_old = s_p[it & 1];
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int i = 0; i < L::kVec; ++i) {
      const int c = L::Col(part, i);
      const float4 po = *reinterpret_cast<const float4*>(p_old + c);
      const float4 rc = *reinterpret_cast<const float4*>(s_r + c);
      const float4 h = HChunk<L, kReg>(hr, s_h, i);
      acc.x += h.x * __fmaf_rn(ratio, po.x, rc.x);
      acc.y += h.y * __fmaf_rn(ratio, po.y, rc.y);
      acc.z += h.z * __fmaf_rn(ratio, po.z, rc.z);
      acc.w += h.w * __fmaf_rn(ratio, po.w, rc.w);
    }
    p = __fmaf_rn(ratio, p, r);
    // Readers of this buffer (the product two steps back) passed a barrier since.
    if (part == 0) s_p[(it + 1) & 1][row] = p;
    const float w = RowSum<L::TPR>((acc.x + acc.y) + (acc.z + acc.w)) + p * lam;
    const double pw = BlockSum<L::kWarps, L::TPR>(double(p) * w, s_red[0]);
    if (!(pw > 0)) break;  // lost positivity to rounding: freeze
    const float alpha = static_cast<float>(d_old / pw);
    *x += alpha * p;
    r -= alpha * w;
    if (part == 0) s_r[row] = r;  // the products that read the old r ended at the last barrier
    const double d_new = BlockSum<L::kWarps, L::TPR>(double(r) * r, s_red[1]);
    ++steps;
    if ((tolerance > 0 && d_new <= tol2 * d0) || !(d_new > 0)) break;
    ratio = static_cast<float>(d_new / d_old);
    d_old = d_new;
  }
  return steps;
}

// kSmemChunks: how many of the thread's H chunks live in shared memory.
template <int DP, int TPR, int kMinBlocks, bool kTwoBarriers, int kSmemChunks, typename T>
__global__ void __launch_bounds__(DP* TPR, kMinBlocks) MesaStepKernel(MesaStepKernelArgs a) {
  using L = step::RowLayout<DP, TPR>;
  static_assert(kSmemChunks >= 0 && kSmemChunks < L::kVec);
  constexpr int kReg = L::kVec - kSmemChunks;
  __shared__ __align__(16) float4 s_h[kSmemChunks > 0 ? kSmemChunks * L::kThreads : 1];
  __shared__ __align__(16) float s_k[DP];
  __shared__ __align__(16) float s_p[2][DP];
  __shared__ __align__(16) float s_r[DP];
  __shared__ double s_red[2][L::kWarps];

  const int D = a.head_dim;
  const int bh = blockIdx.x;  // b * H + head
  const int head = bh % a.heads;
  const int row = threadIdx.x / TPR, part = threadIdx.x % TPR;
  const bool row_ok = row < D;
  const int64_t tok = int64_t(bh) * D;
  const T* q = static_cast<const T*>(a.q) + tok;
  const T* k = static_cast<const T*>(a.k) + tok;
  const T* v = static_cast<const T*>(a.v) + tok;
  const int64_t state = int64_t(bh) * D * D;

  step::StageVector<DP>(s_k, k, D);
  const float gamma = step::Gamma(a.log_gamma[bh]);
  const float beta = a.beta[bh];
  const float q_i = row_ok ? LoadElem(q + row) : 0.f;
  const float k_i = row_ok ? LoadElem(k + row) : 0.f;
  const float v_i = row_ok ? LoadElem(v + row) : 0.f;
  const float lam = row_ok ? a.lambda[int64_t(head) * D + row] : 1.f;
  __syncthreads();

  float x = q_i;  // GLA readout: q* = q
  int steps = 0;
  float4 hr[L::kVec];
  if (a.h != nullptr) {
    if constexpr (kSmemChunks == 0) {
      step::LoadRow<L>(a.h + state, D, row, part, hr);
      step::RankOneRow<L>(hr, gamma, beta * k_i, s_k, part);
      step::StoreRow<L>(a.h + state, D, row, part, hr);
    } else {
      // The same with the last kSmemChunks chunks copied straight into shared memory (cp.async,
      // no registers), so that all 16 loads are in flight at once; each thread reads back only
      // its own chunks, so no barrier.
      float* hm = a.h + state + int64_t(row) * D;
#pragma unroll
      for (int i = kReg; i < L::kVec; ++i) {
        const int c = L::Col(part, i);
        float4* slot = &s_h[(i - kReg) * L::kThreads + threadIdx.x];
        if (row_ok && c < D) {
          CpAsync16(slot, hm + c);
        } else {
          *slot = make_float4(0.f, 0.f, 0.f, 0.f);
        }
      }
#pragma unroll
      for (int i = 0; i < kReg; ++i) {
        const int c = L::Col(part, i);
        hr[i] = row_ok && c < D ? *reinterpret_cast<const float4*>(hm + c)
                                : make_float4(0.f, 0.f, 0.f, 0.f);
      }
      step::RankOneRow<L, kReg>(hr, gamma, beta * k_i, s_k, part);
#pragma unroll
      for (int i = 0; i < kReg; ++i) {
        const int c = L::Col(part, i);
        if (row_ok && c < D) *reinterpret_cast<float4*>(hm + c) = hr[i];
      }
      CpAsyncWaitAll();
#pragma unroll
      for (int i = kReg; i < L::kVec; ++i) {
        const int c = L::Col(part, i);
        float4* slot = &s_h[(i - kReg) * L::kThreads + threadIdx.x];
        float4 v = *slot;
        const float4 kc = *reinterpret_cast<const float4*>(s_k + c);
        const float bk = beta * k_i;
        v.x = gamma * v.x + bk * kc.x;
        v.y = gamma * v.y + bk * kc.y;
        v.z = gamma * v.z + bk * kc.z;
        v.w = gamma * v.w + bk * kc.w;
        *slot = v;
        if (row_ok && c < D) *reinterpret_cast<float4*>(hm + c) = v;
      }
    }
  }
  if (a.max_steps > 0) {
    if constexpr (kTwoBarriers) {
      steps = CgTwoBarriers<L, kReg>(hr, s_h, q_i, lam, row, part, a.max_steps, a.tolerance, s_p,
                                     s_r, s_red, &x);
    } else {
      steps = CgThreeBarriers<L, kReg>(hr, s_h, q_i, lam, row, part, a.max_steps, a.tolerance,
                                       s_p[0], s_red, &x);
    }
  }
  // q* to shared memory for o = G q* (nothing reads s_r after the solve's last barrier).
  if (part == 0) s_r[row] = x;
  __syncthreads();

  float o_i;
  if constexpr (kSmemChunks == 0) {
    float4 gr[L::kVec];
    step::LoadRow<L>(a.g + state, D, row, part, gr);
    step::RankOneRow<L>(gr, gamma, beta * v_i, s_k, part);
    step::StoreRow<L>(a.g + state, D, row, part, gr);
    o_i = RowSum<TPR>(step::PartDot<L>(gr, s_r, part));
  } else {
    // At 3 CTAs an SM (80 registers) G goes in two halves of the row's chunks, the dot
    // product's accumulators carried over (the same sums in the same order as PartDot).
    constexpr int kHalf = L::kVec / 2;
    float* gm = a.g + state + int64_t(row) * D;
    const float bv = beta * v_i;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float4 gr[kHalf];
#pragma unroll
      for (int j = 0; j < kHalf; ++j) {
        const int c = L::Col(part, half * kHalf + j);
        gr[j] = row_ok && c < D ? *reinterpret_cast<const float4*>(gm + c)
                                : make_float4(0.f, 0.f, 0.f, 0.f);
      }
#pragma unroll
      for (int j = 0; j < kHalf; ++j) {
        const int c = L::Col(part, half * kHalf + j);
        const float4 kc = *reinterpret_cast<const float4*>(s_k + c);
        gr[j].x = gamma * gr[j].x + bv * kc.x;
        gr[j].y = gamma * gr[j].y + bv * kc.y;
        gr[j].z = gamma * gr[j].z + bv * kc.z;
        gr[j].w = gamma * gr[j].w + bv * kc.w;
        if (row_ok && c < D) *reinterpret_cast<float4*>(gm + c) = gr[j];
        const float4 xs = *reinterpret_cast<const float4*>(s_r + c);
        acc.x += gr[j].x * xs.x;
        acc.y += gr[j].y * xs.y;
        acc.z += gr[j].z * xs.z;
        acc.w += gr[j].w * xs.w;
      }
    }
    o_i = RowSum<TPR>((acc.x + acc.y) + (acc.z + acc.w));
  }
  if (part == 0 && row_ok) {
    StoreElem(static_cast<T*>(a.o) + tok + row, o_i);
    if (a.q_star != nullptr) a.q_star[tok + row] = x;
  }
  if (threadIdx.x == 0 && a.cg_steps != nullptr) a.cg_steps[bh] = steps;
  if (a.o_normed != nullptr) {
    // The head norm of o as stored (CPU RmsNormForward's formula; float64 sum of squares). The
    // sum's buffer was last read before the barrier that published q*.
    T stored;
    StoreElem(&stored, o_i);
    const float os = row_ok ? LoadElem(&stored) : 0.f;
    const double sum_sq = BlockSum<L::kWarps, TPR>(double(os) * os, s_red[0]);
    const float s = static_cast<float>(1.0 / sqrt(sum_sq / D + double(a.norm_eps)));
    if (part == 0 && row_ok) {
      StoreElem(static_cast<T*>(a.o_normed) + tok + row, os * s * a.norm_weight[row]);
    }
  }
}

template <int DP, int TPR, int kMinBlocks, bool kTwoBarriers, int kSmemChunks = 0>
cudaError_t Launch(const MesaStepKernelArgs& a, cudaStream_t stream) {
  const dim3 grid(a.batch * a.heads), block(DP * TPR);
  if (a.dtype == DType::kBF16) {
    MesaStepKernel<DP, TPR, kMinBlocks, kTwoBarriers, kSmemChunks, __nv_bfloat16>
        <<<grid, block, 0, stream>>>(a);
  } else {
    MesaStepKernel<DP, TPR, kMinBlocks, kTwoBarriers, kSmemChunks, float>
        <<<grid, block, 0, stream>>>(a);
  }
  return cudaGetLastError();
}

template <int DP, int TPR>
cudaError_t LaunchSmall(const MesaStepKernelArgs& a, cudaStream_t stream) {
  return a.variant == kMesaStepThreeBarriers ? Launch<DP, TPR, 1, false>(a, stream)
                                             : Launch<DP, TPR, 1, true>(a, stream);
}

}  // namespace

cudaError_t LaunchMesaStep(const MesaStepKernelArgs& a, cudaStream_t stream) {
  if (a.head_dim <= 16) return LaunchSmall<16, 2>(a, stream);
  if (a.head_dim <= 32) return LaunchSmall<32, 2>(a, stream);
  if (a.head_dim <= 64) return LaunchSmall<64, 4>(a, stream);
  switch (a.variant) {
    case 1:
      return Launch<128, 4, 2, true>(a, stream);
    case 2:
      return Launch<128, 4, 1, true>(a, stream);
    case 4:
      return Launch<128, 2, 3, true>(a, stream);
    case kMesaStepThreeBarriers:
      return Launch<128, 4, 2, false>(a, stream);
    case 3:
      return Launch<128, 2, 2, true>(a, stream);
    case 6:
      return Launch<128, 2, 3, true, 6>(a, stream);
    case 7:
      return Launch<128, 2, 3, true, 8>(a, stream);
    case 8:
      return Launch<128, 2, 2, false>(a, stream);
    case 9:
      return Launch<128, 2, 3, false, 8>(a, stream);
    case 10:
      return Launch<128, 2, 3, false, 6>(a, stream);
    default:  // 0: the fastest on an H100 (NOTES.md, "Decoding steps"), three barriers a step:
              // 3 CTAs an SM once more than 2 an SM are needed (one wave instead of two), else 2
      if (int64_t{a.batch} * a.heads > 2 * int64_t{SmCount()}) {
        return Launch<128, 2, 3, false, 8>(a, stream);
      }
      return Launch<128, 2, 2, false>(a, stream);
  }
}

}  // namespace mesa::kernels::cuda
