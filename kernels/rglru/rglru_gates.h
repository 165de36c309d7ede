// The RG-LRU's per-token gate arithmetic (docs/math.md §8.8), shared by the float64 reference and
// the float32 CPU scan, so that they compute the same expressions in the same order. The CUDA scan
// uses its constants and softplus/sigmoid of p, and writes the per-token gates with the GPU's fast
// exponential and reciprocal (FastGates in cuda/rglru_device_math.cuh; 1e-5 of the float64
// reference).
#ifndef MESANET_KERNELS_RGLRU_RGLRU_GATES_H_
#define MESANET_KERNELS_RGLRU_RGLRU_GATES_H_

#include <cmath>

#if defined(__CUDACC__)
#define RGLRU_HD __host__ __device__ __forceinline__
#else
#define RGLRU_HD inline
#endif

namespace mesa::kernels::rglru {

// Griffin's fixed exponent c: a_t = a^(c r_t).
inline constexpr double kRgLruC = 8.0;
// The log decay written at a restart (a row's first token, a document start): e^-30 ≈ 1e-13, as
// the log γ of the other mixers at document starts (docs/math.md §8.6); its gradient is zero.
inline constexpr double kRgLruResetLogDecay = -30.0;
// The clip of the derivative of sqrt(s): 1 / sqrt(max(4 s, kSqrtGradFloor)) ≤ 1000, as the
// released recurrentgemma code, so that a → 1 gives a finite gradient in float32.
inline constexpr double kRgLruSqrtGradFloor = 1e-6;

template <typename T>
RGLRU_HD T RgSigmoid(T z) {
  return T(1) / (T(1) + exp(-z));
}

template <typename T>
RGLRU_HD T RgSoftplus(T z) {  // log(1 + e^z) without overflow
  return z > T(20) ? z : log1p(exp(z));
}

// The gates of one token and channel, from the pre-activations ρ (recurrence gate) and ι (input
// gate), softplus(p) of the channel and whether the token restarts the recurrence.
template <typename T>
struct RgLruGates {
  T r;             // sigmoid(ρ)
  T i;             // sigmoid(ι)
  T log_a;         // ℓ = -c r softplus(p), or -30 at a restart
  T a;             // exp(ℓ)
  T m;             // sqrt(1 - a²), or 1 at a restart
  T one_minus_a2;  // 1 - a² (= -expm1(2ℓ)), for the clipped sqrt derivative
};

template <typename T>
RGLRU_HD RgLruGates<T> ComputeRgLruGates(T rho, T iota, T softplus_p, bool restart) {
  RgLruGates<T> g;
  g.r = RgSigmoid(rho);
  g.i = RgSigmoid(iota);
  g.log_a = restart ? T(kRgLruResetLogDecay) : T(-kRgLruC) * g.r * softplus_p;
  g.a = exp(g.log_a);
  g.one_minus_a2 = -expm1(T(2) * g.log_a);
  g.m = restart ? T(1) : sqrt(g.one_minus_a2);
  return g;
}

// Gradients of one token and channel given δh_t (the total gradient of h_t) and h_{t-1}:
// d_u = ∂L/∂u_t (the input path only), d_rho, d_iota, and the term of ∂p.
template <typename T>
struct RgLruTokenGrads {
  T d_u, d_rho, d_iota, d_p;
};

template <typename T>
RGLRU_HD RgLruTokenGrads<T> RgLruTokenBackward(const RgLruGates<T>& g, T u, T h_prev, T dh,
                                               T softplus_p, T sigmoid_p, bool restart) {
  RgLruTokenGrads<T> out;
  const T dh_m = dh * g.m;
  out.d_u = dh_m * g.i;
  out.d_iota = dh_m * u * g.i * (T(1) - g.i);
  if (restart) {  // ℓ is a constant there: no gradient reaches ρ or p
    out.d_rho = T(0);
    out.d_p = T(0);
    return out;
  }
  // m = sqrt(1 - a²): dm/da = -2a · d sqrt(s)/ds, with the clipped derivative.
  const T four_s = T(4) * g.one_minus_a2;
  const T sqrt_grad =
      T(1) / sqrt(four_s > T(kRgLruSqrtGradFloor) ? four_s : T(kRgLruSqrtGradFloor));
  const T d_a = dh * h_prev - T(2) * g.a * (dh * g.i * u) * sqrt_grad;
  const T d_log_a = g.a * d_a;
  out.d_rho = T(-kRgLruC) * softplus_p * d_log_a * g.r * (T(1) - g.r);
  out.d_p = T(-kRgLruC) * g.r * sigmoid_p * d_log_a;
  return out;
}

}  // namespace mesa::kernels::rglru

#endif  // MESANET_KERNELS_RGLRU_RGLRU_GATES_H_
