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
#include "kernels/common/token_slices.h"
#include "kernels/deltanet/deltanet_op.h"
#include "kernels/deltanet/test_util.h"

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

// Batch row b of p as a problem of its own (with its initial state, if p has one).
Problem RowProblem(const Problem& p, int64_t b) {
  const DeltaDims& d = p.dims;
  const int64_t hd = d.heads * d.head_dim;
  Problem r;
  r.dims = {1, d.seq_len, d.heads, d.head_dim};
  r.q = BatchRow(p.q, d.seq_len * hd, b);
  r.k = BatchRow(p.k, d.seq_len * hd, b);
  r.v = BatchRow(p.v, d.seq_len * hd, b);
  r.beta = BatchRow(p.beta, d.seq_len * d.heads, b);
  if (!p.log_gamma.empty()) r.log_gamma = BatchRow(p.log_gamma, d.seq_len * d.heads, b);
  if (!p.s0.empty()) r.s0 = BatchRow(p.s0, hd * d.head_dim, b);
  return r;
}

// Appends the tokens of `piece` (batch 1) to `packed` (batch 1) along T.
void AppendTokens(const Problem& piece, Problem& packed) {
  ::mesa::kernels::testing::AppendTokens(piece, packed, &Problem::q, &Problem::k, &Problem::v,
                                         &Problem::beta, &Problem::log_gamma);
}

// Every token of p as one row of a decoding batch (B * T rows; for a one-token problem, B).
DeltaStepInputs StepInputs(const Problem& p) {
  return {.dims = {p.dims.batch * p.dims.seq_len, p.dims.heads, p.dims.head_dim},
          .q = p.q,
          .k = p.k,
          .v = p.v,
          .beta = p.beta,
          .log_gamma = p.log_gamma};
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
    const DeltaStepInputs in = StepInputs(token);
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

// Prefill of T - 1 tokens by the chunked op, then one step, gives the one-shot forward's output
// at position T and its final state.
TEST_P(DeltaStepLengthTest, PrefillThenOneStepMatchesOneShotForward) {
  const int64_t seq_len = GetParam();
  for (bool gated : {false, true}) {
    SCOPED_TRACE(gated ? "gated" : "plain");
    const Problem p = RandomProblem(StepConfig(seq_len, gated, 40 + seq_len));
    Decoded run = Begin(p);
    if (seq_len > 1) PrefillRange(p, 0, seq_len - 1, run);
    StepRange(p, seq_len - 1, seq_len, run);
    const DeltaForwardResult one_shot = Forward(p, DeltaImpl::kChunked);
    const int64_t hd = p.dims.heads * p.dims.head_dim;
    EXPECT_LT(MaxRelError(TokenRange(run.o, 2, seq_len, hd, seq_len - 1, seq_len),
                          TokenRange(one_shot.o, 2, seq_len, hd, seq_len - 1, seq_len)),
              kTol);
    EXPECT_LT(MaxRelError(run.s, one_shot.s_final), kTol);
  }
}

INSTANTIATE_TEST_SUITE_P(Lengths, DeltaStepLengthTest, ::testing::Values(1, 63, 64, 65, 200));

// Long decoding: the float32 step stays close to the float64 reference over 2,000 tokens.
TEST(DeltaStepTest, LongDecodingStaysCloseToFloat64) {
  for (bool gated : {false, true}) {
    SCOPED_TRACE(gated ? "gated" : "plain");
    Config config = StepConfig(2000, gated, 16);
    config.batch = 1;
    config.heads = 1;
    const Problem p = RandomProblem(config);
    const Decoded steps = StepAll(p);
    const DeltaForwardResult ref = Forward(p, DeltaImpl::kReference);  // measured: <= 2.9e-7
    EXPECT_LT(MaxRelError(steps.o, ref.o), kTol);
    EXPECT_LT(MaxRelError(steps.s, ref.s_final), kTol);
  }
}

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
    const Decoded single = StepAll(RowProblem(p, b));
    EXPECT_EQ(single.o, BatchRow(batched.o, t * hd, b));
    EXPECT_EQ(single.s, BatchRow(batched.s, h * dd, b));
  }
}

// Prompts of different lengths (one of them empty) prefilled together, packed (varlen: one final
// state per sequence), then decoded as the rows of one batch: each sequence's outputs and final
// state equal its own one-shot forward over prompt + continuation.
TEST(DeltaStepTest, VarlenPrefillThenBatchedDecoding) {
  const std::vector<int64_t> prompt = {5, 70, 0, 33};
  constexpr int64_t kNew = 10;
  for (bool gated : {false, true}) {
    SCOPED_TRACE(gated ? "gated" : "plain");
    Config config = StepConfig(80, gated, 12);
    config.batch = 4;
    config.initial_state = false;
    const Problem p = RandomProblem(config);
    const int64_t hd = p.dims.heads * p.dims.head_dim, hdd = hd * p.dims.head_dim;
    Problem packed;
    packed.dims = {1, 0, p.dims.heads, p.dims.head_dim};
    packed.cu_seqlens = {0};
    for (int64_t n = 0; n < 4; ++n) {
      AppendTokens(SubProblem(RowProblem(p, n), 0, prompt[n]), packed);
      packed.cu_seqlens.push_back(static_cast<int32_t>(packed.dims.seq_len));
    }
    std::vector<float> s = Forward(packed, DeltaImpl::kChunked).s_final;
    std::vector<std::vector<float>> outputs(4);
    for (int64_t j = 0; j < kNew; ++j) {
      Problem batch;
      batch.dims = {1, 0, p.dims.heads, p.dims.head_dim};
      for (int64_t n = 0; n < 4; ++n) {
        AppendTokens(SubProblem(RowProblem(p, n), prompt[n] + j, prompt[n] + j + 1), batch);
      }
      const DeltaStepInputs in = StepInputs(batch);
      std::vector<float> o(batch.q.size());
      ASSERT_TRUE(DeltaNetStep(in, s, o).ok());
      for (int64_t n = 0; n < 4; ++n) {
        outputs[n].insert(outputs[n].end(), o.begin() + n * hd, o.begin() + (n + 1) * hd);
      }
    }
    for (int64_t n = 0; n < 4; ++n) {
      SCOPED_TRACE("sequence " + std::to_string(n));
      const Problem whole = SubProblem(RowProblem(p, n), 0, prompt[n] + kNew);
      const DeltaForwardResult expected = Forward(whole, DeltaImpl::kChunked);
      EXPECT_LT(MaxRelError(outputs[n], TokenRange(expected.o, 1, whole.dims.seq_len, hd, prompt[n],
                                                   prompt[n] + kNew)),
                kTol);
      EXPECT_LT(MaxRelError(BatchRow(s, hdd, n), expected.s_final), kTol);
    }
  }
}

// Threads split the (sequence, head) rows; the results are bit-identical for any thread count.
TEST(DeltaStepTest, ThreadCountDoesNotChangeResults) {
  Config config = StepConfig(1, /*gated=*/true, 14);
  config.batch = 3;
  config.head_dim = 20;  // not a multiple of the dot product's 16 lanes
  const Problem p = RandomProblem(config);
  const DeltaStepInputs in = StepInputs(p);
  std::vector<float> s1 = p.s0, o1(in.dims.TokenElems());
  ASSERT_TRUE(DeltaNetStep(in, s1, o1, 1).ok());
  for (int threads : {0, 2, 5}) {
    std::vector<float> s = p.s0, o(in.dims.TokenElems());
    ASSERT_TRUE(DeltaNetStep(in, s, o, threads).ok());
    EXPECT_EQ(o, o1) << threads;
    EXPECT_EQ(s, s1) << threads;
  }
  // And D = 20 agrees with the float64 reference like D = 32 does.
  const DeltaForwardResult ref = Forward(p, DeltaImpl::kReference);
  EXPECT_LT(MaxRelError(o1, ref.o), kTol);
  EXPECT_LT(MaxRelError(s1, ref.s_final), kTol);
  std::vector<float> s = p.s0, o(in.dims.TokenElems());
  EXPECT_EQ(DeltaNetStep(in, s, o, -1).code(), absl::StatusCode::kInvalidArgument);
}

TEST(DeltaStepTest, RejectsBadInputsNamingTheTensor) {
  const Problem p = RandomProblem(StepConfig(1, /*gated=*/true, 11));
  const DeltaStepDims sd{2, 2, 32};
  const DeltaStepInputs good = StepInputs(p);
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
