#include "spec/curve_bins.h"

#include "gtest/gtest.h"

namespace mesa::spec {
namespace {

TEST(CurveBins, ExactThenGeometricCoveringEveryPositionOnce) {
  // The benchmark pack's figure: b = 16 gives 208 points for 32,768 positions.
  const auto bins = CurveBins(32768, 16);
  EXPECT_EQ(bins.size(), 208u);
  int32_t next = 0;
  for (const auto& [first, last] : bins) {
    EXPECT_EQ(first, next);
    EXPECT_GE(last, first);
    next = last + 1;
  }
  EXPECT_EQ(next, 32768);
  EXPECT_EQ(bins[63], (std::pair<int32_t, int32_t>{63, 63}));
  EXPECT_EQ(bins[64].first, 64);
  // b = 1: octaves [64, 128), [128, 256), ...; a short curve is cut at its end.
  EXPECT_EQ(CurveBins(200, 1).back(), (std::pair<int32_t, int32_t>{128, 199}));
  EXPECT_EQ(CurveBins(200, 1).size(), 66u);
  EXPECT_EQ(CurveBins(40, 4).size(), 40u);    // within the exact part
  EXPECT_EQ(CurveBins(100, 0).size(), 100u);  // no binning: a bin per position
  // Many bins per octave: the floors leave empty bins, which are skipped.
  const auto fine = CurveBins(256, 64);
  next = 0;
  for (const auto& [first, last] : fine) {
    EXPECT_EQ(first, next);
    next = last + 1;
  }
  EXPECT_EQ(next, 256);
}

}  // namespace
}  // namespace mesa::spec
