// CUDA implementation of the Mesa operator. Conventions: kernels/mesa/mesa_types.h.
//
// Two layers:
//  1. Device-pointer entry points (ForwardDevice / BackwardDevice) for the trainer: bf16 or fp32
//     q, k, v, o, do, dq, dk, dv; fp32 gates, lambda, q_star, states and their gradients;
//     asynchronous on the given stream; scratch lives in a caller-owned Workspace (reuse it).
//  2. The backend seam (Forward / Backward / DeviceAvailable) with the signatures of
//     mesa::kernels::MesaBackend: fp32, host or device pointers per MesaOptions::memory.
// cu_seqlens is always a HOST span (ValidateMesaInputs reads it on the host); the workspace
// uploads the derived chunk table.
#ifndef MESANET_KERNELS_MESA_CUDA_MESA_CUDA_H_
#define MESANET_KERNELS_MESA_CUDA_MESA_CUDA_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <span>

#include "absl/status/status.h"
#include "kernels/mesa/cuda/mesa_kernels.h"
#include "kernels/mesa/mesa_types.h"

namespace mesa::kernels::cuda {

struct DeviceInputs {
  DType dtype = DType::kF32;  // of q, k, v (and d_o, o, dq, dk, dv)
  const void* q = nullptr;    // [B,T,H,D]
  const void* k = nullptr;
  const void* v = nullptr;
  const float* log_gamma = nullptr;  // [B,T,H]
  const float* beta = nullptr;
  const float* lambda = nullptr;  // [H,D]
  const float* h0 = nullptr;      // optional [S,H,D,D]
  const float* g0 = nullptr;
};

struct DeviceForwardOutputs {
  void* o = nullptr;         // required
  float* q_star = nullptr;   // optional (required for the backward)
  float* h_final = nullptr;  // optional
  float* g_final = nullptr;
  double* cg_steps_mean = nullptr;    // optional; if set, the call synchronises to read it
  int32_t* token_cg_steps = nullptr;  // optional [B,T,H]: each token's forward CG steps
};

struct DeviceBackwardInputs {
  const float* q_star = nullptr;    // from the forward
  const void* d_o = nullptr;        // dtype of DeviceInputs
  const float* dh_final = nullptr;  // optional
  const float* dg_final = nullptr;
  // Opt-in: skip the backward's recompute of the chunk states and use those the LAST
  // ForwardDevice call on the same Workspace left there. Taken only when that call had the same
  // dims, cu_seqlens, dtype and k/v/log_gamma/beta/h0/g0 pointers and no final-state gradients
  // are given (else the states are recomputed); the caller promises the input memory did not
  // change in between. Saves one sequential state scan (~0.37 ms at B8 T2048 H16 D128).
  bool reuse_forward_states = false;
};

struct DeviceGradients {
  void* dq = nullptr;  // required, dtype of DeviceInputs
  void* dk = nullptr;
  void* dv = nullptr;
  float* dlog_gamma = nullptr;  // required
  float* dbeta = nullptr;
  float* dlambda = nullptr;  // required [H,D] (overwritten)
  float* dh0 = nullptr;      // optional
  float* dg0 = nullptr;
  double* cg_steps_mean = nullptr;  // optional; synchronises
};

// Reusable device scratch (chunk tables, chunk states, fp16 copies). Not thread-safe; one per
// stream. Memory grows to the largest problem seen and is freed on destruction.
class Workspace {
 public:
  Workspace();
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  struct Impl;
  Impl* impl() { return impl_.get(); }

 private:
  std::unique_ptr<Impl> impl_;
};

absl::Status ForwardDevice(const MesaDims& dims, std::span<const int32_t> cu_seqlens,
                           const CgOptions& cg, const DeviceInputs& in,
                           const DeviceForwardOutputs& out, Workspace* ws, cudaStream_t stream);

absl::Status BackwardDevice(const MesaDims& dims, std::span<const int32_t> cu_seqlens,
                            const CgOptions& cg, const DeviceInputs& in,
                            const DeviceBackwardInputs& bwd, const DeviceGradients& grads,
                            Workspace* ws, cudaStream_t stream);

// Backend seam (see MesaBackend in kernels/mesa/mesa_types.h). Arguments are already validated.
absl::Status Forward(const MesaInputs& in, const MesaOptions& options, MesaForwardOutputs* out);
absl::Status Backward(const MesaInputs& in, const MesaBackwardInputs& bwd,
                      const MesaOptions& options, MesaGradients* grads);
absl::Status DeviceAvailable();

// Floating-point work of one call, as counted in kernels/mesa/cuda/NOTES.md (dense chunk blocks).
double ForwardFlops(const MesaDims& dims, int cg_steps);
double BackwardFlops(const MesaDims& dims, int cg_steps);

}  // namespace mesa::kernels::cuda

#endif  // MESANET_KERNELS_MESA_CUDA_MESA_CUDA_H_
