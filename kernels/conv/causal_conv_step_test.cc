// Appending to the causal depthwise convolution from a saved tail, one token or a chunk at a
// time, equals the one-shot convolution of the whole sequence, bit for bit.
#include "kernels/conv/causal_conv_step.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/common/token_slices.h"

namespace mesa::kernels::cpu {
namespace {

using ::testing::HasSubstr;
using testing::PutTokenRange;
using testing::TokenRange;

std::vector<float> Random(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng);
  return x;
}

// The definition, in the loop order of model/layers CausalConvForward (zero left padding; taps
// before the sequence start are skipped).
std::vector<float> OneShot(const std::vector<float>& x, const std::vector<float>& weight,
                           int64_t batch, int64_t seq_len, int64_t ch, int64_t width) {
  std::vector<float> out(x.size());
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < seq_len; ++t) {
      for (int64_t c = 0; c < ch; ++c) {
        float acc = 0;
        for (int64_t j = 0; j < width; ++j) {
          const int64_t src = t - (width - 1) + j;
          if (src >= 0) acc += weight[c * width + j] * x[(b * seq_len + src) * ch + c];
        }
        out[(b * seq_len + t) * ch + c] = acc;
      }
    }
  }
  return out;
}

TEST(CausalConvAppendTest, PiecesAndStepsEqualOneShot) {
  constexpr int64_t kBatch = 2, kLen = 90, kCh = 24;
  for (int64_t width : {1, 2, 4, 8}) {
    SCOPED_TRACE("W=" + std::to_string(width));
    const std::vector<float> x = Random(kBatch * kLen * kCh, 1 + width);
    const std::vector<float> weight = Random(kCh * width, 100 + width);
    std::vector<float> tail(kBatch * (width - 1) * kCh, 0.f), out(x.size(), 0.f);
    // Pieces: 1 token, 2 tokens (shorter than the tail), 17, single steps, 40, the rest.
    const std::vector<int64_t> cuts = {0, 1, 3, 20, 21, 22, 23, 63, kLen};
    for (size_t i = 0; i + 1 < cuts.size(); ++i) {
      const int64_t t0 = cuts[i], t1 = cuts[i + 1];
      const std::vector<float> piece = TokenRange(x, kBatch, kLen, kCh, t0, t1);
      std::vector<float> piece_out(piece.size());
      ASSERT_TRUE(
          CausalConvAppend({kBatch, t1 - t0, kCh, width}, piece, weight, tail, piece_out).ok());
      PutTokenRange(piece_out, kBatch, kLen, kCh, t0, t1, out);
    }
    EXPECT_EQ(out, OneShot(x, weight, kBatch, kLen, kCh, width));
    // The tail holds the last W - 1 inputs, oldest first.
    EXPECT_EQ(tail, TokenRange(x, kBatch, kLen, kCh, kLen - (width - 1), kLen));
  }
}

TEST(CausalConvAppendTest, NonZeroTailIsTheHistory) {
  // A tail [a, b] (W = 3, C = 1) and input c give w0 a + w1 b + w2 c; the tail becomes [b, c].
  std::vector<float> tail = {2.f, 3.f}, out(1);
  const std::vector<float> weight = {0.5f, -1.f, 4.f}, x = {10.f};
  ASSERT_TRUE(CausalConvAppend({1, 1, 1, 3}, x, weight, tail, out).ok());
  EXPECT_EQ(out[0], 0.5f * 2.f - 3.f + 40.f);
  EXPECT_EQ(tail, (std::vector<float>{3.f, 10.f}));
}

TEST(CausalConvAppendTest, RejectsBadInputsNamingTheTensor) {
  std::vector<float> x(2 * 8), weight(8 * 4), tail(2 * 3 * 8), out(2 * 8);
  const ConvDims dims{2, 1, 8, 4};
  ASSERT_TRUE(CausalConvAppend(dims, x, weight, tail, out).ok());
  auto expect_error = [](absl::Status s, const std::string& needle) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << needle;
    EXPECT_THAT(s.message(), HasSubstr(needle));
  };
  expect_error(CausalConvAppend({2, 1, 8, 9}, x, weight, tail, out), "width");
  expect_error(CausalConvAppend({2, 1, 8, 0}, x, weight, tail, out), "width");
  expect_error(CausalConvAppend({0, 1, 8, 4}, x, weight, tail, out), "batch");
  expect_error(CausalConvAppend(dims, std::span<const float>(x).subspan(1), weight, tail, out),
               "'x'");
  expect_error(CausalConvAppend(dims, x, std::span<const float>(weight).subspan(1), tail, out),
               "'weight'");
  expect_error(CausalConvAppend(dims, x, weight, std::span<float>(tail).subspan(8), out), "'tail'");
  expect_error(CausalConvAppend(dims, x, weight, tail, {}), "'out'");
  x[3] = NAN;
  expect_error(CausalConvAppend(dims, x, weight, tail, out), "'x'");
}

}  // namespace
}  // namespace mesa::kernels::cpu
