// AdamW step of the CUDA backend over fp32 parameters, gradients and moments (decoupled weight
// decay). Must match CpuBackend::AdamWUpdate (model/backend/cpu_backend.cc).
#include "model/backend/cuda/backend_kernels.h"

#include <cstdint>

#include "model/backend/cuda/backend_common.cuh"

namespace mesa::model::cuda {
namespace {

// V elements per access when every pointer is 16-byte aligned (parameter tensors start 256 bytes
// apart); the arithmetic per element is the same as V = 1.
template <int V>
__global__ void AdamWKernel(float* __restrict__ params, const float* __restrict__ grads,
                            float* __restrict__ m, float* __restrict__ v, int64_t n, float lr,
                            float beta1, float beta2, float eps, float weight_decay, float bc1,
                            float bc2) {
  GridStride<V>(n, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    float g[W], mi[W], vi[W], p[W];
    Load(grads + i, g);
    Load(m + i, mi);
    Load(v + i, vi);
    Load(params + i, p);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      mi[k] = beta1 * mi[k] + (1.f - beta1) * g[k];
      vi[k] = beta2 * vi[k] + (1.f - beta2) * g[k] * g[k];
      const float m_hat = mi[k] / bc1;
      const float v_hat = vi[k] / bc2;
      p[k] = p[k] - lr * (m_hat / (sqrtf(v_hat) + eps) + weight_decay * p[k]);
    }
    Store(m + i, mi);
    Store(v + i, vi);
    Store(params + i, p);
  });
}

}  // namespace

cudaError_t LaunchAdamW(float* params, const float* grads, float* m, float* v, int64_t n, float lr,
                        float beta1, float beta2, float eps, float weight_decay,
                        float bias_correction1, float bias_correction2, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  if (Aligned<4>(params, grads, m, v)) {
    return Run(AdamWKernel<4>, VecBlocks(n, 4), kThreads, 0, s, params, grads, m, v, n, lr, beta1,
               beta2, eps, weight_decay, bias_correction1, bias_correction2);
  }
  return Run(AdamWKernel<1>, ElementwiseBlocks(n), kThreads, 0, s, params, grads, m, v, n, lr,
             beta1, beta2, eps, weight_decay, bias_correction1, bias_correction2);
}

}  // namespace mesa::model::cuda
