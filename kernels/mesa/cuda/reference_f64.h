// Independent float64 oracle for the CUDA tests: recurrent states, exact Cholesky solves and the
// backward written directly from docs/math.md §3 (O(T^2 D) per head). Small shapes only.
#ifndef MESANET_KERNELS_MESA_CUDA_REFERENCE_F64_H_
#define MESANET_KERNELS_MESA_CUDA_REFERENCE_F64_H_

#include <cstdint>
#include <vector>

namespace mesa::kernels::cuda::testing {

struct RefProblem {
  int64_t B = 0, T = 0, H = 0, D = 0;
  std::vector<int32_t> cu_seqlens;  // empty or N+1 offsets (then B == 1)
  bool gla = false;                 // max_steps == 0: q* = q, no H terms
  std::vector<float> q, k, v, log_gamma, beta, lambda, h0, g0, d_o;  // h0/g0 may be empty
};

struct RefResult {
  std::vector<double> o, q_star, h_final, g_final;
  std::vector<double> dq, dk, dv, dlog_gamma, dbeta, dlambda, dh0, dg0;
};

RefResult RunReference(const RefProblem& p);

}  // namespace mesa::kernels::cuda::testing

#endif  // MESANET_KERNELS_MESA_CUDA_REFERENCE_F64_H_
