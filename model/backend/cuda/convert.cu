// Activation conversions of the CUDA backend: fp32 <-> T, rounding to nearest even once when T is
// bf16 (activation uploads and read-backs, and the bf16 weight copy of CacheWeights). Must match
// CpuBackend::ActivationsFromHost / ActivationsToHost (model/backend/cpu_backend.cc), which are
// plain copies: T = float is exact.
#include "model/backend/cuda/backend_kernels.h"

#include <cstdint>
#include <type_traits>

#include "model/backend/cuda/backend_common.cuh"

namespace mesa::model::cuda {
namespace {

// dst = src, through float (rounding once when D is bf16).
template <typename S, typename D, int V>
__global__ void ConvertKernel(const S* __restrict__ src, D* __restrict__ dst, int64_t n) {
  GridStride<V>(n, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    float f[W];
    Load(src + i, f);
    Store(dst + i, f);
  });
}

// float <-> T; vectorised as T (the activation type: bf16 unless both sides are float).
template <typename From, typename To>
cudaError_t LaunchConvert(const From* src, To* dst, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  using T = std::conditional_t<kIsBf16<From>, From, To>;
  return Dispatch<T, kVecElementwise>(Aligned<kVecElementwise>(src, dst), [&]<int V>() {
    return Run(ConvertKernel<From, To, V>, VecBlocks(n, V), kThreads, 0, s, src, dst, n);
  });
}

}  // namespace

template <typename T>
cudaError_t LaunchFromFloat(const float* src, T* dst, int64_t n, cudaStream_t s) {
  return LaunchConvert<float, T>(src, dst, n, s);
}

template <typename T>
cudaError_t LaunchToFloat(const T* src, float* dst, int64_t n, cudaStream_t s) {
  return LaunchConvert<T, float>(src, dst, n, s);
}

// Both activation types (backend_kernels.h).
#define MESA_INSTANTIATE(T)                                                         \
  template cudaError_t LaunchFromFloat<T>(const float*, T*, int64_t, cudaStream_t); \
  template cudaError_t LaunchToFloat<T>(const T*, float*, int64_t, cudaStream_t);

MESA_INSTANTIATE(float)
MESA_INSTANTIATE(Bf16)

#undef MESA_INSTANTIATE

}  // namespace mesa::model::cuda
