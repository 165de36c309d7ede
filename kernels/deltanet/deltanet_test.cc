// Tests of the DeltaNet family operator: chunked (float32) vs the float64 reference, the
// reference's gradients vs float64 central finite differences, Gated-with-zero-gates == DeltaNet,
// and input validation.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/deltanet/deltanet_op.h"
#include "kernels/deltanet/reference.h"
#include "kernels/deltanet/test_util.h"

namespace mesa::kernels::deltanet {
namespace {

using testing::Config;
using ::testing::HasSubstr;
using testing::MaxRelError;
using testing::Problem;
using testing::RandomProblem;

DeltaOptions Opts(DeltaImpl impl, int threads = 0) {
  DeltaOptions o;
  o.impl = impl;
  o.num_threads = threads;
  return o;
}

struct RunResult {
  DeltaForwardResult fwd;
  DeltaGradientsResult grads;
};

RunResult RunBoth(const Problem& p, const DeltaOptions& options) {
  absl::StatusOr<DeltaForwardResult> fwd =
      DeltaNetForwardAlloc(p.Inputs(), options, /*want_final_state=*/true);
  EXPECT_TRUE(fwd.ok()) << fwd.status();
  absl::StatusOr<DeltaGradientsResult> grads =
      DeltaNetBackwardAlloc(p.Inputs(), p.d_o, options, /*want_state_grad=*/true, p.ds_final);
  EXPECT_TRUE(grads.ok()) << grads.status();
  return {*std::move(fwd), *std::move(grads)};
}

// Tolerances of the float32 chunked form against the float64 oracle, relative to each tensor's
// largest entry (MaxRelError). Float32 has unit roundoff u = 6e-8. The chunked form sums dot
// products of length <= max(D, chunk) = 128 in GEMMs (typical error ~ sqrt(128) u ~ 7e-7 of the
// terms' scale), carries the state through up to T/64 = 16 chunk updates (contractive for
// normalised k, beta < 1, gamma <= 1, so errors do not grow), and the UT transform
// A = (I + L)^{-1} is built in float64 and rounded once. Measured worst cases over every case
// below: 6.2e-7 (forward) and 8.8e-7 (gradients). The bounds leave ~8-10x margin over that while
// a wrong term (e.g. the paper's sign in T, a missing gate factor) gives errors of O(1e-2..1).
constexpr double kForwardTol = 5e-6;
constexpr double kGradTol = 1e-5;

// grad_tol_scale loosens the gradient bound for degenerate shapes (see the D = 1 case).
void ExpectChunkedMatchesReference(const Problem& p, const std::string& label, int chunk_size = 64,
                                   double grad_tol_scale = 1.0) {
  SCOPED_TRACE(label);
  const RunResult ref = RunBoth(p, Opts(DeltaImpl::kReference));
  DeltaOptions chunked = Opts(DeltaImpl::kChunked);
  chunked.chunk_size = chunk_size;
  const RunResult got = RunBoth(p, chunked);
  EXPECT_LT(MaxRelError(got.fwd.o, ref.fwd.o), kForwardTol) << "o";
  EXPECT_LT(MaxRelError(got.fwd.s_final, ref.fwd.s_final), kForwardTol) << "s_final";
  const double grad_tol = kGradTol * grad_tol_scale;
  EXPECT_LT(MaxRelError(got.grads.dq, ref.grads.dq), grad_tol) << "dq";
  EXPECT_LT(MaxRelError(got.grads.dk, ref.grads.dk), grad_tol) << "dk";
  EXPECT_LT(MaxRelError(got.grads.dv, ref.grads.dv), grad_tol) << "dv";
  EXPECT_LT(MaxRelError(got.grads.dbeta, ref.grads.dbeta), grad_tol) << "dbeta";
  EXPECT_LT(MaxRelError(got.grads.dlog_gamma, ref.grads.dlog_gamma), grad_tol) << "dlog_gamma";
  EXPECT_LT(MaxRelError(got.grads.ds0, ref.grads.ds0), grad_tol) << "ds0";
  if (std::getenv("DELTANET_TEST_VERBOSE") != nullptr) {
    std::cerr << label << " o=" << MaxRelError(got.fwd.o, ref.fwd.o)
              << " s=" << MaxRelError(got.fwd.s_final, ref.fwd.s_final)
              << " dq=" << MaxRelError(got.grads.dq, ref.grads.dq)
              << " dk=" << MaxRelError(got.grads.dk, ref.grads.dk)
              << " dv=" << MaxRelError(got.grads.dv, ref.grads.dv)
              << " dbeta=" << MaxRelError(got.grads.dbeta, ref.grads.dbeta)
              << " dlg=" << MaxRelError(got.grads.dlog_gamma, ref.grads.dlog_gamma)
              << " ds0=" << MaxRelError(got.grads.ds0, ref.grads.ds0) << "\n";
  }
}

TEST(DeltaNetChunked, MatchesReferenceOverLengthsAndHeadDims) {
  uint64_t seed = 100;
  for (int64_t dim : {16, 64, 128}) {
    for (int64_t t : {1, 63, 64, 65, 1000}) {
      // Gated, with s0 and ds_final (B = 2 so the batch indexing is exercised on short T).
      Config gated{.batch = t < 1000 ? 2 : 1,
                   .seq_len = t,
                   .heads = 1,
                   .head_dim = dim,
                   .gated = true,
                   .initial_state = true,
                   .final_state_grad = true,
                   .seed = ++seed};
      ExpectChunkedMatchesReference(
          RandomProblem(gated),
          "gated+s0+ds_final T=" + std::to_string(t) + " D=" + std::to_string(dim));
      // Plain DeltaNet from a zero state, no ds_final.
      Config plain{
          .batch = 1, .seq_len = t, .heads = 1, .head_dim = dim, .gated = false, .seed = ++seed};
      ExpectChunkedMatchesReference(RandomProblem(plain),
                                    "plain T=" + std::to_string(t) + " D=" + std::to_string(dim));
    }
  }
}

TEST(DeltaNetChunked, MatchesReferenceVarlen) {
  // Empty sequences (first, middle, last), T < 64, T = 64, T not a multiple of 64.
  const std::vector<int32_t> lens = {0, 1, 63, 0, 64, 65, 200, 0};
  for (int64_t dim : {16, 64}) {
    for (bool state : {false, true}) {
      for (bool gated : {false, true}) {
        Config c{.heads = 2,
                 .head_dim = dim,
                 .gated = gated,
                 .initial_state = state,
                 .final_state_grad = state,
                 .seq_lens = lens,
                 .seed = uint64_t(7 + dim + 2 * state + gated)};
        ExpectChunkedMatchesReference(RandomProblem(c), "varlen D=" + std::to_string(dim) +
                                                            " state=" + std::to_string(state) +
                                                            " gated=" + std::to_string(gated));
      }
    }
  }
}

TEST(DeltaNetChunked, OtherChunkSizesAndHeads) {
  Config c{.batch = 2,
           .seq_len = 130,
           .heads = 3,
           .head_dim = 16,
           .gated = true,
           .initial_state = true,
           .final_state_grad = true,
           .seed = 5};
  const Problem p = RandomProblem(c);
  for (int chunk : {1, 16, 37, 64, 256}) {
    ExpectChunkedMatchesReference(p, "chunk=" + std::to_string(chunk), chunk);
  }
  Config odd{.batch = 1,
             .seq_len = 70,
             .heads = 2,
             .head_dim = 5,
             .gated = true,
             .initial_state = true,
             .final_state_grad = true,
             .seed = 6};
  ExpectChunkedMatchesReference(RandomProblem(odd), "D=5");
}

TEST(DeltaNetChunked, ThreadCountDoesNotChangeResults) {
  Config c{.batch = 2,
           .seq_len = 100,
           .heads = 3,
           .head_dim = 16,
           .initial_state = true,
           .final_state_grad = true,
           .seed = 9};
  const Problem p = RandomProblem(c);
  const RunResult one = RunBoth(p, Opts(DeltaImpl::kChunked, 1));
  const RunResult four = RunBoth(p, Opts(DeltaImpl::kChunked, 4));
  EXPECT_EQ(one.fwd.o, four.fwd.o);
  EXPECT_EQ(one.fwd.s_final, four.fwd.s_final);
  EXPECT_EQ(one.grads.dk, four.grads.dk);
  EXPECT_EQ(one.grads.dlog_gamma, four.grads.dlog_gamma);
  EXPECT_EQ(one.grads.ds0, four.grads.ds0);
}

// s_final may alias s0 and ds0 may alias ds_final (in-place state carry).
TEST(DeltaNet, StateBuffersMayAlias) {
  const Problem p = RandomProblem({.batch = 2,
                                   .seq_len = 70,
                                   .heads = 2,
                                   .head_dim = 8,
                                   .initial_state = true,
                                   .final_state_grad = true,
                                   .seed = 13});
  for (DeltaImpl impl : {DeltaImpl::kReference, DeltaImpl::kChunked}) {
    SCOPED_TRACE(std::string(DeltaImplName(impl)));
    const RunResult expected = RunBoth(p, Opts(impl));
    std::vector<float> state = p.s0, o(p.q.size());
    DeltaInputs in = p.Inputs();
    in.s0 = state;
    DeltaForwardOutputs out{.o = o, .s_final = state};
    ASSERT_TRUE(DeltaNetForward(in, Opts(impl), &out).ok());
    EXPECT_EQ(o, expected.fwd.o);
    EXPECT_EQ(state, expected.fwd.s_final);

    std::vector<float> ds = p.ds_final, dq(p.q.size()), dk(dq), dv(dq), db(p.beta.size()), dlg(db);
    DeltaGradients grads{.dq = dq, .dk = dk, .dv = dv, .dbeta = db, .dlog_gamma = dlg, .ds0 = ds};
    ASSERT_TRUE(
        DeltaNetBackward(p.Inputs(), {.d_o = p.d_o, .ds_final = ds}, Opts(impl), &grads).ok());
    EXPECT_EQ(ds, expected.grads.ds0);
    EXPECT_EQ(dk, expected.grads.dk);
    EXPECT_EQ(dlg, expected.grads.dlog_gamma);
  }
}

// Gated DeltaNet with log_gamma == 0 is DeltaNet: g = exp(0) = 1 exactly, so both
// implementations give bitwise equal results.
TEST(DeltaNet, GatedWithZeroGatesEqualsDeltaNet) {
  Config c{.batch = 2,
           .seq_len = 77,
           .heads = 2,
           .head_dim = 16,
           .gated = false,
           .initial_state = true,
           .final_state_grad = true,
           .seed = 11};
  const Problem plain = RandomProblem(c);
  Problem gated = plain;
  gated.log_gamma.assign(plain.beta.size(), 0.f);
  for (DeltaImpl impl : {DeltaImpl::kReference, DeltaImpl::kChunked}) {
    SCOPED_TRACE(std::string(DeltaImplName(impl)));
    const RunResult a = RunBoth(plain, Opts(impl));
    const RunResult b = RunBoth(gated, Opts(impl));
    EXPECT_EQ(a.fwd.o, b.fwd.o);
    EXPECT_EQ(a.fwd.s_final, b.fwd.s_final);
    EXPECT_EQ(a.grads.dq, b.grads.dq);
    EXPECT_EQ(a.grads.dk, b.grads.dk);
    EXPECT_EQ(a.grads.dv, b.grads.dv);
    EXPECT_EQ(a.grads.dbeta, b.grads.dbeta);
    EXPECT_EQ(a.grads.ds0, b.grads.ds0);
    EXPECT_TRUE(a.grads.dlog_gamma.empty());
    EXPECT_EQ(b.grads.dlog_gamma.size(), gated.beta.size());
  }
}

// The UT transform's sign. The DeltaNet paper's Eq. 10 prints
// T = (I - tril(diag(beta) K K^T, -1))^{-1} diag(beta); the recurrence (its Eq. 7),
// w_r = beta_r (k_r - sum_{i<r} w_i (k_i^T k_r)), reads W = diag(beta) K - tril(diag(beta) K K^T,
// -1) W in matrix form, i.e. T = (I + tril(diag(beta) K K^T, -1))^{-1} diag(beta). This checks, in
// float64, that the PLUS sign reproduces the recurrence and the product of the transitions,
// prod_t (I - beta_t k_t k_t^T) = I - W^T K, and that the printed minus sign does not.
TEST(DeltaNetMath, UtTransformSign) {
  constexpr int n = 6, dim = 4;
  std::mt19937_64 rng(77);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.1, 0.9);
  std::vector<double> k(n * dim), beta(n);
  for (int r = 0; r < n; ++r) {
    double norm = 0;
    for (int j = 0; j < dim; ++j) norm += std::pow(k[r * dim + j] = normal(rng), 2);
    for (int j = 0; j < dim; ++j) k[r * dim + j] /= std::sqrt(norm);
    beta[r] = uniform(rng);
  }
  auto dot = [&](int a, int b) {
    double sum = 0;
    for (int j = 0; j < dim; ++j) sum += k[a * dim + j] * k[b * dim + j];
    return sum;
  };
  // Eq. 7 recurrence.
  std::vector<double> w_rec(n * dim);
  for (int r = 0; r < n; ++r) {
    for (int j = 0; j < dim; ++j) {
      double x = k[r * dim + j];
      for (int i = 0; i < r; ++i) x -= w_rec[i * dim + j] * dot(i, r);
      w_rec[r * dim + j] = beta[r] * x;
    }
  }
  // W = T K with T = (I + sign * tril(diag(beta) K K^T, -1))^{-1} diag(beta), by substitution.
  auto ut_w = [&](double sign) {
    std::vector<double> w(n * dim);
    for (int r = 0; r < n; ++r) {
      for (int j = 0; j < dim; ++j) {
        double x = beta[r] * k[r * dim + j];
        for (int i = 0; i < r; ++i) x -= sign * beta[r] * dot(r, i) * w[i * dim + j];
        w[r * dim + j] = x;
      }
    }
    return w;
  };
  const std::vector<double> w_plus = ut_w(+1.0), w_minus = ut_w(-1.0);
  double err_plus = 0, err_minus = 0;
  for (int i = 0; i < n * dim; ++i) {
    err_plus = std::max(err_plus, std::abs(w_plus[i] - w_rec[i]));
    err_minus = std::max(err_minus, std::abs(w_minus[i] - w_rec[i]));
  }
  EXPECT_LT(err_plus, 1e-14);
  EXPECT_GT(err_minus, 1e-2);
  // prod_t (I - beta_t k_t k_t^T) (left to right, as S_t = S_{t-1} (I - beta_t k_t k_t^T)).
  std::vector<double> prod(dim * dim, 0.0), next(dim * dim);
  for (int j = 0; j < dim; ++j) prod[j * dim + j] = 1.0;
  for (int t = 0; t < n; ++t) {
    for (int a = 0; a < dim; ++a) {
      double pk = 0;
      for (int c = 0; c < dim; ++c) pk += prod[a * dim + c] * k[t * dim + c];
      for (int b = 0; b < dim; ++b)
        next[a * dim + b] = prod[a * dim + b] - beta[t] * pk * k[t * dim + b];
    }
    prod = next;
  }
  for (int a = 0; a < dim; ++a) {
    for (int b = 0; b < dim; ++b) {
      double wk = a == b ? 1.0 : 0.0;
      for (int r = 0; r < n; ++r) wk -= w_plus[r * dim + a] * k[r * dim + b];
      EXPECT_NEAR(prod[a * dim + b], wk, 1e-14) << a << "," << b;
    }
  }
}

// ----- Reference gradients vs float64 central finite differences -----

// L = <w_o, o> + <w_s, s_final>; its gradient is the backward with d_o = w_o, ds_final = w_s.
double Loss(const Delta64& p, const std::vector<double>& w_o, const std::vector<double>& w_s) {
  const Forward64 f = ReferenceForward64(p);
  double l = 0;
  for (size_t i = 0; i < f.o.size(); ++i) l += w_o[i] * f.o[i];
  for (size_t i = 0; i < f.s_final.size(); ++i) l += w_s[i] * f.s_final[i];
  return l;
}

void CheckFiniteDifferences(const Problem& problem) {
  Delta64 p = Delta64::FromInputs(problem.Inputs());
  if (p.s0.empty()) p.s0.assign(p.StateElems(), 0.0);  // differentiate at s0 = 0 as well
  std::mt19937_64 rng(3);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> w_o(p.q.size()), w_s(p.StateElems());
  for (double& w : w_o) w = normal(rng);
  for (double& w : w_s) w = normal(rng);
  const Gradients64 g = ReferenceBackward64(p, w_o, w_s);
  // h = 1e-5: truncation error h^2 |L'''| / 6 ~ 1e-11 and rounding error ~ 1e-16 |L| / h ~ 1e-10
  // for these O(1)..O(10) losses, so 1e-7 (abs + rel) is tight yet safe.
  constexpr double kH = 1e-5, kTol = 1e-7;
  auto check = [&](const char* name, std::vector<double>& x, const std::vector<double>& grad) {
    ASSERT_EQ(x.size(), grad.size()) << name;
    for (size_t i = 0; i < x.size(); ++i) {
      const double saved = x[i];
      x[i] = saved + kH;
      const double up = Loss(p, w_o, w_s);
      x[i] = saved - kH;
      const double down = Loss(p, w_o, w_s);
      x[i] = saved;
      const double fd = (up - down) / (2 * kH);
      EXPECT_NEAR(grad[i], fd, kTol * (1 + std::abs(fd))) << name << "[" << i << "]";
    }
  };
  check("q", p.q, g.dq);
  check("k", p.k, g.dk);
  check("v", p.v, g.dv);
  check("beta", p.beta, g.dbeta);
  if (!p.log_gamma.empty()) check("log_gamma", p.log_gamma, g.dlog_gamma);
  check("s0", p.s0, g.ds0);
}

TEST(DeltaNetReference, GradientsMatchFiniteDifferences) {
  for (bool gated : {false, true}) {
    SCOPED_TRACE(gated ? "gated" : "plain");
    CheckFiniteDifferences(RandomProblem({.batch = 2,
                                          .seq_len = 8,
                                          .heads = 2,
                                          .head_dim = 3,
                                          .gated = gated,
                                          .initial_state = true,
                                          .seed = 21}));
    CheckFiniteDifferences(RandomProblem({.batch = 1,
                                          .seq_len = 5,
                                          .heads = 1,
                                          .head_dim = 4,
                                          .gated = gated,
                                          .initial_state = false,
                                          .seed = 22}));
  }
}

TEST(DeltaNetReference, GradientsMatchFiniteDifferencesVarlen) {
  // Lengths 3, 0, 5 (T = 8), so the empty sequence's ds0 must equal its ds_final.
  CheckFiniteDifferences(RandomProblem({.heads = 2,
                                        .head_dim = 4,
                                        .gated = true,
                                        .initial_state = true,
                                        .seq_lens = {3, 0, 5},
                                        .seed = 23}));
}

// Large log_gamma magnitudes (strong forgetting) and beta near 0/1 stay finite and match.
TEST(DeltaNetChunked, StrongDecay) {
  Problem p = RandomProblem({.batch = 1,
                             .seq_len = 130,
                             .heads = 1,
                             .head_dim = 16,
                             .initial_state = true,
                             .final_state_grad = true,
                             .seed = 31});
  for (size_t i = 0; i < p.log_gamma.size(); ++i) p.log_gamma[i] = i % 7 == 0 ? -30.f : -2.f;
  ExpectChunkedMatchesReference(p, "strong decay");
}

// beta in (0, 2) (the negative-eigenvalue variant: I - beta k k^T has eigenvalue 1 - beta in
// (-1, 1), still non-expansive) and D = 1. With D = 1 every token contracts the whole state by
// g (1 - beta), so the chunk form's
//   dS_0 = g_n dS + sum_r g_r do_r q_r^T - sum_r beta_r g_r dr_r k_r^T
// is a sum of ~64 O(1) terms that cancel to O(0.3): its float32 error relative to the result
// is ~5e-6 (1e-7 relative to the terms). Hence 4x the gradient bound for that degenerate shape.
TEST(DeltaNetChunked, BetaUpToTwoAndHeadDimOne) {
  Problem p = RandomProblem({.batch = 1,
                             .seq_len = 200,
                             .heads = 2,
                             .head_dim = 32,
                             .initial_state = true,
                             .final_state_grad = true,
                             .seed = 33});
  for (float& b : p.beta) b *= 2.f;
  ExpectChunkedMatchesReference(p, "beta in (0, 2)");
  ExpectChunkedMatchesReference(RandomProblem({.batch = 2,
                                               .seq_len = 100,
                                               .heads = 1,
                                               .head_dim = 1,
                                               .initial_state = true,
                                               .final_state_grad = true,
                                               .seed = 34}),
                                "D=1", /*chunk_size=*/64, /*grad_tol_scale=*/4.0);
}

// ----- Validation -----

void ExpectInvalid(const absl::Status& s, const std::string& what) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(what)) << s;
}

TEST(DeltaNetValidation, RejectsBadInputs) {
  const Problem good = RandomProblem(
      {.batch = 2, .seq_len = 5, .heads = 2, .head_dim = 4, .initial_state = true, .seed = 41});
  const DeltaOptions opts = Opts(DeltaImpl::kChunked);
  ASSERT_TRUE(DeltaNetForwardAlloc(good.Inputs(), opts).ok());
  using Tensor = std::vector<float> Problem::*;
  const std::vector<std::pair<std::string, Tensor>> tensors = {{"q", &Problem::q},
                                                               {"k", &Problem::k},
                                                               {"v", &Problem::v},
                                                               {"beta", &Problem::beta},
                                                               {"log_gamma", &Problem::log_gamma},
                                                               {"s0", &Problem::s0}};
  for (const auto& [name, member] : tensors) {
    Problem wrong = good;
    (wrong.*member).pop_back();
    ExpectInvalid(DeltaNetForwardAlloc(wrong.Inputs(), opts).status(), "tensor '" + name + "' has");
    Problem p = good;
    (p.*member)[3] = std::nanf("");
    ExpectInvalid(DeltaNetForwardAlloc(p.Inputs(), opts).status(),
                  "tensor '" + name + "' has a non-finite value (nan) at flat index 3");
    (p.*member)[3] = INFINITY;
    ExpectInvalid(DeltaNetForwardAlloc(p.Inputs(), opts).status(), "'" + name + "'");
  }
  Problem dims = good;
  dims.dims.head_dim = 0;
  ExpectInvalid(DeltaNetForwardAlloc(dims.Inputs(), opts).status(), "D=0");
  DeltaOptions bad_chunk = opts;
  bad_chunk.chunk_size = 0;
  ExpectInvalid(DeltaNetForwardAlloc(good.Inputs(), bad_chunk).status(), "chunk_size");

  // Backward tensors.
  Problem bwd = good;
  bwd.d_o.pop_back();
  ExpectInvalid(DeltaNetBackwardAlloc(bwd.Inputs(), bwd.d_o, opts).status(), "tensor 'do'");
  std::vector<float> ds_final(good.s0.size(), 0.f);
  ds_final[2] = std::nanf("");
  ExpectInvalid(DeltaNetBackwardAlloc(good.Inputs(), good.d_o, opts, true, ds_final).status(),
                "tensor 'ds_final' has a non-finite value (nan) at flat index 2");
  ds_final.pop_back();
  ExpectInvalid(DeltaNetBackwardAlloc(good.Inputs(), good.d_o, opts, true, ds_final).status(),
                "tensor 'ds_final'");
  // dlog_gamma must be absent for ungated DeltaNet, present for gated.
  Problem plain = good;
  plain.log_gamma.clear();
  std::vector<float> dq(good.q.size()), dk(dq), dv(dq), db(good.beta.size()), dlg(db);
  DeltaGradients grads{.dq = dq, .dk = dk, .dv = dv, .dbeta = db, .dlog_gamma = dlg};
  ExpectInvalid(DeltaNetBackward(plain.Inputs(), {.d_o = good.d_o}, opts, &grads), "dlog_gamma");
  grads.dlog_gamma = {};
  ExpectInvalid(DeltaNetBackward(good.Inputs(), {.d_o = good.d_o}, opts, &grads),
                "tensor 'dlog_gamma'");
  // Output sizes.
  std::vector<float> o(good.q.size() - 1);
  DeltaForwardOutputs out{.o = o};
  ExpectInvalid(DeltaNetForward(good.Inputs(), opts, &out), "tensor 'o'");
}

TEST(DeltaNetValidation, RejectsBadOffsets) {
  Problem p = RandomProblem({.heads = 1, .head_dim = 4, .seq_lens = {3, 2}, .seed = 51});
  const DeltaOptions opts = Opts(DeltaImpl::kReference);
  ASSERT_TRUE(DeltaNetForwardAlloc(p.Inputs(), opts).ok());
  for (std::vector<int32_t> cu :
       std::vector<std::vector<int32_t>>{{0, 3, 4}, {1, 3, 5}, {0, 4, 3, 5}, {0}, {0, 3, 6}}) {
    Problem bad = p;
    bad.cu_seqlens = cu;
    ExpectInvalid(DeltaNetForwardAlloc(bad.Inputs(), opts).status(), "cu_seqlens");
  }
  // Varlen needs B == 1.
  Problem batched = RandomProblem({.batch = 2, .seq_len = 5, .head_dim = 4, .seed = 52});
  batched.cu_seqlens = {0, 5};
  ExpectInvalid(DeltaNetForwardAlloc(batched.Inputs(), opts).status(), "batch == 1");
  // s0 is sized by the number of sequences, not the batch.
  Problem s0 = p;
  s0.s0.assign(1 * 4 * 4, 0.f);
  ExpectInvalid(DeltaNetForwardAlloc(s0.Inputs(), opts).status(), "tensor 's0'");
}

TEST(DeltaNetOp, ParsesImplNames) {
  EXPECT_EQ(*ParseDeltaImpl("reference"), DeltaImpl::kReference);
  EXPECT_EQ(*ParseDeltaImpl("chunked"), DeltaImpl::kChunked);
  EXPECT_EQ(*ParseDeltaImpl("cuda"), DeltaImpl::kCuda);
  EXPECT_EQ(ParseDeltaImpl("fast").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DeltaImplName(DeltaImpl::kChunked), "chunked");
}

// Without the CUDA backend linked in (this test links none), impl=cuda is a clear error.
TEST(DeltaNetOp, CudaImplWithoutBackendIsFailedPrecondition) {
  const std::vector<float> x(1 * 2 * 1 * 16, 0.1f), b(2, 0.5f);
  DeltaInputs in{.dims = {1, 2, 1, 16}, .q = x, .k = x, .v = x, .beta = b};
  DeltaOptions opt;
  opt.impl = DeltaImpl::kCuda;
  auto r = DeltaNetForwardAlloc(in, opt);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("deltanet_cuda_register"), std::string::npos);
}

}  // namespace
}  // namespace mesa::kernels::deltanet
