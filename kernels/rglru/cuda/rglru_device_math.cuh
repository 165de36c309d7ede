// Device code both RG-LRU scans share (rglru_streaming_scan.cu, rglru_chained_scan.cu): the gates
// of rglru_gates.h with the GPU's approximate exponential, reciprocal and reciprocal square root
// (about 1e-7 relative; the float32 test holds them to 1e-5 of the float64 reference), and the
// restart test.
//
// The scans are bound by instruction issue, so the gates are written branch-free with the PTX
// approximations themselves (denormals flushed: no input here needs them, and the non-flushing
// forms cost extra instructions around every MUFU operation), and the decay in base 2, so that
// a = 2^(r·k2) with k2 = −c·softplus(p)·log2(e) per channel.
#ifndef MESANET_KERNELS_RGLRU_CUDA_RGLRU_DEVICE_MATH_CUH_
#define MESANET_KERNELS_RGLRU_CUDA_RGLRU_DEVICE_MATH_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/rglru/rglru_gates.h"

namespace mesa::kernels::rglru::cuda {

__device__ __forceinline__ float Ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float Rcp(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float Rsqrt(float x) {
  float y;
  asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kTwoLn2 = 1.3862943611198906f;
// log2 of the decay written at a restart.
constexpr float kResetLog2Decay = static_cast<float>(kRgLruResetLogDecay) * kLog2e;
// 1/sqrt(kRgLruSqrtGradFloor): the clipped derivative where 4(1 − a²) is below the floor.
constexpr float kSqrtGradCap = 1000.f;
static_assert(kRgLruSqrtGradFloor == 1e-6, "kSqrtGradCap is 1/sqrt(kRgLruSqrtGradFloor)");

__device__ __forceinline__ float FastSigmoid(float z) { return Rcp(1.f + Ex2(-kLog2e * z)); }

// The per-channel constant of the decay: log2(a_t) = r_t · DecayLog2Scale(softplus(p)).
__device__ __forceinline__ float DecayLog2Scale(float softplus_p) {
  return float(-kRgLruC) * kLog2e * softplus_p;
}

// Every per-channel constant the scans need, from p (the accurate softplus and sigmoid: computed
// once per channel and launch, never per token).
struct ChannelConstants {
  float k2;         // DecayLog2Scale(softplus(p))
  float rho_scale;  // ∂ℓ/∂r = −c·softplus(p)
  float dp_scale;   // ∂ℓ/∂p ÷ r = −c·σ(p)
};
__device__ __forceinline__ ChannelConstants ChannelConstantsOf(float p) {
  const float sp = RgSoftplus(p);
  return {DecayLog2Scale(sp), float(-kRgLruC) * sp, float(-kRgLruC) * RgSigmoid(p)};
}

// 1 − a² = −expm1(2ℓ) from 2ℓ = x and a: a Taylor polynomial where a² is near 1 (no
// cancellation), else 1 − a·a; both are computed and one is selected (no branch).
__device__ __forceinline__ float OneMinusA2(float x, float a) {
  float s = 1.f / 5040.f;  // Σ x^n / (n + 1)!, n ≤ 6
  s = fmaf(s, x, 1.f / 720.f);
  s = fmaf(s, x, 1.f / 120.f);
  s = fmaf(s, x, 1.f / 24.f);
  s = fmaf(s, x, 1.f / 6.f);
  s = fmaf(s, x, 0.5f);
  s = fmaf(s, x, 1.f);
  return x > -0.5f ? -x * s : fmaf(-a, a, 1.f);
}

struct Gates {
  float r, i, a, m, sqrt_grad;  // sqrt_grad: the clipped 1/sqrt(4(1 − a²)) of the backward
};

// k2: DecayLog2Scale of the channel.
__device__ __forceinline__ Gates FastGates(float rho, float iota, float k2, bool restart) {
  Gates g;
  g.r = FastSigmoid(rho);
  g.i = FastSigmoid(iota);
  const float log2_a = restart ? kResetLog2Decay : g.r * k2;
  g.a = Ex2(log2_a);
  const float om = OneMinusA2(log2_a * kTwoLn2, g.a);
  // om ≥ 0; om · rsqrt(om) = sqrt(om), and 0 at om = 0 (a = 1 in float32).
  const float rs = Rsqrt(fmaxf(om, 1e-30f));
  g.m = restart ? 1.f : om * rs;
  g.sqrt_grad = 4.f * om > float(kRgLruSqrtGradFloor) ? 0.5f * rs : kSqrtGradCap;
  return g;
}

// Only the decay (the backward's segment summaries).
__device__ __forceinline__ float FastDecay(float rho, float k2, bool restart) {
  return Ex2(restart ? kResetLog2Decay : FastSigmoid(rho) * k2);
}

// What decides whether a token of one row starts from zero: its document starts, and whether the
// row's first token does (no started state). Read once per thread, tested per token.
struct RowStart {
  const int32_t* doc_row;  // the row's document starts [T], or null
  bool fresh;              // the row's first token restarts
};
__device__ __forceinline__ RowStart RowStartOf(const int32_t* doc_start, const float* started,
                                               int64_t T, int64_t b) {
  return {doc_start != nullptr ? doc_start + b * T : nullptr,
          started == nullptr || started[b] == 0.f};
}
// Whether token t restarts: a document start, or the row's first token of a fresh row.
__device__ __forceinline__ bool Restarts(const RowStart& row, int64_t t) {
  return (row.doc_row != nullptr && row.doc_row[t] == t) || (t == 0 && row.fresh);
}

}  // namespace mesa::kernels::rglru::cuda

#endif  // MESANET_KERNELS_RGLRU_CUDA_RGLRU_DEVICE_MATH_CUH_
