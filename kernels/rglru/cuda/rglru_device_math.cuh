// Device code both RG-LRU scans share (rglru_streaming_scan.cu, rglru_chained_scan.cu): the gates
// of rglru_gates.h with the GPU's fast exponential and reciprocal (about 1e-7 relative; the
// float32 test holds them to 1e-5 of the float64 reference), and the restart test.
#ifndef MESANET_KERNELS_RGLRU_CUDA_RGLRU_DEVICE_MATH_CUH_
#define MESANET_KERNELS_RGLRU_CUDA_RGLRU_DEVICE_MATH_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/rglru/rglru_gates.h"

namespace mesa::kernels::rglru::cuda {

__device__ __forceinline__ float FastSigmoid(float z) { return __fdividef(1.f, 1.f + __expf(-z)); }

// 1 − a² = −expm1(2ℓ): a Taylor polynomial where a² is near 1 (no cancellation), else 1 − a·a.
__device__ __forceinline__ float OneMinusA2(float log_a, float a) {
  const float x = 2.f * log_a;
  if (x > -0.5f) {
    float s = 1.f + x * (1.f / 7.f);
    s = 1.f + x * (1.f / 6.f) * s;
    s = 1.f + x * (1.f / 5.f) * s;
    s = 1.f + x * (1.f / 4.f) * s;
    s = 1.f + x * (1.f / 3.f) * s;
    s = 1.f + x * 0.5f * s;
    return -x * s;
  }
  return 1.f - a * a;
}

struct Gates {
  float r, i, a, m, sqrt_grad;  // sqrt_grad: the clipped 1/sqrt(4(1 − a²)) of the backward
};

__device__ __forceinline__ Gates FastGates(float rho, float iota, float softplus_p, bool restart) {
  Gates g;
  g.r = FastSigmoid(rho);
  g.i = FastSigmoid(iota);
  const float log_a = restart ? float(kRgLruResetLogDecay) : float(-kRgLruC) * g.r * softplus_p;
  g.a = __expf(log_a);
  const float om = OneMinusA2(log_a, g.a), four = 4.f * om;
  const float floor = float(kRgLruSqrtGradFloor);
  g.sqrt_grad = rsqrtf(four > floor ? four : floor);
  // sqrt(om) = 2·om·(1/sqrt(4 om)) where unclipped; the clipped tail (a within 1e-7 of 1) apart.
  g.m = restart ? 1.f : (four > floor ? 2.f * om * g.sqrt_grad : (om > 0.f ? sqrtf(om) : 0.f));
  return g;
}

// Whether token t of row b starts from zero: a document start, or the row's first token unless
// the row carries a started state.
__device__ __forceinline__ bool RowRestarts(const int32_t* doc_start, const float* started,
                                            int64_t T, int64_t b, int64_t t) {
  if (doc_start != nullptr && doc_start[b * T + t] == t) return true;
  return t == 0 && (started == nullptr || started[b] == 0.f);
}

}  // namespace mesa::kernels::rglru::cuda

#endif  // MESANET_KERNELS_RGLRU_CUDA_RGLRU_DEVICE_MATH_CUH_
