// Fused single-token DeltaNet / Gated DeltaNet step (kernels/deltanet/cuda/step_cuda.h): one CTA
// per (sequence, head), one pass over the state. Each thread loads its chunks of a row of S, the
// row's threads reduce u_i = S_i . k, then update S_i <- g S_i + beta (v_i - g u_i) k^T in
// registers, store it and reduce o_i = S_i . q, in the CPU step's float32 order of operations.
#include <cuda_bf16.h>

#include "kernels/common/cuda/step_common.cuh"
#include "kernels/deltanet/cuda/step_kernels.h"

namespace mesa::kernels::deltanet::cuda {
namespace {

namespace step = ::mesa::kernels::cuda::step;
using ::mesa::kernels::cuda::DType;

template <int DP, int TPR, typename T>
__global__ void __launch_bounds__(DP* TPR) DeltaStepKernel(DeltaStepKernelArgs a) {
  using L = step::RowLayout<DP, TPR>;
  __shared__ __align__(16) float s_k[DP];
  __shared__ __align__(16) float s_q[DP];

  const int D = a.head_dim;
  const int bh = blockIdx.x;  // b * H + head
  const int row = threadIdx.x / TPR, part = threadIdx.x % TPR;
  const int64_t tok = int64_t(bh) * D;
  const int64_t state = int64_t(bh) * D * D;
  float4 sr[L::kVec];
  step::LoadRow<L>(a.s + state, D, row, part, sr);  // in flight while the vectors are staged
  step::StageVector<DP>(s_k, static_cast<const T*>(a.k) + tok, D);
  step::StageVector<DP>(s_q, static_cast<const T*>(a.q) + tok, D);
  const float g = a.log_gamma != nullptr ? step::Gamma(a.log_gamma[bh]) : 1.f;
  const float beta = a.beta[bh];
  const float v_i = row < D ? step::LoadElem(static_cast<const T*>(a.v) + tok + row) : 0.f;
  __syncthreads();

  const float u = step::RowSum<TPR>(step::PartDot<L>(sr, s_k, part));
  const float delta = beta * (v_i - g * u);
  step::RankOneRow<L>(sr, g, delta, s_k, part);
  step::StoreRow<L>(a.s + state, D, row, part, sr);
  const float o_i = step::RowSum<TPR>(step::PartDot<L>(sr, s_q, part));
  if (part == 0 && row < D) step::StoreElem(static_cast<T*>(a.o) + tok + row, o_i);
}

template <int DP, int TPR>
cudaError_t Launch(const DeltaStepKernelArgs& a, cudaStream_t stream) {
  const dim3 grid(a.batch * a.heads), block(DP * TPR);
  if (a.dtype == DType::kBF16) {
    DeltaStepKernel<DP, TPR, __nv_bfloat16><<<grid, block, 0, stream>>>(a);
  } else {
    DeltaStepKernel<DP, TPR, float><<<grid, block, 0, stream>>>(a);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchDeltaStep(const DeltaStepKernelArgs& a, cudaStream_t stream) {
  if (a.head_dim <= 16) return Launch<16, 2>(a, stream);
  if (a.head_dim <= 32) return Launch<32, 2>(a, stream);
  if (a.head_dim <= 64) return Launch<64, 4>(a, stream);
  return Launch<128, 4>(a, stream);
}

}  // namespace mesa::kernels::deltanet::cuda
