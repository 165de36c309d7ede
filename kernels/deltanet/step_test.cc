// The recurrent DeltaNet / Gated DeltaNet step (float32) against the chunkwise forward (float32)
// and the float64 reference: token for token from random initial states, after prefills in
// uneven pieces; gated with g = 1 equals plain; batch independence; input validation.
#include "kernels/deltanet/step.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/deltanet/deltanet_op.h"
#include "kernels/deltanet/test_util.h"
#include "kernels/token_slices.h"

namespace mesa::kernels::deltanet {
namespace {

using ::mesa::kernels::testing::BatchRow;
using ::mesa::kernels::testing::PutTokenRange;
using ::mesa::kernels::testing::TokenRange;
using testing::Config;
using ::testing::HasSubstr;
using testing::MaxRelError;
using testing::Problem;
using testing::RandomProblem;

// Chunked float32 against stepped float32: both round differently along T, the state transition
// is contractive (|k| = 1, beta < 1, g <= 1), so the difference stays at a few float32 ulps of
// the state's scale. A wrong term (orientation, missing gate) gives O(1e-1) errors.
constexpr double kTol = 2e-5;

// The inputs of tokens [t0, t1) of p as a problem of its own (no initial state).
Problem SubProblem(const Problem& p, int64_t t0, int64_t t1) {
  const DeltaDims& d = p.dims;
  const int64_t hd = d.heads * d.head_dim;
  Problem s;
  s.dims = {d.batch, t1 - t0, d.heads, d.head_dim};
  s.q = TokenRange(p.q, d.batch, d.seq_len, hd, t0, t1);
  s.k = TokenRange(p.k, d.batch, d.seq_len, hd, t0, t1);
  s.v = TokenRange(p.v, d.batch, d.seq_len, hd, t0, t1);
  s.beta = TokenRange(p.beta, d.batch, d.seq_len, d.heads, t0, t1);
  if (!p.log_gamma.empty())
    s.log_gamma = TokenRange(p.log_gamma, d.batch, d.seq_len, d.heads, t0, t1);
  return s;
}

// Outputs of every token ([B, T, H, D]) and the state.
struct Decoded {
  std::vector<float> o, s;
};

Decoded Begin(const Problem& p) {
  const int64_t state = p.dims.batch * p.dims.heads * p.dims.head_dim * p.dims.head_dim;
  return {std::vector<float>(p.dims.TokenElems(), 0.f),
          p.s0.empty() ? std::vector<float>(state, 0.f) : p.s0};
}

void StepRange(const Problem& p, int64_t t0, int64_t t1, Decoded& run) {
  const DeltaDims& d = p.dims;
  const DeltaStepDims sd{d.batch, d.heads, d.head_dim};
  std::vector<float> o(sd.TokenElems());
  for (int64_t t = t0; t < t1; ++t) {
    const Problem token = SubProblem(p, t, t + 1);
    const DeltaStepInputs in{.dims = sd,
                             .q = token.q,
                             .k = token.k,
                             .v = token.v,
                             .beta = token.beta,
                             .log_gamma = token.log_gamma};
    ASSERT_TRUE(DeltaNetStep(in, run.s, o).ok());
    PutTokenRange(o, d.batch, d.seq_len, d.heads * d.head_dim, t, t + 1, run.o);
  }
}

Decoded StepAll(const Problem& p) {
  Decoded run = Begin(p);
  StepRange(p, 0, p.dims.seq_len, run);
  return run;
}

void PrefillRange(const Problem& p, int64_t t0, int64_t t1, Decoded& run) {
  Problem piece = SubProblem(p, t0, t1);
  piece.s0 = run.s;
  absl::StatusOr<DeltaForwardResult> fwd =
      DeltaNetForwardAlloc(piece.Inputs(), DeltaOptions{}, /*want_final_state=*/true);
  ASSERT_TRUE(fwd.ok()) << fwd.status();
  PutTokenRange(fwd->o, p.dims.batch, p.dims.seq_len, p.dims.heads * p.dims.head_dim, t0, t1,
                run.o);
  run.s = fwd->s_final;
}

DeltaForwardResult Forward(const Problem& p, DeltaImpl impl) {
  absl::StatusOr<DeltaForwardResult> fwd =
      DeltaNetForwardAlloc(p.Inputs(), DeltaOptions{.impl = impl}, /*want_final_state=*/true);
  EXPECT_TRUE(fwd.ok()) << fwd.status();
  return fwd.ok() ? *std::move(fwd) : DeltaForwardResult{};
}

Config StepConfig(int64_t seq_len, bool gated, uint64_t seed) {
  return {.batch = 2,
          .seq_len = seq_len,
          .heads = 2,
          .head_dim = 32,
          .gated = gated,
          .initial_state = true,
          .seed = seed};
}

class DeltaStepLengthTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(DeltaStepLengthTest, StepsMatchChunkedForwardAndReferenceFromRandomState) {
  const int64_t seq_len = GetParam();
  for (bool gated : {false, true}) {
    SCOPED_TRACE(gated ? "gated" : "plain");
    const Problem p = RandomProblem(StepConfig(seq_len, gated, 30 + seq_len));
    const Decoded steps = StepAll(p);
    for (DeltaImpl impl : {DeltaImpl::kChunked, DeltaImpl::kReference}) {
      SCOPED_TRACE(std::string(DeltaImplName(impl)));
      const DeltaForwardResult fwd = Forward(p, impl);
      EXPECT_LT(MaxRelError(steps.o, fwd.o), kTol);
      EXPECT_LT(MaxRelError(steps.s, fwd.s_final), kTol);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Lengths, DeltaStepLengthTest, ::testing::Values(1, 63, 64, 65, 200));

// Prefill in uneven chunked pieces with decoding steps in between equals the one-shot forward.
TEST(DeltaStepTest, UnevenPrefillsAndStepsMatchOneShotForward) {
  for (bool gated : {false, true}) {
    SCOPED_TRACE(gated ? "gated" : "plain");
    const Problem p = RandomProblem(StepConfig(260, gated, 8));
    Decoded run = Begin(p);
    PrefillRange(p, 0, 17, run);
    StepRange(p, 17, 22, run);
    PrefillRange(p, 22, 86, run);
    PrefillRange(p, 86, 136, run);
    StepRange(p, 136, 140, run);
    PrefillRange(p, 140, 211, run);
    StepRange(p, 211, 260, run);
    const DeltaForwardResult one_shot = Forward(p, DeltaImpl::kChunked);
    EXPECT_LT(MaxRelError(run.o, one_shot.o), kTol);
    EXPECT_LT(MaxRelError(run.s, one_shot.s_final), kTol);
  }
}

// Gated DeltaNet with log_gamma = 0 (g = 1) is plain DeltaNet, bit for bit.
TEST(DeltaStepTest, GatedWithUnitGateEqualsPlain) {
  const Problem plain = RandomProblem(StepConfig(40, /*gated=*/false, 9));
  Problem gated = plain;
  gated.log_gamma.assign(plain.dims.GateElems(), 0.f);
  const Decoded a = StepAll(plain), b = StepAll(gated);
  EXPECT_EQ(a.o, b.o);
  EXPECT_EQ(a.s, b.s);
  // And a real gate changes the result.
  Problem decayed = gated;
  for (float& x : decayed.log_gamma) x = -0.05f;
  EXPECT_GT(MaxRelError(StepAll(decayed).o, a.o), 1e-2);
}

// Each batch row has its own state: a batch of 3 equals three batches of 1, bit for bit.
TEST(DeltaStepTest, BatchRowsAreIndependent) {
  Config config = StepConfig(6, /*gated=*/true, 10);
  config.batch = 3;
  const Problem p = RandomProblem(config);
  const Decoded batched = StepAll(p);
  const int64_t hd = p.dims.heads * p.dims.head_dim, dd = p.dims.head_dim * p.dims.head_dim;
  const int64_t t = p.dims.seq_len, h = p.dims.heads;
  for (int64_t b = 0; b < 3; ++b) {
    Problem row = p;
    row.dims.batch = 1;
    row.q = BatchRow(p.q, t * hd, b);
    row.k = BatchRow(p.k, t * hd, b);
    row.v = BatchRow(p.v, t * hd, b);
    row.beta = BatchRow(p.beta, t * h, b);
    row.log_gamma = BatchRow(p.log_gamma, t * h, b);
    row.s0 = BatchRow(p.s0, h * dd, b);
    const Decoded single = StepAll(row);
    EXPECT_EQ(single.o, BatchRow(batched.o, t * hd, b));
    EXPECT_EQ(single.s, BatchRow(batched.s, h * dd, b));
  }
}

TEST(DeltaStepTest, RejectsBadInputsNamingTheTensor) {
  const Problem p = RandomProblem(StepConfig(1, /*gated=*/true, 11));
  const DeltaStepDims sd{2, 2, 32};
  const DeltaStepInputs good{
      .dims = sd, .q = p.q, .k = p.k, .v = p.v, .beta = p.beta, .log_gamma = p.log_gamma};
  std::vector<float> s = p.s0, o(sd.TokenElems());
  ASSERT_TRUE(DeltaNetStep(good, s, o).ok());
  const std::vector<float> s_before = s;
  auto expect_error = [&](const DeltaStepInputs& in, std::span<float> state, std::span<float> out,
                          const std::string& needle) {
    absl::Status status = DeltaNetStep(in, state, out);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << needle;
    EXPECT_THAT(status.message(), HasSubstr(needle));
  };
  std::vector<float> short_v(p.v.begin() + 1, p.v.end());
  DeltaStepInputs in = good;
  in.v = short_v;
  expect_error(in, s, o, "'v'");
  std::vector<float> inf_q = p.q;
  inf_q[7] = INFINITY;
  in = good;
  in.q = inf_q;
  expect_error(in, s, o, "'q'");
  std::vector<float> short_gate(1);
  in = good;
  in.log_gamma = short_gate;
  expect_error(in, s, o, "'log_gamma'");
  in = good;
  in.beta = short_gate;
  expect_error(in, s, o, "'beta'");
  expect_error(good, std::span<float>(s).subspan(1), o, "'s'");
  expect_error(good, s, {}, "'o'");
  in = good;
  in.dims.heads = 0;
  expect_error(in, s, o, "heads");
  EXPECT_EQ(s, s_before);  // errors leave the state alone
}

}  // namespace
}  // namespace mesa::kernels::deltanet
