// The chunked float32 CPU implementation against the float64 reference, through the public API.
#include "kernels/mesa/mesa_op.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <string>

#include "gtest/gtest.h"
#include "kernels/mesa/mesa_test_util.h"

namespace mesa::kernels {
namespace {

using testing::MaxRelError;
using testing::Problem;
using testing::ProblemConfig;
using testing::RandomProblem;

struct RunResult {
  MesaForwardResult fwd;
  MesaGradientsResult grads;
};

RunResult RunMesa(const Problem& p, const MesaOptions& options) {
  MesaInputs in = p.Inputs();
  absl::StatusOr<MesaForwardResult> fwd = MesaForwardAlloc(in, options, /*want_final_states=*/true);
  EXPECT_TRUE(fwd.ok()) << fwd.status();
  if (!fwd.ok()) return {};
  absl::StatusOr<MesaGradientsResult> grads = MesaBackwardAlloc(
      in, fwd->q_star, p.d_o, options, /*want_state_grads=*/true, p.dh_final, p.dg_final);
  EXPECT_TRUE(grads.ok()) << grads.status();
  if (!grads.ok()) return {};
  return {std::move(*fwd), std::move(*grads)};
}

// Max relative error of every output and gradient of `actual` against `expected`.
std::map<std::string, double> Compare(const RunResult& actual, const RunResult& expected) {
  return {
      {"o", MaxRelError(actual.fwd.o, expected.fwd.o)},
      {"q_star", MaxRelError(actual.fwd.q_star, expected.fwd.q_star)},
      {"h_final", MaxRelError(actual.fwd.h_final, expected.fwd.h_final)},
      {"g_final", MaxRelError(actual.fwd.g_final, expected.fwd.g_final)},
      {"dq", MaxRelError(actual.grads.dq, expected.grads.dq)},
      {"dk", MaxRelError(actual.grads.dk, expected.grads.dk)},
      {"dv", MaxRelError(actual.grads.dv, expected.grads.dv)},
      {"dlog_gamma", MaxRelError(actual.grads.dlog_gamma, expected.grads.dlog_gamma)},
      {"dbeta", MaxRelError(actual.grads.dbeta, expected.grads.dbeta)},
      {"dlambda", MaxRelError(actual.grads.dlambda, expected.grads.dlambda)},
      {"dh0", MaxRelError(actual.grads.dh0, expected.grads.dh0)},
      {"dg0", MaxRelError(actual.grads.dg0, expected.grads.dg0)},
  };
}

void ExpectAllBelow(const std::map<std::string, double>& errors, double tolerance,
                    const std::string& label) {
  std::string line = label + ":";
  for (const auto& [name, error] : errors) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), " %s=%.1e", name.c_str(), error);
    line += buf;
    EXPECT_LT(error, tolerance) << label << " " << name;
  }
  std::printf("%s\n", line.c_str());
}

MesaOptions Chunked(int steps, float tol = 0.f) {
  return MesaOptions{.impl = MesaImpl::kChunked, .cg = {steps, tol}, .num_threads = 2};
}
MesaOptions ReferenceCg(int steps, float tol = 0.f) {
  return MesaOptions{
      .impl = MesaImpl::kReference, .cg = {steps, tol}, .reference_solver = ReferenceSolver::kCg};
}
MesaOptions ReferenceExact() {
  return MesaOptions{
      .impl = MesaImpl::kReference, .cg = {30, 0.f}, .reference_solver = ReferenceSolver::kExact};
}

struct ShapeCase {
  int64_t b, t, h, d;
  bool initial_state;
};

class ChunkedVsReferenceCg : public ::testing::TestWithParam<ShapeCase> {};

// Fixed 30 steps: the float32 chunked CG against the float64 CG with identical step semantics.
TEST_P(ChunkedVsReferenceCg, ForwardAndAllGradients) {
  const ShapeCase& c = GetParam();
  Problem p = RandomProblem({.batch = c.b,
                             .seq_len = c.t,
                             .heads = c.h,
                             .head_dim = c.d,
                             .initial_state = c.initial_state,
                             .seed = uint64_t(c.t * 131 + c.d)});
  RunResult chunked = RunMesa(p, Chunked(30));
  RunResult reference = RunMesa(p, ReferenceCg(30));
  EXPECT_DOUBLE_EQ(chunked.fwd.cg_steps_mean, 30.0);
  ExpectAllBelow(Compare(chunked, reference), 1e-3,
                 "B" + std::to_string(c.b) + " T" + std::to_string(c.t) + " H" +
                     std::to_string(c.h) + " D" + std::to_string(c.d));
}

INSTANTIATE_TEST_SUITE_P(Shapes, ChunkedVsReferenceCg,
                         ::testing::Values(ShapeCase{1, 1, 1, 16, false},   // single token
                                           ShapeCase{2, 37, 3, 16, true},   // T < chunk, B,H > 1
                                           ShapeCase{1, 64, 1, 32, false},  // exactly one chunk
                                           ShapeCase{1, 150, 2, 64,
                                                     true},  // T not a multiple of 64
                                           ShapeCase{2, 70, 1, 128, true}));

struct RegimeCase {
  const char* name;
  ProblemConfig config;
  double tolerance;
};

class ChunkedVsReferenceCgRegimes : public ::testing::TestWithParam<RegimeCase> {};

TEST_P(ChunkedVsReferenceCgRegimes, ForwardAndAllGradients) {
  const RegimeCase& c = GetParam();
  Problem p = RandomProblem(c.config);
  ExpectAllBelow(Compare(RunMesa(p, Chunked(30)), RunMesa(p, ReferenceCg(30))), c.tolerance,
                 c.name);
}

INSTANTIATE_TEST_SUITE_P(Regimes, ChunkedVsReferenceCgRegimes,
                         ::testing::Values(RegimeCase{"gates near 1, lambda at floor",
                                                      {.batch = 1,
                                                       .seq_len = 200,
                                                       .heads = 2,
                                                       .head_dim = 32,
                                                       .log_gamma_min = -0.01f,
                                                       .log_gamma_max = -0.0001f,
                                                       .lambda_min = 0.25f,
                                                       .lambda_max = 0.26f,
                                                       .initial_state = true,
                                                       .seed = 11},
                                                      1e-3},
                                           RegimeCase{"gates near 0",
                                                      {.batch = 2,
                                                       .seq_len = 90,
                                                       .heads = 1,
                                                       .head_dim = 32,
                                                       .log_gamma_min = -20.f,
                                                       .log_gamma_max = -5.f,
                                                       .initial_state = true,
                                                       .seed = 12},
                                                      1e-3},
                                           RegimeCase{"long sequence",
                                                      {.batch = 1,
                                                       .seq_len = 1000,
                                                       .heads = 1,
                                                       .head_dim = 16,
                                                       .log_gamma_min = -0.05f,
                                                       .log_gamma_max = -0.0005f,
                                                       .lambda_min = 0.25f,
                                                       .lambda_max = 0.5f,
                                                       .seed = 13},
                                                      1e-3}));

// Against the exact (Cholesky) oracle where CG has converged: D = 16 with 40 >= D steps, and
// D = 128 with strong regularisation.
TEST(ChunkedVsExactReference, ConvergedCgMatchesExactSolve) {
  Problem small = RandomProblem(
      {.batch = 2, .seq_len = 100, .heads = 2, .head_dim = 16, .initial_state = true, .seed = 21});
  ExpectAllBelow(Compare(RunMesa(small, Chunked(40)), RunMesa(small, ReferenceExact())), 1e-3,
                 "D16 exact");
  Problem wide = RandomProblem({.batch = 1,
                                .seq_len = 80,
                                .heads = 1,
                                .head_dim = 128,
                                .lambda_min = 2.f,
                                .lambda_max = 4.f,
                                .seed = 22});
  ExpectAllBelow(Compare(RunMesa(wide, Chunked(30)), RunMesa(wide, ReferenceExact())), 1e-3,
                 "D128 exact");
}

TEST(ChunkedGla, ZeroStepsIsGatedLinearAttention) {
  Problem p = RandomProblem(
      {.batch = 1, .seq_len = 100, .heads = 2, .head_dim = 32, .initial_state = true, .seed = 23});
  RunResult chunked = RunMesa(p, Chunked(0));
  EXPECT_EQ(chunked.fwd.q_star, p.q);
  EXPECT_EQ(chunked.fwd.cg_steps_mean, 0.0);
  for (float g : chunked.grads.dlambda) EXPECT_EQ(g, 0.f);
  ExpectAllBelow(Compare(chunked, RunMesa(p, ReferenceCg(0))), 1e-4, "GLA");
}

TEST(ChunkedTolerance, EasyInputsTakeFewerStepsAndAgree) {
  const ProblemConfig easy{.batch = 1,
                           .seq_len = 150,
                           .heads = 2,
                           .head_dim = 64,
                           .lambda_min = 5.f,
                           .lambda_max = 10.f,
                           .seed = 31};
  const ProblemConfig hard{.batch = 1,
                           .seq_len = 150,
                           .heads = 2,
                           .head_dim = 64,
                           .log_gamma_min = -0.01f,
                           .log_gamma_max = -0.0001f,
                           .lambda_min = 0.25f,
                           .lambda_max = 0.3f,
                           .seed = 31};
  Problem easy_p = RandomProblem(easy), hard_p = RandomProblem(hard);
  RunResult easy_tol = RunMesa(easy_p, Chunked(30, 1e-4f));
  RunResult hard_tol = RunMesa(hard_p, Chunked(30, 1e-4f));
  RunResult easy_ref = RunMesa(easy_p, ReferenceCg(30, 1e-4f));
  std::printf(
      "tolerance 1e-4: easy %.2f steps (reference CG %.2f), hard %.2f steps; backward easy %.2f\n",
      easy_tol.fwd.cg_steps_mean, easy_ref.fwd.cg_steps_mean, hard_tol.fwd.cg_steps_mean,
      easy_tol.grads.cg_steps_mean);
  EXPECT_LT(easy_tol.fwd.cg_steps_mean, 8.0);
  EXPECT_GT(easy_tol.fwd.cg_steps_mean, 1.0);
  EXPECT_LT(easy_tol.grads.cg_steps_mean, 8.0);
  EXPECT_GT(hard_tol.fwd.cg_steps_mean, easy_tol.fwd.cg_steps_mean + 2.0);
  EXPECT_NEAR(easy_tol.fwd.cg_steps_mean, easy_ref.fwd.cg_steps_mean, 0.1);
  // Same answer as the exact solve within the tolerance's accuracy.
  const RunResult exact = RunMesa(easy_p, ReferenceExact());
  EXPECT_LT(MaxRelError(easy_tol.fwd.o, exact.fwd.o), 1e-4);
  EXPECT_LT(MaxRelError(easy_tol.grads.dq, exact.grads.dq), 1e-4);
  EXPECT_LT(MaxRelError(easy_tol.grads.dk, exact.grads.dk), 1e-4);
  // Fixed 30 steps on the same input agrees with tolerance mode to the tolerance.
  const RunResult easy_fixed = RunMesa(easy_p, Chunked(30));
  EXPECT_LT(MaxRelError(easy_tol.fwd.o, easy_fixed.fwd.o), 1e-4);
}

// The forward with its per-token CG steps, which MesaForwardAlloc fills only when asked.
absl::StatusOr<MesaForwardResult> ForwardWithTokenSteps(const MesaInputs& in,
                                                        const MesaOptions& options) {
  return MesaForwardAlloc(in, options, /*want_final_states=*/false, /*want_token_cg_steps=*/true);
}

// Per-token counts are opt-in: not asked, the result holds none (nothing allocated, nothing
// written); asked, every token has its count, and the forward is otherwise the same to the bit.
TEST(ChunkedTolerance, PerTokenCgStepsOnlyWhenAsked) {
  Problem p = RandomProblem({.heads = 2, .head_dim = 16, .seq_lens = {5, 70}, .seed = 5});
  MesaInputs in = p.Inputs();
  for (const MesaOptions& options : {Chunked(30, 1e-3f), ReferenceCg(30, 1e-3f)}) {
    absl::StatusOr<MesaForwardResult> plain = MesaForwardAlloc(in, options);
    absl::StatusOr<MesaForwardResult> counted = ForwardWithTokenSteps(in, options);
    ASSERT_TRUE(plain.ok() && counted.ok());
    EXPECT_TRUE(plain->token_cg_steps.empty());
    ASSERT_EQ(counted->token_cg_steps.size(), static_cast<size_t>(p.dims.GateElems()));
    int64_t sum = 0;
    for (int32_t steps : counted->token_cg_steps) sum += steps;
    EXPECT_GT(sum, 0);
    EXPECT_DOUBLE_EQ(static_cast<double>(sum) / counted->token_cg_steps.size(),
                     counted->cg_steps_mean);
    EXPECT_EQ(plain->o, counted->o);
    EXPECT_EQ(plain->cg_steps_mean, counted->cg_steps_mean);
  }
}

// Per-token CG counts (evaluation's per-position curves): the float32 chunked CG's counts against
// the float64 CG's, token by token, and their mean against the op's cg_steps_mean.
TEST(ChunkedTolerance, PerTokenCgStepsMatchReferenceSolves) {
  Problem p = RandomProblem({.batch = 2,
                             .seq_len = 150,
                             .heads = 2,
                             .head_dim = 32,
                             .log_gamma_min = -0.05f,
                             .log_gamma_max = -0.001f,
                             .lambda_min = 0.3f,
                             .lambda_max = 3.f,
                             .initial_state = true,
                             .seed = 77});
  MesaInputs in = p.Inputs();
  absl::StatusOr<MesaForwardResult> chunked = ForwardWithTokenSteps(in, Chunked(30, 1e-3f));
  absl::StatusOr<MesaForwardResult> reference = ForwardWithTokenSteps(in, ReferenceCg(30, 1e-3f));
  ASSERT_TRUE(chunked.ok()) << chunked.status();
  ASSERT_TRUE(reference.ok()) << reference.status();
  const size_t n = static_cast<size_t>(p.dims.GateElems());
  ASSERT_EQ(chunked->token_cg_steps.size(), n);
  int64_t sum = 0, ref_sum = 0, differ = 0, lo = 1000, hi = 0;
  for (size_t i = 0; i < n; ++i) {
    const int32_t a = chunked->token_cg_steps[i], b = reference->token_cg_steps[i];
    sum += a;
    ref_sum += b;
    differ += a != b;
    lo = std::min<int64_t>(lo, b);
    hi = std::max<int64_t>(hi, b);
    // float32 vs float64 may cross the tolerance one step apart, never more.
    EXPECT_LE(std::abs(a - b), 1) << "token " << i;
  }
  std::printf("per-token CG steps: %lld..%lld (reference), %lld of %zu differ by one\n",
              static_cast<long long>(lo), static_cast<long long>(hi),
              static_cast<long long>(differ), n);
  EXPECT_LT(differ, static_cast<int64_t>(n) / 20);
  EXPECT_GT(hi, lo + 2);  // the counts vary along the sequence: the test can see a wrong token
  EXPECT_DOUBLE_EQ(static_cast<double>(sum) / n, chunked->cg_steps_mean);
  EXPECT_DOUBLE_EQ(static_cast<double>(ref_sum) / n, reference->cg_steps_mean);
  // Fixed steps: every token takes them all; GLA (0 steps) and exact solves take none.
  absl::StatusOr<MesaForwardResult> fixed = ForwardWithTokenSteps(in, Chunked(7));
  absl::StatusOr<MesaForwardResult> gla = ForwardWithTokenSteps(in, Chunked(0));
  absl::StatusOr<MesaForwardResult> exact = ForwardWithTokenSteps(in, ReferenceExact());
  ASSERT_TRUE(fixed.ok() && gla.ok() && exact.ok());
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(fixed->token_cg_steps[i], 7) << i;
    ASSERT_EQ(gla->token_cg_steps[i], 0) << i;
    ASSERT_EQ(exact->token_cg_steps[i], 0) << i;
  }
}

// Varlen packing writes each document's counts at its own tokens.
TEST(ChunkedTolerance, PerTokenCgStepsVarlen) {
  Problem p = RandomProblem({.heads = 2, .head_dim = 16, .seq_lens = {5, 70, 0, 130}, .seed = 9});
  MesaInputs in = p.Inputs();
  absl::StatusOr<MesaForwardResult> chunked = ForwardWithTokenSteps(in, Chunked(30, 1e-3f));
  absl::StatusOr<MesaForwardResult> reference = ForwardWithTokenSteps(in, ReferenceCg(30, 1e-3f));
  ASSERT_TRUE(chunked.ok() && reference.ok());
  for (size_t i = 0; i < chunked->token_cg_steps.size(); ++i) {
    EXPECT_LE(std::abs(chunked->token_cg_steps[i] - reference->token_cg_steps[i]), 1) << i;
    EXPECT_GT(chunked->token_cg_steps[i], 0) << i;
  }
}

// Packed documents must not share state: packing equals running each document alone.
TEST(ChunkedVarlen, PackingEqualsSeparateRuns) {
  const std::vector<int32_t> lens = {5, 70, 0, 130, 1};
  Problem packed = RandomProblem(
      {.heads = 2, .head_dim = 16, .initial_state = true, .seq_lens = lens, .seed = 41});
  const RunResult all = RunMesa(packed, Chunked(30));
  const int64_t h = packed.dims.heads, d = packed.dims.head_dim, state = h * d * d;
  std::vector<double> dlambda_sum(h * d, 0.0);
  for (size_t s = 0; s < lens.size(); ++s) {
    if (lens[s] == 0) {  // empty document: final state = initial state, dh0 = dh_final
      for (int64_t i = 0; i < state; ++i) {
        EXPECT_EQ(all.fwd.g_final[s * state + i], packed.g0[s * state + i]);
        EXPECT_EQ(all.grads.dg0[s * state + i], packed.dg_final[s * state + i]);
      }
      continue;
    }
    const int64_t begin = packed.cu_seqlens[s], end = packed.cu_seqlens[s + 1];
    Problem one;
    one.dims = {1, end - begin, h, d};
    auto tokens = [&](const std::vector<float>& x, int64_t per_token) {
      return std::vector<float>(x.begin() + begin * per_token, x.begin() + end * per_token);
    };
    auto states = [&](const std::vector<float>& x) {
      return std::vector<float>(x.begin() + s * state, x.begin() + (s + 1) * state);
    };
    one.q = tokens(packed.q, h * d);
    one.k = tokens(packed.k, h * d);
    one.v = tokens(packed.v, h * d);
    one.d_o = tokens(packed.d_o, h * d);
    one.log_gamma = tokens(packed.log_gamma, h);
    one.beta = tokens(packed.beta, h);
    one.lambda = packed.lambda;
    one.h0 = states(packed.h0);
    one.g0 = states(packed.g0);
    one.dh_final = states(packed.dh_final);
    one.dg_final = states(packed.dg_final);
    const RunResult alone = RunMesa(one, Chunked(30));
    const std::string label = "document " + std::to_string(s);
    EXPECT_LT(MaxRelError(tokens(all.fwd.o, h * d), alone.fwd.o), 1e-6) << label;
    EXPECT_LT(MaxRelError(tokens(all.grads.dq, h * d), alone.grads.dq), 1e-6) << label;
    EXPECT_LT(MaxRelError(tokens(all.grads.dk, h * d), alone.grads.dk), 1e-6) << label;
    EXPECT_LT(MaxRelError(tokens(all.grads.dv, h * d), alone.grads.dv), 1e-6) << label;
    EXPECT_LT(MaxRelError(tokens(all.grads.dlog_gamma, h), alone.grads.dlog_gamma), 1e-6) << label;
    EXPECT_LT(MaxRelError(tokens(all.grads.dbeta, h), alone.grads.dbeta), 1e-6) << label;
    EXPECT_LT(MaxRelError(states(all.fwd.h_final), alone.fwd.h_final), 1e-6) << label;
    EXPECT_LT(MaxRelError(states(all.fwd.g_final), alone.fwd.g_final), 1e-6) << label;
    EXPECT_LT(MaxRelError(states(all.grads.dh0), alone.grads.dh0), 1e-6) << label;
    EXPECT_LT(MaxRelError(states(all.grads.dg0), alone.grads.dg0), 1e-6) << label;
    for (int64_t i = 0; i < h * d; ++i) dlambda_sum[i] += alone.grads.dlambda[i];
  }
  std::vector<float> dlambda_sum_f(dlambda_sum.begin(), dlambda_sum.end());
  EXPECT_LT(MaxRelError(all.grads.dlambda, dlambda_sum_f), 1e-5);
  // And the packed chunked run matches the packed reference.
  ExpectAllBelow(Compare(all, RunMesa(packed, ReferenceCg(30))), 2e-3, "varlen vs reference");
}

TEST(ChunkedThreads, ResultIndependentOfThreadCount) {
  Problem p = RandomProblem({.batch = 2, .seq_len = 70, .heads = 3, .head_dim = 16, .seed = 51});
  MesaOptions one = Chunked(30), two = Chunked(30);
  one.num_threads = 1;
  const RunResult a = RunMesa(p, one), b = RunMesa(p, two);
  EXPECT_EQ(a.fwd.o, b.fwd.o);
  EXPECT_EQ(a.grads.dk, b.grads.dk);
  EXPECT_EQ(a.grads.dlambda, b.grads.dlambda);
}

// --- Validation: clear errors, never a crash. ---
absl::Status ForwardStatus(const Problem& p, const MesaOptions& options) {
  return MesaForwardAlloc(p.Inputs(), options).status();
}

TEST(MesaValidation, RejectsBadInputs) {
  const MesaOptions options = Chunked(30);
  {
    Problem p = RandomProblem({.head_dim = 16});
    p.dims.head_dim = 24;  // sizes no longer matter: the dim check comes first
    absl::Status s = ForwardStatus(p, options);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("head_dim"), std::string::npos) << s;
  }
  {
    Problem p = RandomProblem({.head_dim = 16});
    p.dims.head_dim = 144;
    EXPECT_EQ(ForwardStatus(p, options).code(), absl::StatusCode::kInvalidArgument);
  }
  {
    Problem p = RandomProblem({.head_dim = 16});
    p.lambda[3] = 0.f;
    absl::Status s = ForwardStatus(p, options);
    EXPECT_NE(s.message().find("lambda"), std::string::npos) << s;
  }
  {
    Problem p = RandomProblem({.head_dim = 16});
    p.q[5] = NAN;
    absl::Status s = ForwardStatus(p, options);
    EXPECT_NE(s.message().find("'q'"), std::string::npos) << s;
  }
  {
    Problem p = RandomProblem({.head_dim = 16});
    p.v.pop_back();
    absl::Status s = ForwardStatus(p, options);
    EXPECT_NE(s.message().find("'v'"), std::string::npos) << s;
  }
  {
    Problem p = RandomProblem({.head_dim = 16, .seq_lens = {3, 4}});
    p.cu_seqlens[1] = 9;  // decreasing
    EXPECT_EQ(ForwardStatus(p, options).code(), absl::StatusCode::kInvalidArgument);
  }
  {
    Problem p = RandomProblem({.batch = 2, .head_dim = 16});
    p.cu_seqlens = {0, 16};  // varlen needs B = 1
    absl::Status s = ForwardStatus(p, options);
    EXPECT_NE(s.message().find("batch == 1"), std::string::npos) << s;
  }
  {
    Problem p = RandomProblem({.head_dim = 16});
    MesaOptions bad = options;
    bad.cg.tolerance = -1.f;
    EXPECT_EQ(ForwardStatus(p, bad).code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(MesaValidation, CudaWithoutBackendIsAClearError) {
  Problem p = RandomProblem({.head_dim = 16});
  MesaOptions options;
  options.impl = MesaImpl::kCuda;
  absl::Status s = ForwardStatus(p, options);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("without the CUDA backend"), std::string::npos) << s;
}

}  // namespace
}  // namespace mesa::kernels
