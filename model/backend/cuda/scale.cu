// In-place scaling of fp32 buffers (gradient clipping): x *= factor. Must match CpuBackend::Scale
// (model/backend/cpu_backend.cc).
#include "model/backend/cuda/backend_kernels.h"

#include <cstdint>

#include "model/backend/cuda/backend_common.cuh"

namespace mesa::model::cuda {
namespace {

__global__ void ScaleKernel(float* x, int64_t n, float factor) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    x[i] *= factor;
  }
}

}  // namespace

cudaError_t LaunchScale(float* x, int64_t n, float factor, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  return Run(ScaleKernel, ElementwiseBlocks(n), kThreads, 0, s, x, n, factor);
}

}  // namespace mesa::model::cuda
