// Fused single-token CUDA step of the Mesa operator: the device counterpart of
// kernels/mesa/step.h (same semantics, state layout and CG; see there), for constant-memory
// decoding without the chunkwise operator's T = 1 launches, chunk tables and state copies.
//
// Per (sequence b, head h):  H <- gamma H + beta k k^T,  G <- gamma G + beta v k^T,
//   q* = (H + diag lambda)^{-1} q by the CPU step's CG (max_steps == 0: q* = q, GLA), o = G q*.
//
// Device pointers (row-major, contiguous; 16-byte aligned h and g, as cudaMalloc gives):
//   q, k, v, o : [B, H, D]  fp32 or bf16 (MesaStepDeviceInputs::dtype)
//   log_gamma, beta : [B, H] fp32;  lambda : [H, D] fp32, > 0 (not checked: device memory)
//   h, g : [B, H, D, D] fp32, updated in place (= the chunked op's h0/g0 and h_final/g_final)
//   q_star : optional [B, H, D] fp32;  cg_steps : optional [B, H] int32 (0 for GLA)
// One kernel launch on `stream`; no synchronisation, allocation or host<->device copy, so the
// call can be captured in a CUDA graph (the arguments are baked into the graph: keep the
// buffers). Results are deterministic (same inputs, same bits).
#ifndef MESANET_KERNELS_MESA_CUDA_MESA_STEP_CUDA_H_
#define MESANET_KERNELS_MESA_CUDA_MESA_STEP_CUDA_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/common/cuda/kernel_problem.h"
#include "kernels/mesa/mesa_types.h"
#include "kernels/mesa/step.h"

namespace mesa::kernels::cuda {

using ::mesa::kernels::cpu::MesaStepDims;

struct MesaStepDeviceInputs {
  DType dtype = DType::kF32;  // of q, k, v and o
  const void* q = nullptr;    // [B,H,D]
  const void* k = nullptr;
  const void* v = nullptr;
  const float* log_gamma = nullptr;  // [B,H]
  const float* beta = nullptr;       // [B,H]
  const float* lambda = nullptr;     // [H,D]
};

// h may be null when cg.max_steps == 0 (GLA never reads it; as on the CPU, keep it if the state
// goes back to the chunkwise op with a solve).
struct MesaStepDeviceState {
  float* h = nullptr;  // [B,H,D,D]
  float* g = nullptr;  // [B,H,D,D]
};

struct MesaStepDeviceOutputs {
  void* o = nullptr;            // required [B,H,D], dtype of the inputs
  float* q_star = nullptr;      // optional [B,H,D]
  int32_t* cg_steps = nullptr;  // optional [B,H]
  // Optional, the layer's head norm fused into the step (one launch less a decoding layer):
  // o_normed [B,H,D] (dtype of the inputs, not overlapping o) = RMSNorm over D of o as stored,
  // o * s * norm_weight with s = 1 / sqrt(mean(o^2) + norm_eps) (the CPU backend's RmsNormForward);
  // norm_weight [D] fp32 is then required and norm_eps must be finite and >= 0.
  void* o_normed = nullptr;
  const float* norm_weight = nullptr;
  float norm_eps = 0.f;
};

// Checks dims (B, H >= 1, B * H < 2^31; D a multiple of 16 in [16, 128]), the CG options, that
// the required pointers are set and h, g are 16-byte aligned. InvalidArgument naming the problem;
// the device memory is not read.
absl::Status ValidateMesaStepDevice(const MesaStepDims& dims, const CgOptions& cg,
                                    const MesaStepDeviceInputs& in,
                                    const MesaStepDeviceState& state,
                                    const MesaStepDeviceOutputs& out);

// Validates, then enqueues the step on `stream`. Internal if the launch fails.
absl::Status MesaStepDevice(const MesaStepDims& dims, const CgOptions& cg,
                            const MesaStepDeviceInputs& in, MesaStepDeviceState state,
                            const MesaStepDeviceOutputs& out, cudaStream_t stream);

// For tests and benchmarks: MesaStepDevice with a kernel variant (MesaStepKernelArgs::variant in
// kernels/mesa/cuda/mesa_step_kernels.h; 0 = the default, what MesaStepDevice runs).
absl::Status MesaStepDeviceVariant(int variant, const MesaStepDims& dims, const CgOptions& cg,
                                   const MesaStepDeviceInputs& in, MesaStepDeviceState state,
                                   const MesaStepDeviceOutputs& out, cudaStream_t stream);

}  // namespace mesa::kernels::cuda

#endif  // MESANET_KERNELS_MESA_CUDA_MESA_STEP_CUDA_H_
