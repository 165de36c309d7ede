// CUDA implementation of the causal softmax attention operator (global and sliding-window).
// Conventions: kernels/attention/attention_types.h; kernels: kernels/attention/README.md ("CUDA").
//
// Two layers, as for the Mesa and DeltaNet operators:
//  1. Device-pointer entry points for the trainer: bf16 or fp32 q, k, v, o, do, dq, dk, dv (the
//     tensor cores always multiply bf16; fp32 inputs are rounded to bf16 on load), fp32 lse;
//     asynchronous on the given stream; the backward's scratch (fp32 dq accumulator, delta) in a
//     caller-owned Workspace.
//  2. A host-memory fp32 seam (Forward / Backward) with the CPU op's structs: AttnImpl::kCuda of
//     kernels/attention/attention_op.h (tests, the op-check tool).
// Supported: head dims 16..128 in steps of 16; any T; any window. bf16 problems run on cuDNN's
// fused attention where it is present (AttnEngine).
#ifndef MESANET_KERNELS_ATTENTION_CUDA_ATTENTION_CUDA_H_
#define MESANET_KERNELS_ATTENTION_CUDA_ATTENTION_CUDA_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "kernels/attention/attention_types.h"
#include "kernels/common/cuda/kernel_problem.h"

namespace mesa::kernels::attention::cuda {

using ::mesa::kernels::cuda::DType;

// Which kernels run the forward and backward. kAuto: cuDNN's fused attention where it serves the
// problem (bf16 I/O, libcudnn.so.9 loadable, MESA_ATTENTION_CUDNN not 0, an engine for
// the shape), our kernels elsewhere; kOwn and kCudnn force one (kCudnn fails where cuDNN cannot).
// Both compute the same lse (natural log of the scaled scores), so either backward takes either
// forward's o and lse. cudnn_attention.h.
enum class AttnEngine { kAuto, kOwn, kCudnn };

// What every device call shares: dims, window (0: global causal), scale (0 => 1/sqrt(D)) and the
// dtype of q, k, v, o, do, dq, dk, dv.
struct DeviceProblem {
  AttnDims dims;
  int64_t window = 0;
  float scale = 0.f;
  DType dtype = DType::kBF16;
  // Packed documents: AttnInputs::doc_start on the device, [B,T] int32 (null: none).
  const int32_t* doc_start = nullptr;
  AttnEngine engine = AttnEngine::kAuto;
  // The backward's dQ summed over key tiles in a fixed order (bit-identical from run to run;
  // training.deterministic) instead of with float atomics: cuDNN's deterministic engine (it keeps
  // dP in a [B,H,T,T] bf16 workspace) or our ordered sums. kernels/attention/README.md says what
  // it costs.
  bool deterministic = false;
};

struct DeviceInputs {
  const void* q = nullptr;  // [B,T,H,D]
  const void* k = nullptr;
  const void* v = nullptr;
};

// Reusable device scratch of the backward. Not thread-safe; one per stream.
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

// InvalidArgument unless the kernels support these dims (head dim 16..128, multiple of 16) and
// the window is >= 0.
absl::Status CheckDeviceProblem(const DeviceProblem& p);

// o [B,T,H,D] (required), lse [B,T,H] fp32 (optional: null when no backward follows).
absl::Status ForwardDevice(const DeviceProblem& p, const DeviceInputs& in, void* o, float* lse,
                           cudaStream_t stream);
// Needs the forward's o and lse; dq, dk, dv are overwritten.
absl::Status BackwardDevice(const DeviceProblem& p, const DeviceInputs& in, const void* o,
                            const float* lse, const void* d_o, void* dq, void* dk, void* dv,
                            Workspace* ws, cudaStream_t stream);

// Single-query decoding (layouts of AttnDecodeInputs): q [B,H,D], k_cache, v_cache [B,C,H,D],
// lengths int32 [B] on the device (null: all C slots valid), o [B,H,D]; all of dtype. No
// workspace; capturable in a CUDA graph.
struct DeviceDecode {
  int64_t batch = 0, heads = 0, head_dim = 0, capacity = 0;
  float scale = 0.f;
  DType dtype = DType::kBF16;
  const void* q = nullptr;
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  const int32_t* lengths = nullptr;
  void* o = nullptr;
};
absl::Status DecodeDevice(const DeviceDecode& d, cudaStream_t stream);

// Host-memory seam behind AttnImpl::kCuda (kernels/attention/attention_op.h validates the
// arguments first): uploads fp32, runs, downloads. Outputs are poisoned (NaN) on the device first.
absl::Status Forward(const AttnInputs& in, const AttnOptions& options, AttnForwardOutputs* out);
absl::Status Backward(const AttnInputs& in, const AttnBackwardInputs& bwd,
                      const AttnOptions& options, AttnGradients* grads);
absl::Status DeviceAvailable();

}  // namespace mesa::kernels::attention::cuda

#endif  // MESANET_KERNELS_ATTENTION_CUDA_ATTENTION_CUDA_H_
