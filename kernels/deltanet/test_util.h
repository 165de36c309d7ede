// Random DeltaNet-family problems that mimic the model's inputs, and an error metric. Test-only
// (the op's tests and the recurrent step's tests share them).
#ifndef MESANET_KERNELS_DELTANET_TEST_UTIL_H_
#define MESANET_KERNELS_DELTANET_TEST_UTIL_H_

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/deltanet/deltanet_types.h"

namespace mesa::kernels::deltanet::testing {

struct Config {
  int64_t batch = 1, seq_len = 16, heads = 1, head_dim = 16;
  bool gated = true;
  bool initial_state = false;
  bool final_state_grad = false;  // random ds_final
  std::vector<int32_t> seq_lens;  // non-empty => varlen: batch = 1, T = sum
  uint64_t seed = 1;
};

struct Problem {
  DeltaDims dims;
  std::vector<float> q, k, v, beta, log_gamma, s0, d_o, ds_final;
  std::vector<int32_t> cu_seqlens;

  DeltaInputs Inputs() const {
    return {.dims = dims,
            .q = q,
            .k = k,
            .v = v,
            .beta = beta,
            .log_gamma = log_gamma,
            .s0 = s0,
            .cu_seqlens = cu_seqlens};
  }
};

// The model's inputs: q and k L2-normalised Gaussian rows, v and do N(0, 1), beta in (0, 1),
// log_gamma in [-0.1, 0], s0 N(0, 0.5^2), ds_final N(0, 1).
Problem RandomProblem(const Config& c);

// max |a - b| / max(max |b|, 1e-6): error relative to the reference tensor's scale (infinite
// when the sizes differ).
double MaxRelError(std::span<const float> actual, std::span<const float> expected);

}  // namespace mesa::kernels::deltanet::testing

#endif  // MESANET_KERNELS_DELTANET_TEST_UTIL_H_
