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

}  // namespace mesa::kernels::attention::testing
