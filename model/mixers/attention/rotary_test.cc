#include "model/mixers/attention/rotary.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "spec/mixers.h"

namespace mesa::model {
namespace {

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = dist(rng);
  return x;
}

constexpr int64_t kB = 2, kT = 5, kH = 3, kD = 16;

// Rotate-half in float64, written from the definition: pair (i, i + D/2) turned by
// position * base^(-2i/D).
TEST(RotaryTest, MatchesTheFloat64Definition) {
  const std::vector<float> x = Random(kB * kT * kH * kD, 1);
  const std::vector<int64_t> starts = {0, 70000};  // a long context: angles stay precise
  std::vector<float> y = x;
  RotaryCpu(y.data(), kB, kT, kH, kD, starts, /*inverse=*/false);
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t t = 0; t < kT; ++t) {
      for (int64_t h = 0; h < kH; ++h) {
        const int64_t base = ((b * kT + t) * kH + h) * kD;
        for (int64_t i = 0; i < kD / 2; ++i) {
          const double angle =
              (starts[b] + t) * std::pow(spec::kRotaryBase, -2.0 * i / static_cast<double>(kD));
          const double x1 = x[base + i], x2 = x[base + i + kD / 2];
          EXPECT_NEAR(y[base + i], x1 * std::cos(angle) - x2 * std::sin(angle), 2e-5);
          EXPECT_NEAR(y[base + i + kD / 2], x2 * std::cos(angle) + x1 * std::sin(angle), 2e-5);
        }
      }
    }
  }
}

// The rotation is linear, so its backward is its adjoint: <R x, g> = <x, R^T g> in double
// precision, R^T being the inverse call.
TEST(RotaryTest, InverseIsTheAdjoint) {
  const size_t n = kB * kT * kH * kD;
  const std::vector<float> x = Random(n, 2), g = Random(n, 3);
  const std::vector<int64_t> starts = {3, 11};
  std::vector<float> rx = x, rtg = g;
  RotaryCpu(rx.data(), kB, kT, kH, kD, starts, false);
  RotaryCpu(rtg.data(), kB, kT, kH, kD, starts, true);
  double lhs = 0, rhs = 0;
  for (size_t i = 0; i < n; ++i) {
    lhs += static_cast<double>(rx[i]) * g[i];
    rhs += static_cast<double>(x[i]) * rtg[i];
  }
  EXPECT_NEAR(lhs, rhs, 1e-4 * std::fabs(lhs) + 1e-4);
  // And the inverse undoes the rotation.
  RotaryCpu(rx.data(), kB, kT, kH, kD, starts, true);
  for (size_t i = 0; i < n; ++i) EXPECT_NEAR(rx[i], x[i], 1e-5);
}

// What rotary is for: q at position m and k at position n score q . k by m - n alone.
TEST(RotaryTest, ScoresDependOnlyOnTheRelativePosition) {
  const std::vector<float> q = Random(kD, 4), k = Random(kD, 5);
  auto score = [&](int64_t m, int64_t n) {
    std::vector<float> qm = q, kn = k;
    const int64_t sm[] = {m}, sn[] = {n};
    RotaryCpu(qm.data(), 1, 1, 1, kD, sm, false);
    RotaryCpu(kn.data(), 1, 1, 1, kD, sn, false);
    double s = 0;
    for (int64_t i = 0; i < kD; ++i) s += static_cast<double>(qm[i]) * kn[i];
    return s;
  };
  EXPECT_NEAR(score(7, 3), score(1007, 1003), 1e-4);
  EXPECT_NEAR(score(0, 0), score(500, 500), 1e-4);
  EXPECT_GT(std::fabs(score(7, 3) - score(7, 4)), 1e-3);  // and it does depend on m - n
}

}  // namespace
}  // namespace mesa::model
