// Kernel launcher of the causal-convolution decoding step; plain C++ so that host code needs no
// nvcc. Arguments are validated by the caller (causal_conv_step_cuda.h); the launcher returns the
// launch error and never synchronises, allocates or copies, so it can be captured in a CUDA graph.
#ifndef MESANET_KERNELS_CONV_CUDA_CONV_STEP_KERNELS_H_
#define MESANET_KERNELS_CONV_CUDA_CONV_STEP_KERNELS_H_

#include <cuda_runtime.h>

#include "kernels/common/cuda/kernel_problem.h"

namespace mesa::kernels::cuda {

struct ConvStepKernelArgs {
  int batch = 0, seq_len = 0, channels = 0, width = 0;
  DType dtype = DType::kF32;      // of x, out
  const void* x = nullptr;        // [B,T,C]
  const float* weight = nullptr;  // [C,W]
  float* tail = nullptr;          // [B,W-1,C], in place
  void* out = nullptr;            // [B,T,C]
};
// `count` (1 or 2) convolutions of the same batch, seq_len, channels, width and dtype in one
// launch (blockIdx.y picks one): the q and k paths of a layer.
inline constexpr int kMaxConvSteps = 2;
cudaError_t LaunchCausalConvSteps(const ConvStepKernelArgs* a, int count, cudaStream_t stream);

}  // namespace mesa::kernels::cuda

#endif  // MESANET_KERNELS_CONV_CUDA_CONV_STEP_KERNELS_H_
