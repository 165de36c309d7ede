// SwiGLU of the CUDA backend: h = SiLU(gate) * up (forward), d_gate and d_up overwritten
// (backward). Must match cpu::SwiGluForward / cpu::SwiGluBackward (model/layers/cpu_layers.cc).
#include "model/backend/cuda/backend_kernels.h"

#include <cstdint>

#include "model/backend/cuda/backend_common.cuh"

namespace mesa::model::cuda {
namespace {

template <typename T, int V>
__global__ void SwiGluForwardKernel(const T* __restrict__ gate, const T* __restrict__ up,
                                    T* __restrict__ h, int64_t n) {
  GridStride<V>(n, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    float g[W], u[W], o[W];
    Load(gate + i, g);
    Load(up + i, u);
#pragma unroll
    for (int k = 0; k < W; ++k) o[k] = g[k] * Sigmoid(g[k]) * u[k];
    Store(h + i, o);
  });
}

// The same with each row's gate and up side by side: gate_up [rows, 2n], h [rows, n].
template <typename T>
__global__ void SwiGluRowsForwardKernel(const T* __restrict__ gate_up, T* __restrict__ h,
                                        int64_t rows, int64_t n) {
  GridStride<1>(rows * n, [&](int64_t i, auto) {
    const T* row = gate_up + (i / n) * 2 * n + i % n;
    const float g = ToFloat(row[0]), u = ToFloat(row[n]);
    h[i] = FromFloat<T>(g * Sigmoid(g) * u);
  });
}

template <typename T, int V>
__global__ void SwiGluBackwardKernel(const T* __restrict__ gate, const T* __restrict__ up,
                                     const T* __restrict__ d_h, T* __restrict__ d_gate,
                                     T* __restrict__ d_up, int64_t n) {
  GridStride<V>(n, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    float g[W], u[W], dh[W], dg[W], du[W];
    Load(gate + i, g);
    Load(up + i, u);
    Load(d_h + i, dh);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const float sig = Sigmoid(g[k]);
      du[k] = dh[k] * g[k] * sig;
      dg[k] = dh[k] * u[k] * sig * (1.f + g[k] * (1.f - sig));
    }
    Store(d_up + i, du);
    Store(d_gate + i, dg);
  });
}

}  // namespace

template <typename T>
cudaError_t LaunchSwiGluForward(const T* gate, const T* up, T* h, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  return Dispatch<T, kVecElementwise>(Aligned<kVecElementwise>(gate, up, h), [&]<int V>() {
    return Run(SwiGluForwardKernel<T, V>, VecBlocks(n, V), kThreads, 0, s, gate, up, h, n);
  });
}

template <typename T>
cudaError_t LaunchSwiGluRowsForward(const T* gate_up, T* h, int64_t rows, int64_t n,
                                    cudaStream_t s) {
  if (rows * n == 0) return cudaSuccess;
  return Run(SwiGluRowsForwardKernel<T>, VecBlocks(rows * n, 1), kThreads, 0, s, gate_up, h, rows,
             n);
}

template <typename T>
cudaError_t LaunchSwiGluBackward(const T* gate, const T* up, const T* d_h, T* d_gate, T* d_up,
                                 int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  const bool vec = Aligned<kVecElementwise>(gate, up, d_h, d_gate, d_up);
  return Dispatch<T, kVecElementwise>(vec, [&]<int V>() {
    return Run(SwiGluBackwardKernel<T, V>, VecBlocks(n, V), kThreads, 0, s, gate, up, d_h, d_gate,
               d_up, n);
  });
}

// Both activation types (backend_kernels.h).
#define MESA_INSTANTIATE(T)                                                                      \
  template cudaError_t LaunchSwiGluForward<T>(const T*, const T*, T*, int64_t, cudaStream_t);    \
  template cudaError_t LaunchSwiGluRowsForward<T>(const T*, T*, int64_t, int64_t, cudaStream_t); \
  template cudaError_t LaunchSwiGluBackward<T>(const T*, const T*, const T*, T*, T*, int64_t,    \
                                               cudaStream_t);

MESA_INSTANTIATE(float)
MESA_INSTANTIATE(Bf16)

#undef MESA_INSTANTIATE

}  // namespace mesa::model::cuda
