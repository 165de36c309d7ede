// eval.internals' host computations: the recomputed state against the Mesa operator's final state,
// and the condition number against matrices of known eigenvalues.
#include "model/trainer/internals.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/mesa_op.h"

namespace mesa::model {
namespace {

// Q diag(eigenvalues) Qᵀ with Q a random orthogonal matrix (Gram-Schmidt of Gaussian columns).
std::vector<double> WithEigenvalues(const std::vector<double>& eigenvalues, uint32_t seed) {
  const int n = static_cast<int>(eigenvalues.size());
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal;
  std::vector<std::vector<double>> q(n, std::vector<double>(n));
  for (int c = 0; c < n; ++c) {
    for (double& x : q[c]) x = normal(rng);
    for (int p = 0; p < c; ++p) {
      double dot = 0;
      for (int i = 0; i < n; ++i) dot += q[c][i] * q[p][i];
      for (int i = 0; i < n; ++i) q[c][i] -= dot * q[p][i];
    }
    double norm = 0;
    for (double x : q[c]) norm += x * x;
    for (double& x : q[c]) x /= std::sqrt(norm);
  }
  std::vector<double> a(n * n, 0.0);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      for (int c = 0; c < n; ++c) a[i * n + j] += q[c][i] * eigenvalues[c] * q[c][j];
    }
  }
  return a;
}

TEST(SpdConditionNumber, IsTheRatioOfTheExtremeEigenvalues) {
  for (const std::vector<double>& eigenvalues :
       {std::vector<double>{2.0, 0.5, 1.0, 4.0}, std::vector<double>{1e-3, 1.0, 10.0},
        std::vector<double>(16, 3.0)}) {
    const int n = static_cast<int>(eigenvalues.size());
    const double expected = *std::max_element(eigenvalues.begin(), eigenvalues.end()) /
                            *std::min_element(eigenvalues.begin(), eigenvalues.end());
    absl::StatusOr<double> c = SpdConditionNumber(WithEigenvalues(eigenvalues, n), n);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_NEAR(*c, expected, 1e-9 * expected) << n;
  }
  absl::StatusOr<double> indefinite = SpdConditionNumber(WithEigenvalues({1.0, -0.5}, 1), 2);
  EXPECT_FALSE(indefinite.ok());
  EXPECT_NE(indefinite.status().message().find("not positive definite"), std::string::npos);
}

// The state the probe recomputes is the operator's own H_T (float64 reference, zero initial state).
TEST(FinalKeyState, EqualsTheOperatorsFinalState) {
  constexpr int64_t kB = 2, kT = 37, kH = 2, kD = 16;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> unit(0.05f, 0.95f);
  SolveInputs in{.batch = kB, .seq_len = kT, .heads = kH, .head_dim = kD};
  std::vector<float> q(kB * kT * kH * kD), v(q.size());
  in.k.resize(q.size());
  for (std::vector<float>* x : {&q, &in.k, &v}) {
    for (int64_t r = 0; r < kB * kT * kH; ++r) {
      double norm = 0;
      for (int64_t j = 0; j < kD; ++j) norm += std::pow((*x)[r * kD + j] = normal(rng), 2);
      for (int64_t j = 0; j < kD; ++j) (*x)[r * kD + j] /= static_cast<float>(std::sqrt(norm));
    }
  }
  for (int64_t i = 0; i < kB * kT * kH; ++i) {
    in.log_gamma.push_back(std::log(unit(rng)));
    in.beta.push_back(unit(rng));
  }
  in.lambda.assign(kH * kD, 1.0f);
  kernels::MesaInputs op{.dims = {kB, kT, kH, kD},
                         .q = q,
                         .k = in.k,
                         .v = v,
                         .log_gamma = in.log_gamma,
                         .beta = in.beta,
                         .lambda = in.lambda};
  kernels::MesaOptions options{.impl = kernels::MesaImpl::kReference};
  absl::StatusOr<kernels::MesaForwardResult> fwd =
      kernels::MesaForwardAlloc(op, options, /*want_final_states=*/true);
  ASSERT_TRUE(fwd.ok()) << fwd.status();
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t h = 0; h < kH; ++h) {
      const std::vector<double> state = FinalKeyState(in, b, h);
      for (int64_t i = 0; i < kD * kD; ++i) {
        EXPECT_NEAR(state[i], fwd->h_final[(b * kH + h) * kD * kD + i], 1e-5) << b << " " << h;
      }
    }
  }
}

}  // namespace
}  // namespace mesa::model
