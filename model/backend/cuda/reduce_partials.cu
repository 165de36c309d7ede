// The deterministic second pass of the column reductions (bias, RMSNorm and conv weight
// gradients): out[i] += sum_k partials[k * n + i], k ascending. No CPU counterpart of its own: the
// CPU backward functions (cpu::BiasBackward, cpu::RmsNormBackward, cpu::CausalConvBackward in
// model/layers/cpu_layers.cc) sum in one pass.
#include <algorithm>
#include <cstdint>

#include "model/backend/cuda/backend_common.cuh"

namespace mesa::model::cuda {
namespace {

// out[i] += sum_k partials[k * n + i], k ascending: the deterministic second pass.
__global__ void ReducePartialsKernel(const float* __restrict__ partials, int64_t num_partials,
                                     int64_t n, float* __restrict__ out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] += OrderedSum(partials + i, num_partials, n, 0.f);
  }
}

}  // namespace

cudaError_t ReducePartials(const float* partials, int64_t num_partials, int64_t n, float* out,
                           cudaStream_t s) {
  // One thread per column, in small blocks: narrow reductions (n = 6, 128) spread over SMs.
  constexpr int kReduceThreads = 64;
  const int blocks =
      static_cast<int>(std::min<int64_t>((n + kReduceThreads - 1) / kReduceThreads, 2112));
  return Run(ReducePartialsKernel, blocks, kReduceThreads, 0, s, partials, num_partials, n, out);
}

}  // namespace mesa::model::cuda
