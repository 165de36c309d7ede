// A float32 dot product that the compiler vectorises without -ffast-math: 16 independent partial
// sums (lane l adds the products j = l mod 16), then the lanes in a fixed order. Deterministic
// (no dependence on alignment or threads); rounding differs from a sequential sum by the usual
// O(n u) bound. Used by the decoding steps' matrix-vector products (kernels/mesa/step.cc,
// kernels/deltanet/step.cc).
#ifndef MESANET_KERNELS_DOT_H_
#define MESANET_KERNELS_DOT_H_

#include <cstdint>

namespace mesa::kernels {

inline float LaneDot(const float* a, const float* b, int64_t n) {
  constexpr int kLanes = 16;
  float lanes[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) lanes[l] += a[j + l] * b[j + l];
  }
  for (int l = 0; j < n; ++j, ++l) lanes[l] += a[j] * b[j];
  float sum = 0.f;
  for (int l = 0; l < kLanes; ++l) sum += lanes[l];
  return sum;
}

}  // namespace mesa::kernels

#endif  // MESANET_KERNELS_DOT_H_
