// The single-token decoding steps on the GPU (float32, device pointers, asynchronous on a
// stream): the CUDA counterparts of kernels/cpu/mesa_step.h (Mesa, GLA) and
// kernels/deltanet/step.h (DeltaNet, Gated DeltaNet), with the same layouts, the same state
// orientation (the operators' h0/g0/s0 and final states), the same CG iteration and stopping
// rule, and results equal to the CPU steps up to float32 rounding (summation order differs).
//
// Mesa: one thread block per (sequence, head); H is held in shared memory during the solve
// (D^2 floats: 64 KiB at D = 128).
//
// STATUS (2026-11-25): compiles (CI builds it); NOT YET RUN ON A GPU. Its test,
// //kernels/cuda:decode_step_cuda_test (CPU steps vs these, token by token), is staged by
// scripts/gpu/gpu_stage.sh and run by scripts/gpu/gpu_check_kernels.sh; run it before relying on
// these functions.
#ifndef MESANET_KERNELS_CUDA_DECODE_STEP_CUDA_H_
#define MESANET_KERNELS_CUDA_DECODE_STEP_CUDA_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/decode_step_kernels.h"
#include "kernels/mesa_types.h"

namespace mesa::kernels::cuda {

struct DecodeDims {
  int64_t batch = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;
};

// Checks dims (B, H >= 1; D a multiple of 16 in [16, 128]), the CG options and the required
// pointers (InvalidArgument naming the tensor), then launches; a launch failure is Internal. The
// values are not scanned (they live on the device).
absl::Status MesaStepOnDevice(const DecodeDims& dims, const CgOptions& cg,
                              const MesaStepDevice& ptrs, cudaStream_t stream = nullptr);

// Checks dims (B, H, D >= 1) and the required pointers, then launches.
absl::Status DeltaNetStepOnDevice(const DecodeDims& dims, const DeltaStepDevice& ptrs,
                                  cudaStream_t stream = nullptr);

}  // namespace mesa::kernels::cuda

#endif  // MESANET_KERNELS_CUDA_DECODE_STEP_CUDA_H_
