// The two scans behind rglru_kernels.h (kernels/rglru/README.md, "CUDA"), each with its own
// workspace layout; rglru_kernels.cu picks one per problem (the same for a forward and the
// backward that reuses its workspace). Internal to this package.
#ifndef MESANET_KERNELS_RGLRU_CUDA_RGLRU_SCANS_H_
#define MESANET_KERNELS_RGLRU_CUDA_RGLRU_SCANS_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/rglru/cuda/rglru_kernels.h"

namespace mesa::kernels::rglru::cuda {

// The streaming scan (rglru_streaming_scan.cu): a block walks a row's steps in order; rows are cut
// into segments, summarised first, when they cannot fill the GPU.
namespace streaming {
size_t WorkspaceBytes(const DeviceProblem& p);
size_t DpPartialBytes(const DeviceProblem& p);
// T: float or __nv_bfloat16 (the activation type); h null: only the step states.
template <typename T>
cudaError_t Forward(const DeviceProblem& p, T* h, float* h_final, void* workspace, cudaStream_t s);
template <typename T>
cudaError_t Backward(const DeviceProblem& p, const T* dh, const float* dh_final, T* du, T* drho,
                     T* diota, float* dp, float* dh0, void* workspace, bool carried_valid,
                     float* dp_partials, cudaStream_t s);
// Whether the rows alone, one block per (row, tile of channels), give the GPU enough blocks.
bool RowsFillTheGpu(const DeviceProblem& p);
}  // namespace streaming

// The chained scan (rglru_chained_scan.cu): one block per (row, 64 tokens, 32-64 channels), every
// tile composing the published maps of the tiles before it.
namespace chained {
size_t WorkspaceBytes(const DeviceProblem& p);
size_t DpPartialBytes(const DeviceProblem& p);
// T: float or __nv_bfloat16 (the activation type); h null: only the step states.
template <typename T>
cudaError_t Forward(const DeviceProblem& p, T* h, float* h_final, void* workspace, cudaStream_t s);
template <typename T>
cudaError_t Backward(const DeviceProblem& p, const T* dh, const float* dh_final, T* du, T* drho,
                     T* diota, float* dp, float* dh0, void* workspace, bool carried_valid,
                     float* dp_partials, cudaStream_t s);
}  // namespace chained

// Instantiates a scan's Forward and Backward for activation type T (in the scan's namespace).
#define MESA_RGLRU_INSTANTIATE_SCAN(T)                                                       \
  template cudaError_t Forward<T>(const DeviceProblem&, T*, float*, void*, cudaStream_t);    \
  template cudaError_t Backward<T>(const DeviceProblem&, const T*, const float*, T*, T*, T*, \
                                   float*, float*, void*, bool, float*, cudaStream_t);

}  // namespace mesa::kernels::rglru::cuda

#endif  // MESANET_KERNELS_RGLRU_CUDA_RGLRU_SCANS_H_
