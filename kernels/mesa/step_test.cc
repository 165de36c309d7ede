// The recurrent Mesa step (float32) against the chunkwise forward (float32) and the float64
// reference: token for token, from random initial states, after prefills in uneven pieces, in
// fixed-step, tolerance and GLA (0-step) modes; plus batch independence and input validation.
#include "kernels/mesa/step.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/common/token_slices.h"
#include "kernels/mesa/mesa_op.h"
#include "kernels/mesa/mesa_test_util.h"
#include "kernels/mesa/reference.h"

namespace mesa::kernels::cpu {
namespace {

using testing::BatchRow;
using ::testing::HasSubstr;
using testing::MaxRelError;
using testing::Problem;
using testing::ProblemConfig;
using testing::PutTokenRange;
using testing::RandomProblem;
using testing::TokenRange;

// The inputs of tokens [t0, t1) of p as a problem of its own (no initial state).
Problem SubProblem(const Problem& p, int64_t t0, int64_t t1) {
  const MesaDims& d = p.dims;
  const int64_t hd = d.heads * d.head_dim;
  Problem s;
  s.dims = {d.batch, t1 - t0, d.heads, d.head_dim};
  s.q = TokenRange(p.q, d.batch, d.seq_len, hd, t0, t1);
  s.k = TokenRange(p.k, d.batch, d.seq_len, hd, t0, t1);
  s.v = TokenRange(p.v, d.batch, d.seq_len, hd, t0, t1);
  s.log_gamma = TokenRange(p.log_gamma, d.batch, d.seq_len, d.heads, t0, t1);
  s.beta = TokenRange(p.beta, d.batch, d.seq_len, d.heads, t0, t1);
  s.lambda = p.lambda;
  return s;
}

// Batch row b of p as a problem of its own (with its initial state, if p has one).
Problem RowProblem(const Problem& p, int64_t b) {
  const MesaDims& d = p.dims;
  const int64_t hd = d.heads * d.head_dim, dd = d.head_dim * d.head_dim;
  Problem r;
  r.dims = {1, d.seq_len, d.heads, d.head_dim};
  r.q = BatchRow(p.q, d.seq_len * hd, b);
  r.k = BatchRow(p.k, d.seq_len * hd, b);
  r.v = BatchRow(p.v, d.seq_len * hd, b);
  r.log_gamma = BatchRow(p.log_gamma, d.seq_len * d.heads, b);
  r.beta = BatchRow(p.beta, d.seq_len * d.heads, b);
  r.lambda = p.lambda;
  if (!p.h0.empty()) r.h0 = BatchRow(p.h0, d.heads * dd, b);
  if (!p.g0.empty()) r.g0 = BatchRow(p.g0, d.heads * dd, b);
  return r;
}

// Appends the tokens of `piece` (batch 1) to `packed` (batch 1) along T.
void AppendTokens(const Problem& piece, Problem& packed) {
  ::mesa::kernels::testing::AppendTokens(piece, packed, &Problem::q, &Problem::k, &Problem::v,
                                         &Problem::log_gamma, &Problem::beta);
}

// The step inputs of a one-token problem (its [B, 1, H, D] tensors are [B, H, D]).
MesaStepInputs StepInputs(const Problem& token) {
  return {.dims = {token.dims.batch, token.dims.heads, token.dims.head_dim},
          .q = token.q,
          .k = token.k,
          .v = token.v,
          .log_gamma = token.log_gamma,
          .beta = token.beta,
          .lambda = token.lambda};
}

// A decoding run: outputs of every token in the op's [B, T, H, D] layout, the final state and
// the CG steps of every token ([B, T, H]).
struct Decoded {
  std::vector<float> o, h, g;
  std::vector<int32_t> cg_steps;
  double MeanSteps() const {
    double sum = 0;
    for (int32_t s : cg_steps) sum += s;
    return cg_steps.empty() ? 0.0 : sum / cg_steps.size();
  }
};

// Steps through tokens [t0, t1) of p from the state (h, g), writing into `out` (sized for p).
void StepRange(const Problem& p, const CgOptions& cg, int64_t t0, int64_t t1, Decoded& out) {
  const MesaDims& d = p.dims;
  const MesaStepDims sd{d.batch, d.heads, d.head_dim};
  const int64_t hd = d.heads * d.head_dim;
  std::vector<float> o(sd.TokenElems());
  std::vector<int32_t> steps(sd.GateElems());
  for (int64_t t = t0; t < t1; ++t) {
    const Problem token = SubProblem(p, t, t + 1);
    const MesaStepInputs in = StepInputs(token);
    ASSERT_TRUE(MesaStep(in, cg, {out.h, out.g}, {.o = o, .cg_steps = steps}).ok());
    PutTokenRange(o, d.batch, d.seq_len, hd, t, t + 1, out.o);
    for (int64_t b = 0; b < d.batch; ++b) {
      for (int64_t h = 0; h < d.heads; ++h) {
        out.cg_steps[(b * d.seq_len + t) * d.heads + h] = steps[b * d.heads + h];
      }
    }
  }
}

Decoded Begin(const Problem& p) {
  Decoded run;
  run.o.assign(p.dims.TokenElems(), 0.f);
  run.cg_steps.assign(p.dims.GateElems(), -1);
  const int64_t state = p.dims.batch * p.dims.heads * p.dims.head_dim * p.dims.head_dim;
  run.h = p.h0.empty() ? std::vector<float>(state, 0.f) : p.h0;
  run.g = p.g0.empty() ? std::vector<float>(state, 0.f) : p.g0;
  return run;
}

// Decodes all of p token by token from its initial state.
Decoded StepAll(const Problem& p, const CgOptions& cg) {
  Decoded run = Begin(p);
  StepRange(p, cg, 0, p.dims.seq_len, run);
  return run;
}

// Runs tokens [t0, t1) through the chunked op from the state in `run`, like a prefill.
void PrefillRange(const Problem& p, const CgOptions& cg, int64_t t0, int64_t t1, Decoded& run) {
  Problem piece = SubProblem(p, t0, t1);
  piece.h0 = run.h;
  piece.g0 = run.g;
  absl::StatusOr<MesaForwardResult> fwd =
      MesaForwardAlloc(piece.Inputs(), {.cg = cg}, /*want_final_states=*/true);
  ASSERT_TRUE(fwd.ok()) << fwd.status();
  PutTokenRange(fwd->o, p.dims.batch, p.dims.seq_len, p.dims.heads * p.dims.head_dim, t0, t1,
                run.o);
  run.h = fwd->h_final;
  run.g = fwd->g_final;
}

MesaForwardResult Chunked(const Problem& p, const CgOptions& cg) {
  absl::StatusOr<MesaForwardResult> fwd =
      MesaForwardAlloc(p.Inputs(), {.cg = cg}, /*want_final_states=*/true);
  EXPECT_TRUE(fwd.ok()) << fwd.status();
  return fwd.ok() ? *std::move(fwd) : MesaForwardResult{};
}

ProblemConfig Config(int64_t seq_len, uint64_t seed) {
  return {.batch = 2,
          .seq_len = seq_len,
          .heads = 2,
          .head_dim = 32,
          .initial_state = true,
          .seed = seed};
}

class MesaStepLengthTest : public ::testing::TestWithParam<int64_t> {};

// Fixed steps (few, so that any difference in the iteration shows), GLA, and a tolerance loose
// enough that the stop decisions are not borderline in float32.
TEST_P(MesaStepLengthTest, StepsMatchChunkedForwardFromRandomState) {
  const int64_t seq_len = GetParam();
  const Problem p = RandomProblem(Config(seq_len, 10 + seq_len));
  for (const CgOptions cg : {CgOptions{.max_steps = 6}, CgOptions{.max_steps = 0},
                             CgOptions{.max_steps = 40, .tolerance = 1e-3f}}) {
    SCOPED_TRACE(::testing::PrintToString(cg.max_steps) + " steps, tol " +
                 ::testing::PrintToString(cg.tolerance));
    const Decoded steps = StepAll(p, cg);
    const MesaForwardResult chunked = Chunked(p, cg);
    // Measured: <= 5.3e-7 in every mode. Tolerance mode allows for one token that stops a step
    // apart from the chunked op (its output then differs by about the tolerance).
    const double tol = cg.tolerance > 0 ? 5e-3 : 1e-5;
    EXPECT_LT(MaxRelError(steps.o, chunked.o), tol);
    EXPECT_LT(MaxRelError(steps.h, chunked.h_final), 1e-5);
    EXPECT_LT(MaxRelError(steps.g, chunked.g_final), 1e-5);
    if (cg.tolerance == 0) {
      for (int32_t s : steps.cg_steps) ASSERT_EQ(s, cg.max_steps);
    } else {
      // Same iteration and stopping rule: the step counts agree (measured: exactly); at most
      // one token may stop one step apart where float32 rounding meets the threshold.
      EXPECT_NEAR(steps.MeanSteps(), chunked.cg_steps_mean, 1.0 / p.dims.GateElems() + 1e-12);
    }
  }
}

// The float64 reference running the same CG (ReferenceSolver::kCg) token by token.
TEST_P(MesaStepLengthTest, StepsMatchFloat64ReferenceCg) {
  const int64_t seq_len = GetParam();
  const Problem p = RandomProblem(Config(seq_len, 20 + seq_len));
  const CgOptions cg{.max_steps = 8};
  const Decoded steps = StepAll(p, cg);
  MesaOptions options{
      .impl = MesaImpl::kReference, .cg = cg, .reference_solver = ReferenceSolver::kCg};
  absl::StatusOr<MesaForwardResult> ref = MesaForwardAlloc(p.Inputs(), options, true);
  ASSERT_TRUE(ref.ok()) << ref.status();
  EXPECT_LT(MaxRelError(steps.o, ref->o), 1e-5);
  EXPECT_LT(MaxRelError(steps.h, ref->h_final), 1e-5);
  EXPECT_LT(MaxRelError(steps.g, ref->g_final), 1e-5);
}

// Prefill of T - 1 tokens by the chunked op, then one step, gives the one-shot forward's output
// at position T and its final state (the decoding check, at the operator level).
TEST_P(MesaStepLengthTest, PrefillThenOneStepMatchesOneShotForward) {
  const int64_t seq_len = GetParam();
  const Problem p = RandomProblem(Config(seq_len, 40 + seq_len));
  for (const CgOptions cg : {CgOptions{.max_steps = 6}, CgOptions{.max_steps = 0}}) {
    SCOPED_TRACE(::testing::PrintToString(cg.max_steps) + " steps");
    Decoded run = Begin(p);
    if (seq_len > 1) PrefillRange(p, cg, 0, seq_len - 1, run);
    StepRange(p, cg, seq_len - 1, seq_len, run);
    const MesaForwardResult one_shot = Chunked(p, cg);
    const int64_t hd = p.dims.heads * p.dims.head_dim;
    EXPECT_LT(MaxRelError(TokenRange(run.o, 2, seq_len, hd, seq_len - 1, seq_len),
                          TokenRange(one_shot.o, 2, seq_len, hd, seq_len - 1, seq_len)),
              1e-5);
    EXPECT_LT(MaxRelError(run.h, one_shot.h_final), 1e-5);
    EXPECT_LT(MaxRelError(run.g, one_shot.g_final), 1e-5);
  }
}

INSTANTIATE_TEST_SUITE_P(Lengths, MesaStepLengthTest, ::testing::Values(1, 63, 64, 65, 200));

// Long decoding with long memory (gamma close to 1, so H grows to a few hundred and the solve is
// ill-conditioned): the float32 step stays close to the float64 reference running the same CG
// over 2,000 tokens; rounding errors do not accumulate in the state.
TEST(MesaStepTest, LongDecodingStaysCloseToFloat64) {
  ProblemConfig config = Config(2000, 15);
  config.batch = 1;
  config.heads = 1;
  config.log_gamma_min = -0.01f;
  config.log_gamma_max = -0.001f;
  const Problem p = RandomProblem(config);
  const CgOptions cg{.max_steps = 10};
  const Decoded steps = StepAll(p, cg);
  MesaOptions options{
      .impl = MesaImpl::kReference, .cg = cg, .reference_solver = ReferenceSolver::kCg};
  absl::StatusOr<MesaForwardResult> ref = MesaForwardAlloc(p.Inputs(), options, true);
  ASSERT_TRUE(ref.ok()) << ref.status();
  // Measured: 6.5e-7 (o), 8.1e-7 (h), 5.0e-7 (g).
  EXPECT_LT(MaxRelError(steps.o, ref->o), 1e-5);
  EXPECT_LT(MaxRelError(steps.h, ref->h_final), 1e-5);
  EXPECT_LT(MaxRelError(steps.g, ref->g_final), 1e-5);
}

// Prefill in uneven chunked pieces, decoding steps in between, then decoding to the end, equals
// the one-shot chunked forward: every output and the final state.
TEST(MesaStepTest, UnevenPrefillsAndStepsMatchOneShotForward) {
  const Problem p = RandomProblem(Config(260, 3));
  for (const CgOptions cg : {CgOptions{.max_steps = 10}, CgOptions{.max_steps = 0}}) {
    SCOPED_TRACE(::testing::PrintToString(cg.max_steps) + " steps");
    Decoded run = Begin(p);
    PrefillRange(p, cg, 0, 17, run);
    StepRange(p, cg, 17, 22, run);
    PrefillRange(p, cg, 22, 86, run);
    PrefillRange(p, cg, 86, 136, run);
    StepRange(p, cg, 136, 140, run);
    PrefillRange(p, cg, 140, 211, run);
    StepRange(p, cg, 211, 260, run);
    const MesaForwardResult one_shot = Chunked(p, cg);
    EXPECT_LT(MaxRelError(run.o, one_shot.o), 1e-5);
    EXPECT_LT(MaxRelError(run.h, one_shot.h_final), 1e-5);
    EXPECT_LT(MaxRelError(run.g, one_shot.g_final), 1e-5);
  }
}

// Well-conditioned heads (lambda >= 1, weak writes, fast forgetting): tolerance mode stops early
// and agrees with a converged fixed-step solve to about the tolerance.
TEST(MesaStepTest, ToleranceModeTakesFewerStepsAndMatchesFixedSteps) {
  ProblemConfig config = Config(128, 4);
  config.lambda_min = 1.f;
  config.lambda_max = 1.5f;
  config.beta_max = 0.3f;
  config.log_gamma_min = -1.f;
  config.log_gamma_max = -0.1f;
  config.initial_state = false;
  const Problem p = RandomProblem(config);
  const Decoded fixed = StepAll(p, {.max_steps = 30});
  const Decoded adaptive = StepAll(p, {.max_steps = 30, .tolerance = 1e-4f});
  EXPECT_DOUBLE_EQ(fixed.MeanSteps(), 30.0);
  EXPECT_LT(adaptive.MeanSteps(), 15.0);
  EXPECT_GE(adaptive.MeanSteps(), 1.0);
  for (int32_t s : adaptive.cg_steps) {
    ASSERT_GE(s, 1);
    ASSERT_LE(s, 30);
  }
  EXPECT_LT(MaxRelError(adaptive.o, fixed.o), 1e-3);
  // A looser tolerance takes fewer steps still.
  const Decoded loose = StepAll(p, {.max_steps = 30, .tolerance = 1e-2f});
  EXPECT_LT(loose.MeanSteps(), adaptive.MeanSteps());
}

// Each batch row has its own state: a batch of 3 equals three batches of 1, bit for bit.
TEST(MesaStepTest, BatchRowsAreIndependent) {
  ProblemConfig config = Config(5, 5);
  config.batch = 3;
  const Problem p = RandomProblem(config);
  const CgOptions cg{.max_steps = 5, .tolerance = 1e-3f};
  const Decoded batched = StepAll(p, cg);
  const int64_t dd = p.dims.head_dim * p.dims.head_dim, hd = p.dims.heads * p.dims.head_dim;
  for (int64_t b = 0; b < 3; ++b) {
    const Decoded single = StepAll(RowProblem(p, b), cg);
    EXPECT_EQ(single.o, BatchRow(batched.o, p.dims.seq_len * hd, b));
    EXPECT_EQ(single.h, BatchRow(batched.h, p.dims.heads * dd, b));
    EXPECT_EQ(single.g, BatchRow(batched.g, p.dims.heads * dd, b));
  }
}

// Prompts of different lengths (one of them empty) prefilled together, packed (varlen: one final
// state per sequence), then decoded as the rows of one batch: each sequence's outputs and final
// state equal its own one-shot forward over prompt + continuation.
TEST(MesaStepTest, VarlenPrefillThenBatchedDecoding) {
  ProblemConfig config = Config(80, 12);
  config.batch = 4;
  config.initial_state = false;
  const Problem p = RandomProblem(config);
  const std::vector<int64_t> prompt = {5, 70, 0, 33};
  constexpr int64_t kNew = 10;
  for (const CgOptions cg : {CgOptions{.max_steps = 8}, CgOptions{.max_steps = 0}}) {
    SCOPED_TRACE(::testing::PrintToString(cg.max_steps) + " steps");
    Problem packed;
    packed.dims = {1, 0, p.dims.heads, p.dims.head_dim};
    packed.lambda = p.lambda;
    packed.cu_seqlens = {0};
    for (int64_t n = 0; n < 4; ++n) {
      AppendTokens(SubProblem(RowProblem(p, n), 0, prompt[n]), packed);
      packed.cu_seqlens.push_back(static_cast<int32_t>(packed.dims.seq_len));
    }
    const MesaForwardResult prefill = Chunked(packed, cg);
    Decoded run{.h = prefill.h_final, .g = prefill.g_final};
    // Decoding: step j feeds token prompt[n] + j of every sequence n.
    std::vector<std::vector<float>> outputs(4);
    for (int64_t j = 0; j < kNew; ++j) {
      Problem batch;
      batch.dims = {1, 0, p.dims.heads, p.dims.head_dim};
      batch.lambda = p.lambda;
      for (int64_t n = 0; n < 4; ++n) {
        AppendTokens(SubProblem(RowProblem(p, n), prompt[n] + j, prompt[n] + j + 1), batch);
      }
      batch.dims = {4, 1, p.dims.heads, p.dims.head_dim};  // the four tokens as four rows
      std::vector<float> o(batch.q.size());
      ASSERT_TRUE(MesaStep(StepInputs(batch), cg, {run.h, run.g}, {.o = o}).ok());
      const int64_t hd = p.dims.heads * p.dims.head_dim;
      for (int64_t n = 0; n < 4; ++n) {
        outputs[n].insert(outputs[n].end(), o.begin() + n * hd, o.begin() + (n + 1) * hd);
      }
    }
    const int64_t hdd = p.dims.heads * p.dims.head_dim * p.dims.head_dim;
    for (int64_t n = 0; n < 4; ++n) {
      SCOPED_TRACE("sequence " + std::to_string(n));
      const Problem whole = SubProblem(RowProblem(p, n), 0, prompt[n] + kNew);
      const MesaForwardResult expected = Chunked(whole, cg);
      const int64_t hd = p.dims.heads * p.dims.head_dim;
      EXPECT_LT(MaxRelError(outputs[n], TokenRange(expected.o, 1, whole.dims.seq_len, hd, prompt[n],
                                                   prompt[n] + kNew)),
                1e-5);
      EXPECT_LT(MaxRelError(BatchRow(run.h, hdd, n), expected.h_final), 1e-5);
      EXPECT_LT(MaxRelError(BatchRow(run.g, hdd, n), expected.g_final), 1e-5);
    }
  }
}

// Threads split the (sequence, head) rows; the results are bit-identical for any thread count.
TEST(MesaStepTest, ThreadCountDoesNotChangeResults) {
  ProblemConfig config = Config(1, 13);
  config.batch = 3;
  const Problem p = RandomProblem(config);
  const MesaStepInputs in = StepInputs(p);
  const CgOptions cg{.max_steps = 30, .tolerance = 1e-4f};
  std::vector<float> h1 = p.h0, g1 = p.g0, o1(in.dims.TokenElems());
  std::vector<int32_t> steps1(in.dims.GateElems());
  ASSERT_TRUE(MesaStep(in, cg, {h1, g1}, {.o = o1, .cg_steps = steps1}, 1).ok());
  for (int threads : {0, 2, 5}) {
    std::vector<float> h = p.h0, g = p.g0, o(in.dims.TokenElems());
    std::vector<int32_t> steps(in.dims.GateElems());
    ASSERT_TRUE(MesaStep(in, cg, {h, g}, {.o = o, .cg_steps = steps}, threads).ok());
    EXPECT_EQ(o, o1) << threads;
    EXPECT_EQ(h, h1) << threads;
    EXPECT_EQ(g, g1) << threads;
    EXPECT_EQ(steps, steps1) << threads;
  }
  std::vector<float> h = p.h0, g = p.g0, o(in.dims.TokenElems());
  EXPECT_EQ(MesaStep(in, cg, {h, g}, {.o = o}, -1).code(), absl::StatusCode::kInvalidArgument);
}

// GLA (0 CG steps) reads out G q and never needs H: with h absent the outputs are identical.
TEST(MesaStepTest, GlaRunsWithoutH) {
  const Problem p = RandomProblem(Config(3, 6));
  const MesaStepDims sd{2, 2, 32};
  const Problem token = SubProblem(p, 0, 1);
  const MesaStepInputs in = StepInputs(token);
  std::vector<float> h = p.h0, g1 = p.g0, g2 = p.g0, o1(sd.TokenElems()), o2(sd.TokenElems());
  std::vector<float> q_star(sd.TokenElems());
  ASSERT_TRUE(MesaStep(in, {.max_steps = 0}, {h, g1}, {.o = o1, .q_star = q_star}).ok());
  ASSERT_TRUE(MesaStep(in, {.max_steps = 0}, {{}, g2}, {.o = o2}).ok());
  EXPECT_EQ(o1, o2);
  EXPECT_EQ(g1, g2);
  EXPECT_EQ(q_star, token.q);  // GLA: q* = q
  // With a solve, h is required.
  absl::Status s = MesaStep(in, {.max_steps = 3}, {{}, g2}, {.o = o2});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("'h'"));
}

TEST(MesaStepTest, RejectsBadInputsNamingTheTensor) {
  const Problem p = RandomProblem(Config(1, 7));
  const MesaStepDims sd{2, 2, 32};
  std::vector<float> h = p.h0, g = p.g0, o(sd.TokenElems());
  std::vector<int32_t> steps(sd.GateElems());
  const MesaStepInputs good = StepInputs(p);
  ASSERT_TRUE(MesaStep(good, {}, {h, g}, {.o = o, .cg_steps = steps}).ok());
  const std::vector<float> h_before = h;
  auto expect_error = [&](const MesaStepInputs& in, const CgOptions& cg, MesaStepState state,
                          MesaStepOutputs out, const std::string& needle) {
    absl::Status s = MesaStep(in, cg, state, out);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << needle;
    EXPECT_THAT(s.message(), HasSubstr(needle));
  };
  std::vector<float> short_q(p.q.begin(), p.q.end() - 1);
  MesaStepInputs in = good;
  in.q = short_q;
  expect_error(in, {}, {h, g}, {.o = o}, "'q'");
  std::vector<float> nan_k = p.k;
  nan_k[5] = NAN;
  in = good;
  in.k = nan_k;
  expect_error(in, {}, {h, g}, {.o = o}, "k");
  std::vector<float> bad_lambda = p.lambda;
  bad_lambda[3] = 0.f;
  in = good;
  in.lambda = bad_lambda;
  expect_error(in, {}, {h, g}, {.o = o}, "lambda");
  in = good;
  in.beta = {};
  expect_error(in, {}, {h, g}, {.o = o}, "'beta'");
  std::vector<float> short_g(g.begin(), g.end() - 32);
  expect_error(good, {}, {h, short_g}, {.o = o}, "'g'");
  expect_error(good, {}, {h, g}, {.o = {}}, "'o'");
  std::vector<int32_t> short_steps(1);
  expect_error(good, {}, {h, g}, {.o = o, .cg_steps = short_steps}, "'cg_steps'");
  expect_error(good, {.max_steps = -1}, {h, g}, {.o = o}, "max_steps");
  expect_error(good, {.tolerance = NAN}, {h, g}, {.o = o}, "tolerance");
  in = good;
  in.dims.head_dim = 24;
  expect_error(in, {}, {h, g}, {.o = o}, "head_dim");
  EXPECT_EQ(h, h_before);  // errors leave the state alone
}

}  // namespace
}  // namespace mesa::kernels::cpu
