// Hawk's GeLU gate of the CUDA backend: out = gelu_tanh(y_pre) * x (forward), d_y_pre and d_x
// overwritten (backward); and the plain SiLU of Mamba-2's convolution output. Must match
// cpu::GeluGateForward / GeluGateBackward / SiluForward / SiluBackward
// (model/layers/cpu_layers.cc).
#include "model/backend/cuda/backend_kernels.h"

#include <cstdint>

#include "model/backend/cuda/backend_common.cuh"

namespace mesa::model::cuda {
namespace {

constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluC = 0.044715f;

template <typename T, int V>
__global__ void GeluGateForwardKernel(const T* __restrict__ y_pre, const T* __restrict__ x,
                                      T* __restrict__ out, int64_t n) {
  GridStride<V>(n, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    float y[W], v[W], o[W];
    Load(y_pre + i, y);
    Load(x + i, v);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const float z = y[k];
      o[k] = 0.5f * z * (1.f + tanhf(kGeluK * (z + kGeluC * z * z * z))) * v[k];
    }
    Store(out + i, o);
  });
}

template <typename T, int V>
__global__ void GeluGateBackwardKernel(const T* __restrict__ y_pre, const T* __restrict__ x,
                                       const T* __restrict__ d_out, T* __restrict__ d_y_pre,
                                       T* __restrict__ d_x, int64_t n) {
  GridStride<V>(n, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    float y[W], v[W], d[W], dy[W], dx[W];
    Load(y_pre + i, y);
    Load(x + i, v);
    Load(d_out + i, d);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const float z = y[k];
      const float th = tanhf(kGeluK * (z + kGeluC * z * z * z));
      const float gelu = 0.5f * z * (1.f + th);
      const float d_gelu =
          0.5f * (1.f + th) + 0.5f * z * (1.f - th * th) * kGeluK * (1.f + 3.f * kGeluC * z * z);
      dx[k] = d[k] * gelu;
      dy[k] = d[k] * v[k] * d_gelu;
    }
    Store(d_x + i, dx);
    Store(d_y_pre + i, dy);
  });
}

}  // namespace

template <typename T, int V>
__global__ void SiluForwardKernel(const T* __restrict__ x, T* __restrict__ y, int64_t n) {
  GridStride<V>(n, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    float v[W], o[W];
    Load(x + i, v);
#pragma unroll
    for (int k = 0; k < W; ++k) o[k] = v[k] / (1.f + __expf(-v[k]));
    Store(y + i, o);
  });
}

template <typename T, int V>
__global__ void SiluBackwardKernel(const T* __restrict__ x, const T* __restrict__ d_y,
                                   T* __restrict__ d_x, int64_t n) {
  GridStride<V>(n, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    float v[W], d[W], o[W];
    Load(x + i, v);
    Load(d_y + i, d);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const float sig = 1.f / (1.f + __expf(-v[k]));
      o[k] = d[k] * sig * (1.f + v[k] * (1.f - sig));
    }
    Store(d_x + i, o);
  });
}

template <typename T>
cudaError_t LaunchSiluForward(const T* x, T* y, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  return Dispatch<T, kVecElementwise>(Aligned<kVecElementwise>(x, y), [&]<int V>() {
    return Run(SiluForwardKernel<T, V>, VecBlocks(n, V), kThreads, 0, s, x, y, n);
  });
}

template <typename T>
cudaError_t LaunchSiluBackward(const T* x, const T* d_y, T* d_x, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  return Dispatch<T, kVecElementwise>(Aligned<kVecElementwise>(x, d_y, d_x), [&]<int V>() {
    return Run(SiluBackwardKernel<T, V>, VecBlocks(n, V), kThreads, 0, s, x, d_y, d_x, n);
  });
}

template <typename T>
cudaError_t LaunchGeluGateForward(const T* y_pre, const T* x, T* out, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  return Dispatch<T, kVecElementwise>(Aligned<kVecElementwise>(y_pre, x, out), [&]<int V>() {
    return Run(GeluGateForwardKernel<T, V>, VecBlocks(n, V), kThreads, 0, s, y_pre, x, out, n);
  });
}

template <typename T>
cudaError_t LaunchGeluGateBackward(const T* y_pre, const T* x, const T* d_out, T* d_y_pre, T* d_x,
                                   int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  const bool vec = Aligned<kVecElementwise>(y_pre, x, d_out, d_y_pre, d_x);
  return Dispatch<T, kVecElementwise>(vec, [&]<int V>() {
    return Run(GeluGateBackwardKernel<T, V>, VecBlocks(n, V), kThreads, 0, s, y_pre, x, d_out,
               d_y_pre, d_x, n);
  });
}

// Both activation types (backend_kernels.h).
#define MESA_INSTANTIATE(T)                                                                     \
  template cudaError_t LaunchSiluForward<T>(const T*, T*, int64_t, cudaStream_t);               \
  template cudaError_t LaunchSiluBackward<T>(const T*, const T*, T*, int64_t, cudaStream_t);    \
  template cudaError_t LaunchGeluGateForward<T>(const T*, const T*, T*, int64_t, cudaStream_t); \
  template cudaError_t LaunchGeluGateBackward<T>(const T*, const T*, const T*, T*, T*, int64_t, \
                                                 cudaStream_t);

MESA_INSTANTIATE(float)
MESA_INSTANTIATE(Bf16)

#undef MESA_INSTANTIATE

}  // namespace mesa::model::cuda
