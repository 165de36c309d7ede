// Mesa regulariser of the CUDA backend (fp32 only): lambda = floor + softplus(p) (forward) and
// d_p += d_lambda * sigmoid(p) (backward). Must match cpu::LambdaForward / cpu::LambdaBackward
// (model/layers/cpu_layers.cc).
#include "model/backend/cuda/backend_kernels.h"

#include <cstdint>

#include "model/backend/cuda/backend_common.cuh"

namespace mesa::model::cuda {
namespace {

__global__ void LambdaForwardKernel(const float* p, float* lambda, int64_t n, float floor) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    lambda[i] = floor + Softplus(p[i]);
  }
}

__global__ void LambdaBackwardKernel(const float* p, const float* d_lambda, float* d_p, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    d_p[i] += d_lambda[i] * Sigmoid(p[i]);
  }
}

}  // namespace

cudaError_t LaunchLambdaForward(const float* p, float* lambda, int64_t n, float floor,
                                cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  return Run(LambdaForwardKernel, ElementwiseBlocks(n), kThreads, 0, s, p, lambda, n, floor);
}

cudaError_t LaunchLambdaBackward(const float* p, const float* d_lambda, float* d_p, int64_t n,
                                 cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  return Run(LambdaBackwardKernel, ElementwiseBlocks(n), kThreads, 0, s, p, d_lambda, d_p, n);
}

}  // namespace mesa::model::cuda
