// Kernel launcher of the DeltaNet-family decoding step (plain C++; validated by step_cuda.h).
// Returns the launch error; never synchronises, allocates or copies (CUDA-graph capturable).
#ifndef MESANET_KERNELS_DELTANET_CUDA_STEP_KERNELS_H_
#define MESANET_KERNELS_DELTANET_CUDA_STEP_KERNELS_H_

#include <cuda_runtime.h>

#include "kernels/common/cuda/kernel_problem.h"

namespace mesa::kernels::deltanet::cuda {

struct DeltaStepKernelArgs {
  int batch = 0, heads = 0, head_dim = 0;
  ::mesa::kernels::cuda::DType dtype = ::mesa::kernels::cuda::DType::kF32;  // of q, k, v, o
  const void* q = nullptr;                                                  // [B,H,D]
  const void* k = nullptr;
  const void* v = nullptr;
  const float* beta = nullptr;       // [B,H]
  const float* log_gamma = nullptr;  // [B,H]; null: DeltaNet (g = 1)
  float* s = nullptr;                // [B,H,D,D], in place
  void* o = nullptr;                 // [B,H,D]
};
cudaError_t LaunchDeltaStep(const DeltaStepKernelArgs& a, cudaStream_t stream);

}  // namespace mesa::kernels::deltanet::cuda

#endif  // MESANET_KERNELS_DELTANET_CUDA_STEP_KERNELS_H_
