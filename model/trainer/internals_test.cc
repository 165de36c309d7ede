// eval.internals' host computations: the recomputed state against the Mesa operator's final state,
// and the condition number against matrices of known eigenvalues.
#include "model/trainer/internals.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/mesa/mesa_op.h"
#include "model/layers/document_starts.h"

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

// Random unit q, k, v and gates in (0.05, 0.95) for `rows` rows of kT tokens; `in` gets k, the
// gates and Λ = 1, `q` and `v` the rest of the operator's inputs.
constexpr int64_t kT = 37, kH = 2, kD = 16;
void RandomSolveInputs(int64_t rows, uint32_t seed, SolveInputs* in, std::vector<float>* q,
                       std::vector<float>* v) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> unit(0.05f, 0.95f);
  *in = SolveInputs{.batch = rows, .seq_len = kT, .heads = kH, .head_dim = kD};
  q->resize(rows * kT * kH * kD);
  v->resize(q->size());
  in->k.resize(q->size());
  for (std::vector<float>* x : {q, &in->k, v}) {
    for (int64_t r = 0; r < rows * kT * kH; ++r) {
      double norm = 0;
      for (int64_t j = 0; j < kD; ++j) norm += std::pow((*x)[r * kD + j] = normal(rng), 2);
      for (int64_t j = 0; j < kD; ++j) (*x)[r * kD + j] /= static_cast<float>(std::sqrt(norm));
    }
  }
  for (int64_t i = 0; i < rows * kT * kH; ++i) {
    in->log_gamma.push_back(std::log(unit(rng)));
    in->beta.push_back(unit(rng));
  }
  in->lambda.assign(kH * kD, 1.0f);
}

// The operator's (float64 reference) final states, [sequences, H, D, D]; `cu_seqlens` splits the
// one row into documents.
std::vector<float> OperatorFinalStates(const SolveInputs& in, const std::vector<float>& q,
                                       const std::vector<float>& v,
                                       const std::vector<int32_t>& cu_seqlens = {}) {
  kernels::MesaInputs op{.dims = {in.batch, kT, kH, kD},
                         .q = q,
                         .k = in.k,
                         .v = v,
                         .log_gamma = in.log_gamma,
                         .beta = in.beta,
                         .lambda = in.lambda,
                         .cu_seqlens = cu_seqlens};
  kernels::MesaOptions options{.impl = kernels::MesaImpl::kReference};
  absl::StatusOr<kernels::MesaForwardResult> fwd =
      kernels::MesaForwardAlloc(op, options, /*want_final_states=*/true);
  EXPECT_TRUE(fwd.ok()) << fwd.status();
  return fwd.ok() ? fwd->h_final : std::vector<float>{};
}

// The state the probe recomputes is the operator's own H_T (float64 reference, zero initial state).
TEST(FinalKeyState, EqualsTheOperatorsFinalState) {
  constexpr int64_t kB = 2;
  SolveInputs in;
  std::vector<float> q, v;
  RandomSolveInputs(kB, 5, &in, &q, &v);
  const std::vector<float> h_final = OperatorFinalStates(in, q, v);
  ASSERT_EQ(h_final.size(), kB * kH * kD * kD);
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t h = 0; h < kH; ++h) {
      const std::vector<double> state = FinalKeyState(in, b, h);
      for (int64_t i = 0; i < kD * kD; ++i) {
        EXPECT_NEAR(state[i], h_final[(b * kH + h) * kD * kD + i], 1e-5) << b << " " << h;
      }
    }
  }
}

// With document resets (a BOS in the middle of the row) the recomputed state restarts at that BOS:
// it equals the operator's final state of the row's last document, not the whole row's.
TEST(FinalKeyState, RestartsAtTheLastDocumentStart) {
  constexpr int32_t kBos = 0;
  constexpr int64_t kSecondDocument = 15;
  SolveInputs in;
  std::vector<float> q, v;
  RandomSolveInputs(1, 9, &in, &q, &v);
  // Slow forgetting, so that the first document would still weigh in without the reset.
  for (float& g : in.log_gamma) g = std::log(0.97f);
  std::vector<int32_t> tokens(kT, 7);
  tokens[0] = kBos;
  tokens[kSecondDocument] = kBos;
  in.doc_start.resize(kT);
  DocumentStarts(tokens.data(), 1, kT, kBos, in.doc_start.data());
  ASSERT_EQ(in.doc_start[kT - 1], kSecondDocument);
  const std::vector<float> h_final = OperatorFinalStates(
      in, q, v, {0, static_cast<int32_t>(kSecondDocument), static_cast<int32_t>(kT)});
  ASSERT_EQ(h_final.size(), 2 * kH * kD * kD);
  const std::vector<float> whole = OperatorFinalStates(in, q, v);
  for (int64_t h = 0; h < kH; ++h) {
    const std::vector<double> state = FinalKeyState(in, 0, h);
    double off_whole = 0;
    for (int64_t i = 0; i < kD * kD; ++i) {
      // Sequence 1 of the varlen call: the second document.
      EXPECT_NEAR(state[i], h_final[(kH + h) * kD * kD + i], 1e-5) << h;
      off_whole = std::max(off_whole, std::abs(state[i] - whole[h * kD * kD + i]));
    }
    EXPECT_GT(off_whole, 1e-3) << "the first document's keys should not be in the state";
  }
}

}  // namespace
}  // namespace mesa::model
