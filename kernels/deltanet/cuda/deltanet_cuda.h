// CUDA implementation of the DeltaNet-family operator (DeltaNet, Gated DeltaNet). Conventions:
// kernels/deltanet/deltanet_types.h; algorithm and kernels: kernels/deltanet/README.md ("CUDA").
//
// Two layers, as for the Mesa operator (kernels/mesa/cuda/mesa_cuda.h):
//  1. Device-pointer entry points (ForwardDevice / BackwardDevice) for the trainer: bf16 or fp32
//     q, k, v, o, do, dq, dk, dv; fp32 beta, log_gamma, states and their gradients; asynchronous
//     on the given stream; scratch in a caller-owned Workspace. The backward recomputes the
//     forward's chunk quantities (as the public implementation does), so it needs only the inputs.
//  2. A host-memory fp32 seam (Forward / Backward) with the CPU op's structs: DeltaImpl::kCuda of
//     kernels/deltanet/deltanet_op.h (tests, the op-check tool).
// Supported: head dims 16..128 in steps of 16 (D <= 64 runs padded to 64, larger to 128); any T;
// varlen (cu_seqlens is a HOST span); initial/final states and their gradients.
#ifndef MESANET_KERNELS_DELTANET_CUDA_DELTANET_CUDA_H_
#define MESANET_KERNELS_DELTANET_CUDA_DELTANET_CUDA_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <span>

#include "absl/status/status.h"
#include "kernels/common/cuda/kernel_problem.h"
#include "kernels/deltanet/deltanet_types.h"

namespace mesa::kernels::deltanet::cuda {

using ::mesa::kernels::cuda::DType;

struct DeviceInputs {
  DType dtype = DType::kF32;  // of q, k, v (and d_o, o, dq, dk, dv)
  const void* q = nullptr;    // [B,T,H,D]
  const void* k = nullptr;
  const void* v = nullptr;
  const float* beta = nullptr;       // [B,T,H]
  const float* log_gamma = nullptr;  // [B,T,H]; null: DeltaNet
  const float* s0 = nullptr;         // optional [S,H,D,D]
};

struct DeviceForwardOutputs {
  void* o = nullptr;         // required
  float* s_final = nullptr;  // optional [S,H,D,D]
  // Also keep what the backward recomputes (X and the chunk-start states, besides A, P, W, U) in
  // the workspace, for a backward with DeviceBackwardInputs::reuse_forward.
  bool keep_for_backward = false;
};

struct DeviceBackwardInputs {
  const void* d_o = nullptr;        // required, dtype of DeviceInputs
  const float* ds_final = nullptr;  // optional
  // Opt-in: skip the recompute of the forward's chunk quantities when the LAST ForwardDevice call
  // on the same Workspace had keep_for_backward and the same dims, cu_seqlens, dtype and input
  // pointers (else they are recomputed); the caller promises the inputs did not change since.
  bool reuse_forward = false;
};

struct DeviceGradients {
  void* dq = nullptr;  // required, dtype of DeviceInputs
  void* dk = nullptr;
  void* dv = nullptr;
  float* dbeta = nullptr;       // required
  float* dlog_gamma = nullptr;  // required iff log_gamma
  float* ds0 = nullptr;         // optional
};

// Reusable device scratch. Not thread-safe; one per stream. Grows to the largest problem seen.
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

// InvalidArgument unless the CUDA kernels support these dims (head dim 16..128, multiple of 16).
absl::Status CheckDeviceDims(const DeltaDims& dims);

absl::Status ForwardDevice(const DeltaDims& dims, std::span<const int32_t> cu_seqlens,
                           const DeviceInputs& in, const DeviceForwardOutputs& out, Workspace* ws,
                           cudaStream_t stream);
absl::Status BackwardDevice(const DeltaDims& dims, std::span<const int32_t> cu_seqlens,
                            const DeviceInputs& in, const DeviceBackwardInputs& bwd,
                            const DeviceGradients& grads, Workspace* ws, cudaStream_t stream);

// Host-memory seam behind DeltaImpl::kCuda (kernels/deltanet/deltanet_op.h validates the
// arguments first): uploads fp32, runs, downloads. Outputs are poisoned (NaN) on the device first.
absl::Status Forward(const DeltaInputs& in, DeltaForwardOutputs* out);
absl::Status Backward(const DeltaInputs& in, const DeltaBackwardInputs& bwd, DeltaGradients* grads);
absl::Status DeviceAvailable();

// Floating-point work of one call (dense 64 x 64 chunk blocks, MAC x 2), for the benchmark.
double ForwardFlops(const DeltaDims& dims);
double BackwardFlops(const DeltaDims& dims);

}  // namespace mesa::kernels::deltanet::cuda

#endif  // MESANET_KERNELS_DELTANET_CUDA_DELTANET_CUDA_H_
