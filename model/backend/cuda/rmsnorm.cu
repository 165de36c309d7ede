// RMSNorm of the CUDA backend over rows of width c: out = x * rstd * weight with
// rstd = 1 / sqrt(mean(x^2) + eps) saved per row (forward), and d_x += ..., d_weight += ... through
// per-block partials and ReducePartials (backward). Must match cpu::RmsNormForward /
// cpu::RmsNormBackward (model/layers/cpu_layers.cc).
#include "model/backend/cuda/backend_kernels.h"

#include <cstddef>
#include <cstdint>

#include "model/backend/cuda/backend_common.cuh"

namespace mesa::model::cuda {
namespace {

// One warp per row; a lane owns V consecutive columns per step (c % V == 0).
template <typename T, int V>
__global__ void RmsNormForwardKernel(const T* __restrict__ x, const float* __restrict__ w,
                                     T* __restrict__ out, float* __restrict__ rstd, int64_t rows,
                                     int64_t c, float eps) {
  const int64_t row = blockIdx.x * int64_t{blockDim.x / 32} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const T* xr = x + row * c;
  float ss = 0.f;
  for (int64_t j = lane * V; j < c; j += 32 * V) {
    float xv[V];
    Load(xr + j, xv);
#pragma unroll
    for (int k = 0; k < V; ++k) ss += xv[k] * xv[k];
  }
  ss = WarpSum(ss);
  const float s = 1.f / sqrtf(ss / static_cast<float>(c) + eps);
  if (lane == 0) rstd[row] = s;
  for (int64_t j = lane * V; j < c; j += 32 * V) {
    float xv[V], o[V];
    Load(xr + j, xv);
#pragma unroll
    for (int k = 0; k < V; ++k) o[k] = xv[k] * s * w[j + k];
    Store(out + row * c + j, o);
  }
}

// Block = 8 warps over kRowsPerPartial rows; per-warp column accumulators in shared memory, summed
// in warp order into the block's partial row. A lane owns V consecutive columns per step
// (c % V == 0), j = (p * 32 + lane) * V for step p. With P > 0 (c <= 32 * V * P) a row's x, d_out
// and d_x sit in registers and the warp's next row is loaded while this one is computed (narrow
// rows are latency-bound otherwise); P = 0 loops over any width. Same arithmetic either way.
template <typename T, int V, int P>
__global__ void RmsNormBackwardKernel(const T* __restrict__ x, const float* __restrict__ w,
                                      const float* __restrict__ rstd, const T* __restrict__ d_out,
                                      T* __restrict__ d_x, float* __restrict__ partials,
                                      int64_t rows, int64_t c) {
  extern __shared__ __align__(16) float acc[];  // [warps][c]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  float* my = acc + warp * c;
  for (int64_t j = lane * V; j < c; j += 32 * V) {
    const float zero[V] = {};
    Store(my + j, zero);  // the lane that accumulates these columns (no __syncwarp needed)
  }
  const int64_t r0 = blockIdx.x * kRowsPerPartial;
  const int64_t r1 = min(rows, r0 + kRowsPerPartial);
  const float inv_c = 1.f / static_cast<float>(c);
  if constexpr (P > 0) {
    float xv[P][V], dv[P][V], ov[P][V], nx[P][V], nd[P][V], no[P][V], ns = 0.f;
    const auto load_row = [&](int64_t r) {
      ns = rstd[r];
#pragma unroll
      for (int p = 0; p < P; ++p) {
        if (const int64_t j = (p * 32 + lane) * int64_t{V}; j < c) {
          Load(x + r * c + j, nx[p]);
          Load(d_out + r * c + j, nd[p]);
          Load(d_x + r * c + j, no[p]);
        }
      }
    };
    if (r0 + warp < r1) load_row(r0 + warp);
    for (int64_t r = r0 + warp; r < r1; r += warps) {
      const float s = ns;
#pragma unroll
      for (int p = 0; p < P; ++p) {
#pragma unroll
        for (int k = 0; k < V; ++k) {
          xv[p][k] = nx[p][k];
          dv[p][k] = nd[p][k];
          ov[p][k] = no[p][k];
        }
      }
      if (r + warps < r1) load_row(r + warps);
      float dot = 0.f;
#pragma unroll
      for (int p = 0; p < P; ++p) {
        const int64_t j = (p * 32 + lane) * int64_t{V};
        if (j >= c) break;
        float mv[V];
        Load(my + j, mv);
#pragma unroll
        for (int k = 0; k < V; ++k) {
          dot += dv[p][k] * w[j + k] * xv[p][k];
          mv[k] += dv[p][k] * xv[p][k] * s;
        }
        Store(my + j, mv);
      }
      dot = WarpSum(dot);
      const float coef = dot * s * s * s * inv_c;
#pragma unroll
      for (int p = 0; p < P; ++p) {
        const int64_t j = (p * 32 + lane) * int64_t{V};
        if (j >= c) break;
#pragma unroll
        for (int k = 0; k < V; ++k) ov[p][k] += dv[p][k] * w[j + k] * s - xv[p][k] * coef;
        Store(d_x + r * c + j, ov[p]);
      }
    }
  } else {
    for (int64_t r = r0 + warp; r < r1; r += warps) {
      const T* xr = x + r * c;
      const T* dr = d_out + r * c;
      const float s = rstd[r];
      float dot = 0.f;
      for (int64_t j = lane * V; j < c; j += 32 * V) {
        float xv[V], dv[V], mv[V];
        Load(xr + j, xv);
        Load(dr + j, dv);
        Load(my + j, mv);
#pragma unroll
        for (int k = 0; k < V; ++k) {
          dot += dv[k] * w[j + k] * xv[k];
          mv[k] += dv[k] * xv[k] * s;
        }
        Store(my + j, mv);
      }
      dot = WarpSum(dot);
      const float coef = dot * s * s * s * inv_c;
      for (int64_t j = lane * V; j < c; j += 32 * V) {
        float xv[V], dv[V], o[V];
        Load(xr + j, xv);
        Load(dr + j, dv);
        Load(d_x + r * c + j, o);
#pragma unroll
        for (int k = 0; k < V; ++k) o[k] += dv[k] * w[j + k] * s - xv[k] * coef;
        Store(d_x + r * c + j, o);
      }
    }
  }
  __syncthreads();
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
    float sum = 0.f;
    for (int k = 0; k < warps; ++k) sum += acc[k * c + j];
    partials[blockIdx.x * c + j] = sum;
  }
}

}  // namespace

int64_t MaxRmsNormWidth() { return 6144; }  // 8 warps x 6144 floats = 192 KiB of shared memory

template <typename T>
cudaError_t LaunchRmsNormForward(const T* x, const float* weight, T* out, float* rstd, int64_t rows,
                                 int64_t c, float eps, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  const bool vec = c % kVecRow == 0 && Aligned<kVecRow>(x, out);
  return Dispatch<T, kVecRow>(vec, [&]<int V>() {
    return Run(RmsNormForwardKernel<T, V>, RowBlocks(rows), kThreads, 0, s, x, weight, out, rstd,
               rows, c, eps);
  });
}

template <typename T>
cudaError_t LaunchRmsNormBackward(const T* x, const float* weight, const float* rstd,
                                  const T* d_out, T* d_x, float* d_weight, float* partials,
                                  int64_t rows, int64_t c, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if (c > MaxRmsNormWidth()) return cudaErrorInvalidValue;
  const size_t smem = sizeof(float) * (kThreads / 32) * c;
  const int64_t blocks = PartialRows(rows);
  const bool vec = c % kVecRow == 0 && Aligned<kVecRow>(x, d_out, d_x);
  const cudaError_t e = Dispatch<T, kVecRow>(vec, [&]<int V>() {
    return DispatchPacks<V>(c, [&]<int P>() {
      if (smem > 48 * 1024) {
        if (cudaError_t err = cudaFuncSetAttribute(RmsNormBackwardKernel<T, V, P>,
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   static_cast<int>(smem));
            err != cudaSuccess) {
          return err;
        }
      }
      return Run(RmsNormBackwardKernel<T, V, P>, static_cast<unsigned>(blocks), kThreads, smem, s,
                 x, weight, rstd, d_out, d_x, partials, rows, c);
    });
  });
  if (e != cudaSuccess) return e;
  return ReducePartials(partials, blocks, c, d_weight, s);
}

// Both activation types (backend_kernels.h).
#define MESA_INSTANTIATE(T)                                                                     \
  template cudaError_t LaunchRmsNormForward<T>(const T*, const float*, T*, float*, int64_t,     \
                                               int64_t, float, cudaStream_t);                   \
  template cudaError_t LaunchRmsNormBackward<T>(const T*, const float*, const float*, const T*, \
                                                T*, float*, float*, int64_t, int64_t,           \
                                                cudaStream_t);

MESA_INSTANTIATE(float)
MESA_INSTANTIATE(Bf16)

#undef MESA_INSTANTIATE

}  // namespace mesa::model::cuda
