// Fused single-token CUDA step of the DeltaNet-family operator: the device counterpart of
// kernels/deltanet/step.h (same semantics and state layout; see there).
//
// Per (sequence b, head h), g = exp(log_gamma) (1 for DeltaNet, log_gamma null):
//   u = S k,   S <- g S + beta (v - g u) k^T,   o = S q
// Device pointers (row-major, contiguous; s 16-byte aligned, as cudaMalloc gives):
//   q, k, v, o : [B, H, D] fp32 or bf16 (dtype);  beta, log_gamma : [B, H] fp32
//   s : [B, H, D, D] fp32, updated in place (= DeltaNetForward's s0 / s_final)
// One kernel launch on `stream`; no synchronisation, allocation or host<->device copy, so it can
// be captured in a CUDA graph. Deterministic.
#ifndef MESANET_KERNELS_DELTANET_CUDA_STEP_CUDA_H_
#define MESANET_KERNELS_DELTANET_CUDA_STEP_CUDA_H_

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "kernels/common/cuda/kernel_problem.h"
#include "kernels/deltanet/step.h"

namespace mesa::kernels::deltanet::cuda {

using ::mesa::kernels::cuda::DType;

struct DeltaStepDeviceInputs {
  DType dtype = DType::kF32;  // of q, k, v and o
  const void* q = nullptr;    // [B,H,D]
  const void* k = nullptr;
  const void* v = nullptr;
  const float* beta = nullptr;       // [B,H]
  const float* log_gamma = nullptr;  // [B,H] for Gated DeltaNet; null => DeltaNet (g = 1)
};

// Checks dims (B, H >= 1, B * H < 2^31, D a multiple of 16 in [16, 128] as the CUDA chunked op),
// that q, k, v, beta, s, o are set and s is 16-byte aligned. InvalidArgument naming the problem.
absl::Status ValidateDeltaStepDevice(const DeltaStepDims& dims, const DeltaStepDeviceInputs& in,
                                     const float* s, const void* o);

// Validates, then enqueues the step on `stream`. Internal if the launch fails.
absl::Status DeltaStepDevice(const DeltaStepDims& dims, const DeltaStepDeviceInputs& in, float* s,
                             void* o, cudaStream_t stream);

}  // namespace mesa::kernels::deltanet::cuda

#endif  // MESANET_KERNELS_DELTANET_CUDA_STEP_CUDA_H_
