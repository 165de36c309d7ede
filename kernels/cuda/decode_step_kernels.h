// Kernel launchers for the single-token decoding steps (plain C++, no nvcc needed to include).
// Semantics, layouts and state orientation: kernels/cpu/mesa_step.h and kernels/deltanet/step.h;
// these are their float32 CUDA counterparts (kernels/cuda/decode_step_cuda.h validates and calls
// them). Every launcher returns the launch error and never synchronises.
#ifndef MESANET_KERNELS_CUDA_DECODE_STEP_KERNELS_H_
#define MESANET_KERNELS_CUDA_DECODE_STEP_KERNELS_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace mesa::kernels::cuda {

// Device pointers of one Mesa / GLA step (layouts as kernels/cpu/mesa_step.h). h may be null
// only when max_steps == 0 (GLA); q_star and cg_steps may be null.
struct MesaStepDevice {
  const float *q = nullptr, *k = nullptr, *v = nullptr;  // [B,H,D]
  const float *log_gamma = nullptr, *beta = nullptr;     // [B,H]
  const float* lambda = nullptr;                         // [H,D], > 0
  float *h = nullptr, *g = nullptr;                      // [B,H,D,D], updated in place
  float* o = nullptr;                                    // [B,H,D]
  float* q_star = nullptr;                               // [B,H,D]
  int32_t* cg_steps = nullptr;                           // [B,H]
};

// Device pointers of one DeltaNet / Gated DeltaNet step (layouts as kernels/deltanet/step.h);
// log_gamma null => DeltaNet.
struct DeltaStepDevice {
  const float *q = nullptr, *k = nullptr, *v = nullptr;  // [B,H,D]
  const float *beta = nullptr, *log_gamma = nullptr;     // [B,H]
  float* s = nullptr;                                    // [B,H,D,D], updated in place
  float* o = nullptr;                                    // [B,H,D]
};

// rows = B * H thread blocks; head_dim a multiple of 16 in [16, 128] for Mesa, >= 1 for DeltaNet.
cudaError_t LaunchMesaStep(int rows, int heads, int head_dim, int max_steps, float tolerance,
                           const MesaStepDevice& ptrs, cudaStream_t stream);
cudaError_t LaunchDeltaNetStep(int rows, int head_dim, const DeltaStepDevice& ptrs,
                               cudaStream_t stream);

}  // namespace mesa::kernels::cuda

#endif  // MESANET_KERNELS_CUDA_DECODE_STEP_KERNELS_H_
