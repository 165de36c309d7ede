// cuDNN's fused flash attention behind the attention device entry points (attention_cuda.h), for
// the problems it serves: bf16 q, k, v (packed documents too). The graph (the same one
// cudnn-frontend builds for SDPA: two matmuls, scale, causal and window masks, softmax with stats,
// plus a per-query document-start bound) is written with
// cuDNN's backend descriptors; libcudnn.so.9 is loaded at run time (dlopen), so nothing links
// against it and a machine without it runs our own kernels. kernels/attention/README.md ("cuDNN")
// says why and what was measured.
#ifndef MESANET_KERNELS_ATTENTION_CUDA_CUDNN_ATTENTION_H_
#define MESANET_KERNELS_ATTENTION_CUDA_CUDNN_ATTENTION_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/attention/cuda/attention_cuda.h"
#include "kernels/common/cuda/device_scratch.h"

namespace mesa::kernels::attention::cuda {

// OK when libcudnn.so.9 (or $MESA_CUDNN_LIBRARY) loads and has the backend API; else Unavailable
// saying why. Loaded once per process.
absl::Status CudnnAvailable();

// Whether cuDNN's graph can express p at all (bf16 I/O). Says nothing about the library.
bool CudnnExpresses(const DeviceProblem& p);

// The most workspace cuDNN's deterministic backward may take (it keeps dS as [B,H,T,T] bf16:
// 0.4 GiB at B8 H6 T2048, 12 GiB at B1 H6 T32768); past it CudnnBackward answers Unimplemented and
// kAuto runs our ordered kernels. A fixed limit, so that the engine chosen does not depend on the
// memory free at the time (run-to-run determinism is the point of the switch).
inline constexpr int64_t kMaxDeterministicWorkspaceBytes = int64_t{8} << 30;

// The forward (lse optional) and backward through cuDNN's fused kernels, asynchronous on `stream`.
// Plans are built once per (device, shape, window, direction) and cached; a shape cuDNN does not
// support answers Unimplemented (the caller falls back to our kernels). The backward's scratch
// (cuDNN's workspace, fp32 dQ accumulator, row sums) lives in `scratch`.
absl::Status CudnnForward(const DeviceProblem& p, const DeviceInputs& in, void* o, float* lse,
                          cudaStream_t stream);
absl::Status CudnnBackward(const DeviceProblem& p, const DeviceInputs& in, const void* o,
                           const float* lse, const void* d_o, void* dq, void* dk, void* dv,
                           ::mesa::kernels::cuda::DeviceBuffer* scratch, cudaStream_t stream);

}  // namespace mesa::kernels::attention::cuda

#endif  // MESANET_KERNELS_ATTENTION_CUDA_CUDNN_ATTENTION_H_
