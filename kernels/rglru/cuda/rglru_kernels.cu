// The RG-LRU's CUDA kernels (rglru_kernels.h): which scan runs a problem, and the public API.
//
// The streaming scan reads every input once when the rows alone fill the GPU (the training shape,
// B8 T2048 D960: 480 blocks) and is the faster there; with fewer rows it cuts them into segments
// and reads the inputs twice, where the chained scan, one block per 64 tokens of a row, keeps
// every SM busy in a single pass (B1 T32768: 1.75× faster). kernels/rglru/README.md, "CUDA".
#include "kernels/rglru/cuda/rglru_kernels.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/rglru/cuda/rglru_scans.h"

namespace mesa::kernels::rglru::cuda {
namespace {

constexpr int kMarkThreads = 128;

// After the forward (which still reads the flags when started_out aliases them).
__global__ void MarkStartedKernel(int64_t rows, float* started_out) {
  const int64_t b = blockIdx.x * int64_t{kMarkThreads} + threadIdx.x;
  if (b < rows) started_out[b] = 1.f;
}

template <typename T>
cudaError_t Forward(const DeviceProblem& p, T* h, float* h_final, void* workspace, cudaStream_t s) {
  return ScanFor(p) == RgLruScan::kStreaming ? streaming::Forward(p, h, h_final, workspace, s)
                                             : chained::Forward(p, h, h_final, workspace, s);
}

template <typename T>
cudaError_t Backward(const DeviceProblem& p, const T* dh, const float* dh_final, T* du, T* drho,
                     T* diota, float* dp, float* dh0, void* workspace, bool carried_valid,
                     float* dp_partials, cudaStream_t s) {
  return ScanFor(p) == RgLruScan::kStreaming
             ? streaming::Backward(p, dh, dh_final, du, drho, diota, dp, dh0, workspace,
                                   carried_valid, dp_partials, s)
             : chained::Backward(p, dh, dh_final, du, drho, diota, dp, dh0, workspace,
                                 carried_valid, dp_partials, s);
}

}  // namespace

RgLruScan ScanFor(const DeviceProblem& p) {
  if (p.scan != RgLruScan::kAuto) return p.scan;
  return streaming::RowsFillTheGpu(p) ? RgLruScan::kStreaming : RgLruScan::kChained;
}

size_t WorkspaceBytes(const DeviceProblem& p) {
  return ScanFor(p) == RgLruScan::kStreaming ? streaming::WorkspaceBytes(p)
                                             : chained::WorkspaceBytes(p);
}

size_t DpPartialBytes(const DeviceProblem& p) {
  return ScanFor(p) == RgLruScan::kStreaming ? streaming::DpPartialBytes(p)
                                             : chained::DpPartialBytes(p);
}

int RgLruForwardDevice(const DeviceProblem& p, void* h, float* h_final, float* started_out,
                       void* workspace, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  const cudaError_t e = p.bf16 ? Forward(p, static_cast<__nv_bfloat16*>(h), h_final, workspace, s)
                               : Forward(p, static_cast<float*>(h), h_final, workspace, s);
  if (e != cudaSuccess) return e;
  if (started_out != nullptr) {
    MarkStartedKernel<<<(p.batch + kMarkThreads - 1) / kMarkThreads, kMarkThreads, 0, s>>>(
        p.batch, started_out);
  }
  return cudaGetLastError();
}

int RgLruBackwardDevice(const DeviceProblem& p, const void* dh, const float* dh_final, void* du,
                        void* drho, void* diota, float* dp, float* dh0, void* workspace,
                        bool carried_valid, float* dp_partials, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  using B16 = __nv_bfloat16;
  return p.bf16 ? Backward(p, static_cast<const B16*>(dh), dh_final, static_cast<B16*>(du),
                           static_cast<B16*>(drho), static_cast<B16*>(diota), dp, dh0, workspace,
                           carried_valid, dp_partials, s)
                : Backward(p, static_cast<const float*>(dh), dh_final, static_cast<float*>(du),
                           static_cast<float*>(drho), static_cast<float*>(diota), dp, dh0,
                           workspace, carried_valid, dp_partials, s);
}

}  // namespace mesa::kernels::rglru::cuda
