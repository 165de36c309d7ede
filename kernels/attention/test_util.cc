#include "kernels/attention/test_util.h"

#include <random>

namespace mesa::kernels::attention::testing {

Problem RandomProblem(const Config& c) {
  std::mt19937_64 rng(c.seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  Problem p;
  p.dims = {c.batch, c.seq_len, c.heads, c.head_dim};
  auto fill = [&](float gain) {
    std::vector<float> x(p.dims.TokenElems());
    for (float& e : x) e = gain * normal(rng);
    return x;
  };
  p.q = fill(c.q_gain);
  p.k = fill(1.f);
  p.v = fill(1.f);
  p.d_o = fill(1.f);
  return p;
}

Problem ShiftKeyAndValue(const Problem& p, int64_t token) {
  Problem q = p;
  const int64_t row = p.dims.heads * p.dims.head_dim;
  for (int64_t e = 0; e < row; ++e) {
    q.k[token * row + e] += 1.f;
    q.v[token * row + e] += 1.f;
  }
  return q;
}

std::vector<float> TokenRow(const std::vector<float>& x, const AttnDims& dims, int64_t t) {
  const int64_t row = dims.heads * dims.head_dim;
  return std::vector<float>(x.begin() + t * row, x.begin() + (t + 1) * row);
}

}  // namespace mesa::kernels::attention::testing
