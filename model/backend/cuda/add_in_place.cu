// Residual add of the CUDA backend: out += in. Must match cpu::AddInPlace
// (model/layers/cpu_layers.cc).
#include "model/backend/cuda/backend_kernels.h"

#include <cstdint>

#include "model/backend/cuda/backend_common.cuh"

namespace mesa::model::cuda {
namespace {

template <typename T, int V>
__global__ void AddInPlaceKernel(T* out, const T* in, int64_t n) {
  GridStride<V>(n, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    float o[W], a[W];
    Load(out + i, o);
    Load(in + i, a);
#pragma unroll
    for (int k = 0; k < W; ++k) o[k] += a[k];
    Store(out + i, o);
  });
}

}  // namespace

template <typename T>
cudaError_t LaunchAddInPlace(T* out, const T* in, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  return Dispatch<T, kVecElementwise>(Aligned<kVecElementwise>(out, in), [&]<int V>() {
    return Run(AddInPlaceKernel<T, V>, VecBlocks(n, V), kThreads, 0, s, out, in, n);
  });
}

// Both activation types (backend_kernels.h).
#define MESA_INSTANTIATE(T) \
  template cudaError_t LaunchAddInPlace<T>(T*, const T*, int64_t, cudaStream_t);

MESA_INSTANTIATE(float)
MESA_INSTANTIATE(Bf16)

#undef MESA_INSTANTIATE

}  // namespace mesa::model::cuda
