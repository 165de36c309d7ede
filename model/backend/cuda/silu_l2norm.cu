// SiLU + L2 norm of the CUDA backend over groups of d (one group per token and head):
// y = SiLU(x) / sqrt(|SiLU(x)|^2 + eps) (forward) and d_x += ... (backward). Must match
// cpu::SiluL2NormForward / cpu::SiluL2NormBackward (model/layers/cpu_layers.cc).
#include "model/backend/cuda/backend_kernels.h"

#include <cstdint>

#include "model/backend/cuda/backend_common.cuh"

namespace mesa::model::cuda {
namespace {

constexpr float kL2NormEps = 1e-6f;  // cpu_layers.cc's kL2NormEps

// One warp per group; a lane owns V consecutive elements per step (d % V == 0), columns
// j = (p * 32 + lane) * V for step p. With P > 0 (d <= 32 * V * P) the lane's P packs stay in
// registers between the passes (all loads in flight at once, Sigmoid once per element); P = 0
// reloads them for any d. Same arithmetic either way.
template <typename T, int V, int P>
__global__ void SiluL2NormForwardKernel(const T* __restrict__ x, T* __restrict__ y, int64_t groups,
                                        int64_t d) {
  const int64_t g = blockIdx.x * int64_t{blockDim.x / 32} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (g >= groups) return;
  const T* xg = x + g * d;
  T* yg = y + g * d;
  float ss = 0.f;
  if constexpr (P > 0) {
    float s[P][V];  // x, then silu(x)
#pragma unroll
    for (int p = 0; p < P; ++p) {
      if (const int64_t j = (p * 32 + lane) * int64_t{V}; j < d) Load(xg + j, s[p]);
    }
#pragma unroll
    for (int p = 0; p < P; ++p) {
      if ((p * 32 + lane) * int64_t{V} >= d) break;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        s[p][k] = s[p][k] * Sigmoid(s[p][k]);
        ss += s[p][k] * s[p][k];
      }
    }
    ss = WarpSum(ss);
    const float inv = 1.f / sqrtf(ss + kL2NormEps);
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int64_t j = (p * 32 + lane) * int64_t{V};
      if (j >= d) break;
      float o[V];
#pragma unroll
      for (int k = 0; k < V; ++k) o[k] = s[p][k] * inv;
      Store(yg + j, o);
    }
  } else {
    for (int64_t j = lane * V; j < d; j += 32 * V) {
      float xv[V];
      Load(xg + j, xv);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float s = xv[k] * Sigmoid(xv[k]);
        ss += s * s;
      }
    }
    ss = WarpSum(ss);
    const float inv = 1.f / sqrtf(ss + kL2NormEps);
    for (int64_t j = lane * V; j < d; j += 32 * V) {
      float xv[V], o[V];
      Load(xg + j, xv);
#pragma unroll
      for (int k = 0; k < V; ++k) o[k] = xv[k] * Sigmoid(xv[k]) * inv;
      Store(yg + j, o);
    }
  }
}

template <typename T, int V, int P>
__global__ void SiluL2NormBackwardKernel(const T* __restrict__ x, const T* __restrict__ dy,
                                         T* __restrict__ dx, int64_t groups, int64_t d) {
  const int64_t g = blockIdx.x * int64_t{blockDim.x / 32} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (g >= groups) return;
  const T* xg = x + g * d;
  const T* dg = dy + g * d;
  T* dxg = dx + g * d;
  float ss = 0.f, dot = 0.f;
  if constexpr (P > 0) {
    float xv[P][V], dv[P][V], ov[P][V], sig[P][V];
#pragma unroll
    for (int p = 0; p < P; ++p) {
      if (const int64_t j = (p * 32 + lane) * int64_t{V}; j < d) {
        Load(xg + j, xv[p]);
        Load(dg + j, dv[p]);
        Load(dxg + j, ov[p]);
      }
    }
#pragma unroll
    for (int p = 0; p < P; ++p) {
      if ((p * 32 + lane) * int64_t{V} >= d) break;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        sig[p][k] = Sigmoid(xv[p][k]);
        const float s = xv[p][k] * sig[p][k];
        ss += s * s;
        dot += s * dv[p][k];
      }
    }
    ss = WarpSum(ss);
    dot = WarpSum(dot);
    const float inv = 1.f / sqrtf(ss + kL2NormEps);
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int64_t j = (p * 32 + lane) * int64_t{V};
      if (j >= d) break;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float s = xv[p][k] * sig[p][k];
        const float ds = inv * (dv[p][k] - s * inv * inv * dot);
        ov[p][k] += ds * sig[p][k] * (1.f + xv[p][k] * (1.f - sig[p][k]));
      }
      Store(dxg + j, ov[p]);
    }
  } else {
    for (int64_t j = lane * V; j < d; j += 32 * V) {
      float xv[V], dv[V];
      Load(xg + j, xv);
      Load(dg + j, dv);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float s = xv[k] * Sigmoid(xv[k]);
        ss += s * s;
        dot += s * dv[k];
      }
    }
    ss = WarpSum(ss);
    dot = WarpSum(dot);
    const float inv = 1.f / sqrtf(ss + kL2NormEps);
    for (int64_t j = lane * V; j < d; j += 32 * V) {
      float xv[V], dv[V], o[V];
      Load(xg + j, xv);
      Load(dg + j, dv);
      Load(dxg + j, o);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float sig = Sigmoid(xv[k]);
        const float s = xv[k] * sig;
        const float ds = inv * (dv[k] - s * inv * inv * dot);
        o[k] += ds * sig * (1.f + xv[k] * (1.f - sig));
      }
      Store(dxg + j, o);
    }
  }
}

}  // namespace

template <typename T>
cudaError_t LaunchSiluL2NormForward(const T* x, T* y, int64_t groups, int64_t d, cudaStream_t s) {
  if (groups == 0) return cudaSuccess;
  const bool vec = d % kVecRow == 0 && Aligned<kVecRow>(x, y);
  return Dispatch<T, kVecRow>(vec, [&]<int V>() {
    return DispatchPacks<V>(d, [&]<int P>() {
      return Run(SiluL2NormForwardKernel<T, V, P>, RowBlocks(groups), kThreads, 0, s, x, y, groups,
                 d);
    });
  });
}

template <typename T>
cudaError_t LaunchSiluL2NormBackward(const T* x, const T* d_y, T* d_x, int64_t groups, int64_t d,
                                     cudaStream_t s) {
  if (groups == 0) return cudaSuccess;
  const bool vec = d % kVecRow == 0 && Aligned<kVecRow>(x, d_y, d_x);
  return Dispatch<T, kVecRow>(vec, [&]<int V>() {
    return DispatchPacks<V>(d, [&]<int P>() {
      return Run(SiluL2NormBackwardKernel<T, V, P>, RowBlocks(groups), kThreads, 0, s, x, d_y, d_x,
                 groups, d);
    });
  });
}

// Both activation types (backend_kernels.h).
#define MESA_INSTANTIATE(T)                                                                      \
  template cudaError_t LaunchSiluL2NormForward<T>(const T*, T*, int64_t, int64_t, cudaStream_t); \
  template cudaError_t LaunchSiluL2NormBackward<T>(const T*, const T*, T*, int64_t, int64_t,     \
                                                   cudaStream_t);

MESA_INSTANTIATE(float)
MESA_INSTANTIATE(Bf16)

#undef MESA_INSTANTIATE

}  // namespace mesa::model::cuda
