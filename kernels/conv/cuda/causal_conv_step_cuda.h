// The q/k short causal depthwise convolution continued from a saved tail, on the device: the
// counterpart of kernels/conv/causal_conv_step.h (same ConvDims, layouts and summation order, so
// fp32 results equal the CPU's bit for bit), for decoding (T = 1) and appending T tokens.
//
// Device pointers (row-major, contiguous):
//   x, out : [B, T, C]      fp32 or bf16 (dtype); must not overlap
//   weight : [C, W] fp32
//   tail   : [B, W - 1, C] fp32, updated in place to the last W - 1 inputs of (tail ++ x)
// One kernel launch on `stream`; no synchronisation, allocation or copy (CUDA-graph capturable).
#ifndef MESANET_KERNELS_CONV_CUDA_CAUSAL_CONV_STEP_CUDA_H_
#define MESANET_KERNELS_CONV_CUDA_CAUSAL_CONV_STEP_CUDA_H_

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "kernels/common/cuda/kernel_problem.h"
#include "kernels/conv/causal_conv_step.h"

namespace mesa::kernels::cuda {

using ::mesa::kernels::cpu::ConvDims;

// Checks dims (B, T, C >= 1, W in [1, kMaxConvWidth], B * C and T * C < 2^31) and that the
// pointers are set (tail may be null only when W == 1). InvalidArgument naming the problem.
absl::Status ValidateCausalConvAppendDevice(const ConvDims& dims, const void* x,
                                            const float* weight, const float* tail,
                                            const void* out);

// Validates, then enqueues the convolution on `stream`. Internal if the launch fails.
absl::Status CausalConvAppendDevice(const ConvDims& dims, DType dtype, const void* x,
                                    const float* weight, float* tail, void* out,
                                    cudaStream_t stream);

// The operands of one of CausalConvAppendPairDevice's convolutions (as CausalConvAppendDevice's).
struct ConvOperands {
  const void* x = nullptr;
  const float* weight = nullptr;
  float* tail = nullptr;
  void* out = nullptr;
};

// Two convolutions of the same dims and dtype (a layer's q and k paths) in one launch, each as
// CausalConvAppendDevice. Both are validated, and neither output may overlap any input, tail or
// the other output (they run concurrently): InvalidArgument naming the problem.
absl::Status CausalConvAppendPairDevice(const ConvDims& dims, DType dtype,
                                        const ConvOperands& first, const ConvOperands& second,
                                        cudaStream_t stream);

}  // namespace mesa::kernels::cuda

#endif  // MESANET_KERNELS_CONV_CUDA_CAUSAL_CONV_STEP_CUDA_H_
