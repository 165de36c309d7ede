// Mesa gates of the CUDA backend from their pre-activations: beta = sigmoid(b_pre) and
// log_gamma = logsigmoid(a_pre) + log1p(-cap * beta^2) (forward), d_a_pre and d_b_pre overwritten
// (backward). Must match cpu::GatesForward / cpu::GatesBackward (model/layers/cpu_layers.cc).
#include "model/backend/cuda/backend_kernels.h"

#include <cstdint>

#include "model/backend/cuda/backend_common.cuh"

namespace mesa::model::cuda {
namespace {

template <typename T, int V>
__global__ void GatesForwardKernel(const T* a_pre, const T* b_pre, float* beta, float* log_gamma,
                                   int64_t n, float cap) {
  GridStride<V>(n, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    float a[W], bp[W], be[W], lg[W];
    Load(a_pre + i, a);
    if (b_pre != nullptr) Load(b_pre + i, bp);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const float b = b_pre != nullptr ? Sigmoid(bp[k]) : 1.f;  // no input gate: beta = 1
      be[k] = b;
      lg[k] = -Softplus(-a[k]) + log1pf(-cap * b * b);
    }
    Store(beta + i, be);
    Store(log_gamma + i, lg);
  });
}

// BiasForward of a_pre (when a_bias is set) and b_pre, then GatesForwardKernel, in one pass:
// the biased pre-activations are stored in T (as BiasForward stores them) and the gates computed
// from the stored values, so the results equal the three separate kernels bit for bit.
template <typename T>
__global__ void BiasGatesForwardKernel(T* a_pre, const float* a_bias, T* b_pre, const float* b_bias,
                                       float* beta, float* log_gamma, int64_t n, int64_t cols,
                                       float cap) {
  GridStride<1>(n, [&](int64_t i, auto) {
    const int64_t col = i % cols;
    float a = ToFloat(a_pre[i]);
    if (a_bias != nullptr) {
      a_pre[i] = FromFloat<T>(a + a_bias[col]);
      a = ToFloat(a_pre[i]);
    }
    float b = 1.f;  // no input gate (b_pre null): beta = 1
    if (b_pre != nullptr) {
      b_pre[i] = FromFloat<T>(ToFloat(b_pre[i]) + b_bias[col]);
      b = Sigmoid(ToFloat(b_pre[i]));
    }
    beta[i] = b;
    log_gamma[i] = -Softplus(-a) + log1pf(-cap * b * b);
  });
}

// GateProjections: CTA (row, head) forms the two dot products of ln's row with the head's a and b
// weight rows in float32 (strided per thread, then WarpSum and the warp partials in order), rounds
// them to T as a GEMM's output is, and finishes as BiasGatesForwardKernel.
constexpr int kGateThreads = 128;
template <typename T>
__global__ void __launch_bounds__(kGateThreads)
    GateProjectionsKernel(const T* ln, const T* a_weight, const float* a_bias, const T* b_weight,
                          const float* b_bias, T* a_pre, T* b_pre, float* beta, float* log_gamma,
                          int64_t in, int64_t heads, float cap) {
  constexpr int kWarps = kGateThreads / 32;
  __shared__ float s_a[kWarps], s_b[kWarps];
  const int64_t i = blockIdx.x, row = i / heads, head = i % heads;
  const T* x = ln + row * in;
  float sa = 0.f, sb = 0.f;
  for (int64_t k = threadIdx.x; k < in; k += kGateThreads) {
    const float xk = ToFloat(x[k]);
    if (a_weight != nullptr) sa += xk * ToFloat(a_weight[head * in + k]);
    if (b_weight != nullptr) sb += xk * ToFloat(b_weight[head * in + k]);
  }
  sa = WarpSum(sa);
  sb = WarpSum(sb);
  if ((threadIdx.x & 31) == 0) {
    s_a[threadIdx.x >> 5] = sa;
    s_b[threadIdx.x >> 5] = sb;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  float a = 0.f, b = 0.f;
  for (int w = 0; w < kWarps; ++w) {
    a += s_a[w];
    b += s_b[w];
  }
  T a_t = FromFloat<T>(a);
  if (a_bias != nullptr) a_t = FromFloat<T>(ToFloat(a_t) + a_bias[head]);
  a_pre[i] = a_t;
  float bs = 1.f;  // no input gate (b_weight null): beta = 1
  if (b_weight != nullptr) {
    const T b_t = FromFloat<T>(ToFloat(FromFloat<T>(b)) + b_bias[head]);
    b_pre[i] = b_t;
    bs = Sigmoid(ToFloat(b_t));
  }
  beta[i] = bs;
  log_gamma[i] = -Softplus(-ToFloat(a_t)) + log1pf(-cap * bs * bs);
}

template <typename T, int V>
__global__ void GatesBackwardKernel(const T* a_pre, const T* b_pre, const float* d_beta,
                                    const float* d_log_gamma, T* d_a_pre, T* d_b_pre, int64_t n,
                                    float cap) {
  GridStride<V>(n, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    float a[W], bp[W], db[W], dlg[W], da[W], dbp[W];
    Load(a_pre + i, a);
    Load(d_log_gamma + i, dlg);
    const bool input_gate = b_pre != nullptr;  // else beta is the constant 1: no d_b_pre
    if (input_gate) {
      Load(b_pre + i, bp);
      Load(d_beta + i, db);
    }
#pragma unroll
    for (int k = 0; k < W; ++k) {
      da[k] = dlg[k] * (1.f - Sigmoid(a[k]));
      if (input_gate) {
        const float b = Sigmoid(bp[k]);
        const float d_b = db[k] + dlg[k] * (-2.f * cap * b / (1.f - cap * b * b));
        dbp[k] = d_b * b * (1.f - b);
      }
    }
    Store(d_a_pre + i, da);
    if (input_gate) Store(d_b_pre + i, dbp);
  });
}

}  // namespace

template <typename T>
cudaError_t LaunchGatesForward(const T* a_pre, const T* b_pre, float* beta, float* log_gamma,
                               int64_t n, float cap, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  const bool vec = Aligned<kVecElementwise>(a_pre, b_pre, beta, log_gamma);
  return Dispatch<T, kVecElementwise>(vec, [&]<int V>() {
    return Run(GatesForwardKernel<T, V>, VecBlocks(n, V), kThreads, 0, s, a_pre, b_pre, beta,
               log_gamma, n, cap);
  });
}

template <typename T>
cudaError_t LaunchBiasGatesForward(T* a_pre, const float* a_bias, T* b_pre, const float* b_bias,
                                   float* beta, float* log_gamma, int64_t rows, int64_t cols,
                                   float cap, cudaStream_t s) {
  const int64_t n = rows * cols;
  if (n == 0) return cudaSuccess;
  return Run(BiasGatesForwardKernel<T>, VecBlocks(n, 1), kThreads, 0, s, a_pre, a_bias, b_pre,
             b_bias, beta, log_gamma, n, cols, cap);
}

template <typename T>
cudaError_t LaunchGateProjectionsForward(const T* ln, const T* a_weight, const float* a_bias,
                                         const T* b_weight, const float* b_bias, T* a_pre, T* b_pre,
                                         float* beta, float* log_gamma, int64_t rows, int64_t in,
                                         int64_t heads, float cap, cudaStream_t s) {
  if (rows * heads == 0) return cudaSuccess;
  return Run(GateProjectionsKernel<T>, dim3(rows * heads), kGateThreads, 0, s, ln, a_weight, a_bias,
             b_weight, b_bias, a_pre, b_pre, beta, log_gamma, in, heads, cap);
}

template <typename T>
cudaError_t LaunchGatesBackward(const T* a_pre, const T* b_pre, const float* d_beta,
                                const float* d_log_gamma, T* d_a_pre, T* d_b_pre, int64_t n,
                                float cap, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  const bool vec = Aligned<kVecElementwise>(a_pre, b_pre, d_beta, d_log_gamma, d_a_pre, d_b_pre);
  return Dispatch<T, kVecElementwise>(vec, [&]<int V>() {
    return Run(GatesBackwardKernel<T, V>, VecBlocks(n, V), kThreads, 0, s, a_pre, b_pre, d_beta,
               d_log_gamma, d_a_pre, d_b_pre, n, cap);
  });
}

// Both activation types (backend_kernels.h).
#define MESA_INSTANTIATE(T)                                                                       \
  template cudaError_t LaunchGatesForward<T>(const T*, const T*, float*, float*, int64_t, float,  \
                                             cudaStream_t);                                       \
  template cudaError_t LaunchBiasGatesForward<T>(T*, const float*, T*, const float*, float*,      \
                                                 float*, int64_t, int64_t, float, cudaStream_t);  \
  template cudaError_t LaunchGateProjectionsForward<T>(                                           \
      const T*, const T*, const float*, const T*, const float*, T*, T*, float*, float*, int64_t,  \
      int64_t, int64_t, float, cudaStream_t);                                                     \
  template cudaError_t LaunchGatesBackward<T>(const T*, const T*, const float*, const float*, T*, \
                                              T*, int64_t, float, cudaStream_t);

MESA_INSTANTIATE(float)
MESA_INSTANTIATE(Bf16)

#undef MESA_INSTANTIATE

}  // namespace mesa::model::cuda
