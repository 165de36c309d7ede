// Fused single-token Mesa step (kernels/cuda/mesa_step_cuda.h): one CTA per (sequence, head).
//  1. H <- gamma H + beta k k^T in registers (the thread's row chunks), written back at once.
//  2. CG on (H + diag lambda) q* = q exactly as kernels/cpu/mesa_step.cc: float32 vectors, float64
//     dot products, alpha and the direction ratio rounded to float32, the same stopping rule and
//     freezing. Per step: one matrix-vector product from registers (p broadcast through shared
//     memory) and two block reductions; three barriers.
//  3. G <- gamma G + beta v k^T streamed from memory, o = G q* on the way.
#include <cuda_bf16.h>

#include "kernels/cuda/step_common.cuh"
#include "kernels/cuda/step_kernels.h"

namespace mesa::kernels::cuda {
namespace {

using step::BlockSum;
using step::LoadElem;
using step::RowSum;
using step::StoreElem;

template <int DP, int TPR, int kMinBlocks, typename T>
__global__ void __launch_bounds__(DP* TPR, kMinBlocks) MesaStepKernel(MesaStepKernelArgs a) {
  using L = step::RowLayout<DP, TPR>;
  __shared__ __align__(16) float s_k[DP];
  __shared__ __align__(16) float s_p[DP];
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
  if (part == 0) s_p[row] = q_i;  // p0 = q (zero padded)
  __syncthreads();

  float x = q_i;  // GLA readout: q* = q
  int steps = 0;
  float4 hr[L::kVec];
  if (a.h != nullptr) {
    step::LoadRow<L>(a.h + state, D, row, part, hr);
    step::RankOneRow<L>(hr, gamma, beta * k_i, s_k, part);
    step::StoreRow<L>(a.h + state, D, row, part, hr);
  }
  if (a.max_steps > 0) {
    x = 0.f;
    float r = q_i, p = q_i;
    double d_old = BlockSum<L::kWarps>(part == 0 ? double(q_i) * q_i : 0.0, s_red[1]);
    const double d0 = d_old;
    const double tol2 = double(a.tolerance) * a.tolerance;
    if (d_old > 0) {
      for (int it = 0; it < a.max_steps; ++it) {
        const float w = RowSum<TPR>(step::PartDot<L>(hr, s_p, part)) + p * lam;
        const double pw = BlockSum<L::kWarps>(part == 0 ? double(p) * w : 0.0, s_red[0]);
        if (!(pw > 0)) break;  // lost positivity to rounding: freeze
        const float alpha = static_cast<float>(d_old / pw);
        x += alpha * p;
        r -= alpha * w;
        const double d_new = BlockSum<L::kWarps>(part == 0 ? double(r) * r : 0.0, s_red[1]);
        ++steps;
        if ((a.tolerance > 0 && d_new <= tol2 * d0) || !(d_new > 0)) break;
        const float ratio = static_cast<float>(d_new / d_old);
        p = r + ratio * p;
        if (part == 0) s_p[row] = p;  // every read of the old p ended before the last barrier
        d_old = d_new;
        __syncthreads();
      }
    }
  }
  // Every read of s_p (the products) happened before the last barrier: reuse it for q*.
  if (part == 0) s_p[row] = x;
  __syncthreads();

  float4 gr[L::kVec];
  step::LoadRow<L>(a.g + state, D, row, part, gr);
  step::RankOneRow<L>(gr, gamma, beta * v_i, s_k, part);
  step::StoreRow<L>(a.g + state, D, row, part, gr);
  const float o_i = RowSum<TPR>(step::PartDot<L>(gr, s_p, part));
  if (part == 0 && row_ok) {
    StoreElem(static_cast<T*>(a.o) + tok + row, o_i);
    if (a.q_star != nullptr) a.q_star[tok + row] = x;
  }
  if (threadIdx.x == 0 && a.cg_steps != nullptr) a.cg_steps[bh] = steps;
}

template <int DP, int TPR, int kMinBlocks>
cudaError_t Launch(const MesaStepKernelArgs& a, cudaStream_t stream) {
  const dim3 grid(a.batch * a.heads), block(DP * TPR);
  if (a.dtype == DType::kBF16) {
    MesaStepKernel<DP, TPR, kMinBlocks, __nv_bfloat16><<<grid, block, 0, stream>>>(a);
  } else {
    MesaStepKernel<DP, TPR, kMinBlocks, float><<<grid, block, 0, stream>>>(a);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchMesaStep(const MesaStepKernelArgs& a, cudaStream_t stream) {
  if (a.head_dim <= 16) return Launch<16, 2, 1>(a, stream);
  if (a.head_dim <= 32) return Launch<32, 2, 1>(a, stream);
  if (a.head_dim <= 64) return Launch<64, 4, 1>(a, stream);
  switch (a.variant) {
    case 2:
      return Launch<128, 4, 1>(a, stream);
    case 3:
      return Launch<128, 8, 1>(a, stream);
    default:
      return Launch<128, 4, 2>(a, stream);
  }
}

}  // namespace mesa::kernels::cuda
