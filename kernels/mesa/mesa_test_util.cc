#include "kernels/mesa/mesa_test_util.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace mesa::kernels::testing {

MesaInputs Problem::Inputs() const {
  return MesaInputs{.dims = dims,
                    .q = q,
                    .k = k,
                    .v = v,
                    .log_gamma = log_gamma,
                    .beta = beta,
                    .lambda = lambda,
                    .h0 = h0,
                    .g0 = g0,
                    .cu_seqlens = cu_seqlens};
}

int64_t Problem::num_sequences() const {
  return cu_seqlens.empty() ? dims.batch : static_cast<int64_t>(cu_seqlens.size()) - 1;
}

Problem RandomProblem(const ProblemConfig& config) {
  std::mt19937_64 rng(config.seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  auto uniform = [&](float lo, float hi) {
    return std::uniform_real_distribution<float>(lo, hi)(rng);
  };
  Problem p;
  p.dims = {config.batch, config.seq_len, config.heads, config.head_dim};
  if (!config.seq_lens.empty()) {
    p.cu_seqlens.push_back(0);
    for (int32_t len : config.seq_lens) p.cu_seqlens.push_back(p.cu_seqlens.back() + len);
    p.dims.batch = 1;
    p.dims.seq_len = p.cu_seqlens.back();
  }
  const int64_t d = p.dims.head_dim;
  auto unit_rows = [&](std::vector<float>& x) {
    x.resize(p.dims.TokenElems());
    for (size_t row = 0; row < x.size(); row += d) {
      double norm = 0;
      for (int64_t j = 0; j < d; ++j) {
        x[row + j] = normal(rng);
        norm += double(x[row + j]) * x[row + j];
      }
      for (int64_t j = 0; j < d; ++j) x[row + j] = static_cast<float>(x[row + j] / std::sqrt(norm));
    }
  };
  unit_rows(p.q);
  unit_rows(p.k);
  p.v.resize(p.dims.TokenElems());
  for (float& x : p.v) x = normal(rng);
  p.log_gamma.resize(p.dims.GateElems());
  for (float& x : p.log_gamma) x = uniform(config.log_gamma_min, config.log_gamma_max);
  p.beta.resize(p.dims.GateElems());
  for (float& x : p.beta) x = uniform(config.beta_min, config.beta_max);
  p.lambda.resize(p.dims.LambdaElems());
  for (float& x : p.lambda) x = uniform(config.lambda_min, config.lambda_max);
  p.d_o.resize(p.dims.TokenElems());
  for (float& x : p.d_o) x = normal(rng);
  const int64_t state = p.num_sequences() * p.dims.heads * d * d;
  if (config.initial_state) {
    p.h0.assign(state, 0.f);
    p.g0.resize(state);
    for (float& x : p.g0) x = normal(rng) / std::sqrt(float(d));
    // h0 = A A^T / D: symmetric PSD, like a real H state.
    std::vector<float> a(d * d);
    for (int64_t s = 0; s < state; s += d * d) {
      for (float& x : a) x = normal(rng);
      for (int64_t i = 0; i < d; ++i) {
        for (int64_t j = 0; j < d; ++j) {
          double sum = 0;
          for (int64_t l = 0; l < d; ++l) sum += double(a[i * d + l]) * a[j * d + l];
          p.h0[s + i * d + j] = static_cast<float>(sum / d);
        }
      }
    }
    p.dh_final.resize(state);
    p.dg_final.resize(state);
    for (float& x : p.dh_final) x = 0.1f * normal(rng);
    for (float& x : p.dg_final) x = 0.1f * normal(rng);
  }
  return p;
}

double MaxRelError(std::span<const float> actual, std::span<const float> expected) {
  if (actual.size() != expected.size()) return INFINITY;
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double diff = std::fabs(double(actual[i]) - expected[i]);
    if (!(diff <= max_diff)) max_diff = diff;  // propagates NaN as "worse"
    max_ref = std::max(max_ref, std::fabs(double(expected[i])));
  }
  if (std::isnan(max_diff)) return INFINITY;
  return max_diff /
         std::max(max_ref, 1e-4);  // floor: a (near) zero reference tolerates rounding noise
}

}  // namespace mesa::kernels::testing
