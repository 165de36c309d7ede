// Random attention problems for the tests (CPU and CUDA). Test-only.
#ifndef MESANET_KERNELS_ATTENTION_TEST_UTIL_H_
#define MESANET_KERNELS_ATTENTION_TEST_UTIL_H_

#include <cstdint>
#include <vector>

#include "kernels/attention/attention_types.h"

namespace mesa::kernels::attention::testing {

struct Config {
  int64_t batch = 1, seq_len = 16, heads = 1, head_dim = 16;
  // Multiplies q: larger values make each row's softmax peakier (the model's trained regime).
  float q_gain = 1.f;
  uint64_t seed = 1;
};

struct Problem {
  AttnDims dims;
  std::vector<float> q, k, v, d_o;
  AttnInputs Inputs() const { return {.dims = dims, .q = q, .k = k, .v = v}; }
};

// q, k, v, do: N(0, 1) entries (q times q_gain).
Problem RandomProblem(const Config& c);

}  // namespace mesa::kernels::attention::testing

#endif  // MESANET_KERNELS_ATTENTION_TEST_UTIL_H_
