// Random Mesa problems that mimic the model's inputs, and error metrics. Test-only.
#ifndef MESANET_KERNELS_MESA_MESA_TEST_UTIL_H_
#define MESANET_KERNELS_MESA_MESA_TEST_UTIL_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kernels/mesa/mesa_types.h"

namespace mesa::kernels::testing {

struct ProblemConfig {
  int64_t batch = 1, seq_len = 16, heads = 1, head_dim = 16;
  float log_gamma_min = -5.f, log_gamma_max = -0.001f;  // log(sigmoid(.)) range
  float beta_min = 0.02f, beta_max = 0.98f;
  float lambda_min = 0.25f, lambda_max = 1.5f;
  bool initial_state = false;     // random h0 (symmetric PSD) and g0
  std::vector<int32_t> seq_lens;  // non-empty => varlen: batch = 1, T = sum
  uint64_t seed = 1;
};

// Owns the tensors; Inputs() views them.
struct Problem {
  MesaDims dims;
  std::vector<float> q, k, v, log_gamma, beta, lambda, h0, g0, d_o, dh_final, dg_final;
  std::vector<int32_t> cu_seqlens;
  MesaInputs Inputs() const;
  int64_t num_sequences() const;
};

// q, k: L2-normalised Gaussian rows; v, do: N(0, 1); beta, log_gamma, lambda uniform in range.
Problem RandomProblem(const ProblemConfig& config);

// max |a - b| / max(max |b|, 1e-4): relative to the reference tensor's scale.
double MaxRelError(std::span<const float> actual, std::span<const float> expected);

}  // namespace mesa::kernels::testing

#endif  // MESANET_KERNELS_MESA_MESA_TEST_UTIL_H_
