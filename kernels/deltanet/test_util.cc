#include "kernels/deltanet/test_util.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace mesa::kernels::deltanet::testing {

Problem RandomProblem(const Config& c) {
  std::mt19937_64 rng(c.seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_real_distribution<float> beta_dist(0.02f, 0.98f), lg_dist(-0.1f, 0.f);
  Problem p;
  p.dims = {c.batch, c.seq_len, c.heads, c.head_dim};
  if (!c.seq_lens.empty()) {
    p.cu_seqlens.push_back(0);
    for (int32_t len : c.seq_lens) p.cu_seqlens.push_back(p.cu_seqlens.back() + len);
    p.dims.batch = 1;
    p.dims.seq_len = p.cu_seqlens.back();
  }
  const int64_t dim = p.dims.head_dim, tokens = p.dims.GateElems();
  auto rows = [&](bool normalise) {
    std::vector<float> x(tokens * dim);
    for (int64_t t = 0; t < tokens; ++t) {
      double norm = 0;
      for (int64_t j = 0; j < dim; ++j) {
        x[t * dim + j] = normal(rng);
        norm += double(x[t * dim + j]) * x[t * dim + j];
      }
      if (normalise) {
        for (int64_t j = 0; j < dim; ++j) x[t * dim + j] /= std::sqrt(norm);
      }
    }
    return x;
  };
  p.q = rows(true);
  p.k = rows(true);
  p.v = rows(false);
  p.d_o = rows(false);
  p.beta.resize(tokens);
  for (float& b : p.beta) b = beta_dist(rng);
  if (c.gated) {
    p.log_gamma.resize(tokens);
    for (float& g : p.log_gamma) g = lg_dist(rng);
  }
  const int64_t num_seq = p.cu_seqlens.empty() ? p.dims.batch : p.cu_seqlens.size() - 1;
  const int64_t state = num_seq * p.dims.heads * dim * dim;
  if (c.initial_state) {
    p.s0.resize(state);
    for (float& x : p.s0) x = 0.5f * normal(rng);
  }
  if (c.final_state_grad) {
    p.ds_final.resize(state);
    for (float& x : p.ds_final) x = normal(rng);
  }
  return p;
}

double MaxRelError(std::span<const float> actual, std::span<const float> expected) {
  if (actual.size() != expected.size()) return INFINITY;
  double err = 0, scale = 1e-6;
  for (size_t i = 0; i < expected.size(); ++i) {
    err = std::max(err, std::abs(double(actual[i]) - expected[i]));
    scale = std::max(scale, std::abs(double(expected[i])));
  }
  return err / scale;
}

}  // namespace mesa::kernels::deltanet::testing
