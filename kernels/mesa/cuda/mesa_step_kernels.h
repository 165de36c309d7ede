// Kernel launcher of the Mesa single-token decoding step; plain C++ so that host code needs no
// nvcc. Arguments are validated by the caller (mesa_step_cuda.h); every launcher returns the launch
// error and never synchronises, allocates or copies, so it can be captured in a CUDA graph.
#ifndef MESANET_KERNELS_MESA_CUDA_MESA_STEP_KERNELS_H_
#define MESANET_KERNELS_MESA_CUDA_MESA_STEP_KERNELS_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/cuda/kernel_problem.h"

namespace mesa::kernels::cuda {

struct MesaStepKernelArgs {
  int batch = 0, heads = 0, head_dim = 0;
  DType dtype = DType::kF32;  // of q, k, v, o
  const void* q = nullptr;    // [B,H,D]
  const void* k = nullptr;
  const void* v = nullptr;
  const float* log_gamma = nullptr;  // [B,H]
  const float* beta = nullptr;
  const float* lambda = nullptr;  // [H,D]
  float* h = nullptr;             // [B,H,D,D], in place; may be null when max_steps == 0
  float* g = nullptr;
  void* o = nullptr;                   // [B,H,D]
  float* q_star = nullptr;             // optional [B,H,D]
  int32_t* cg_steps = nullptr;         // optional [B,H]
  void* o_normed = nullptr;            // optional [B,H,D]: RMSNorm of o over D (mesa_step_cuda.h)
  const float* norm_weight = nullptr;  // [D], with o_normed
  float norm_eps = 0.f;
  int max_steps = 0;
  float tolerance = 0.f;
  // Kernel shape and CG form, for tests and benchmarks: 1 = 4 threads a row (512 threads at
  // D = 128) with 2 CTAs per SM, 2 = the same with 1 CTA per SM, 3 = 2 threads a row (256) with
  // 2 CTAs per SM (128 registers), 4 = 2 threads a row with 3 CTAs per SM (spills); all with two
  // barriers a CG step. kMesaStepThreeBarriers: the first version (three barriers a step, shape
  // 1). 6 = 2 threads a row, 3 CTAs per SM with 6 of each thread's 16 H chunks in shared memory
  // (cp.async; 80 registers), 7 = the same with 8 chunks there, 8 = three barriers with 2 threads
  // a row and 2 CTAs per SM, 9 = three barriers in shape 7, 10 = three barriers in shape 6.
  // 0 = the default: 9 when batch * heads needs more than 2 CTAs per SM (one wave instead of
  // two), else 8 (kernels/mesa/cuda/NOTES.md, "Decoding steps"). Shapes apply to D > 64; smaller D
  // have one shape each (two or three barriers as above).
  int variant = 0;
};
inline constexpr int kMesaStepThreeBarriers = 5;
inline constexpr int kMesaStepVariants = 11;
cudaError_t LaunchMesaStep(const MesaStepKernelArgs& a, cudaStream_t stream);

}  // namespace mesa::kernels::cuda

#endif  // MESANET_KERNELS_MESA_CUDA_MESA_STEP_KERNELS_H_
