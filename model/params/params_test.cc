#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "model/params/initialize.h"
#include "model/params/param_builder.h"

namespace mesa::model {
namespace {

TEST(ParamBuilderTest, TensorsStartAlignedAndCountOnlyTheirOwnValues) {
  ParamBuilder b;
  EXPECT_EQ(b.Add("a", {3, 5}, true, InitKind::kFanIn, 5), 0);
  EXPECT_EQ(b.Add("b", {7}, false, InitKind::kOnes), ParamBuilder::kTensorAlign);
  b.AddUnowned(10);
  EXPECT_EQ(b.AddConstant("c", {2}, false, 0.25f), 2 * ParamBuilder::kTensorAlign);
  EXPECT_EQ(b.total(), 2 * ParamBuilder::kTensorAlign + 2);
  EXPECT_EQ(b.num_values(), 15 + 7 + 2);
  ASSERT_EQ(b.tensors().size(), 3u);
  EXPECT_EQ(b.tensors()[0].size, 15);
  EXPECT_TRUE(b.tensors()[0].weight_decay);
  EXPECT_FALSE(b.tensors()[1].weight_decay);
}

TEST(InitializeParamsTest, EachKindAndEachTensorItsOwnStream) {
  ParamBuilder b;
  b.Add("ones", {4}, false, InitKind::kOnes);
  b.Add("zeros", {4}, false, InitKind::kZeros);
  b.AddConstant("const", {4}, false, -1.5f);
  b.Add("gamma", {3}, false, InitKind::kGammaBias);
  const int64_t w = b.Add("w", {4096}, true, InitKind::kFanIn, 16, 2.0f);
  std::vector<float> p(b.total(), 7.0f);
  InitializeParams(b.tensors(), 1, p.data());
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(p[b.tensors()[0].offset + i], 1.0f);
    EXPECT_EQ(p[b.tensors()[1].offset + i], 0.0f);
    EXPECT_EQ(p[b.tensors()[2].offset + i], -1.5f);
  }
  const float* g = p.data() + b.tensors()[3].offset;
  EXPECT_NEAR(1 / (1 + std::exp(-g[0])), 0.9, 1e-6);
  EXPECT_NEAR(1 / (1 + std::exp(-g[2])), 0.99, 1e-6);
  double sum = 0, sq = 0;
  for (int i = 0; i < 4096; ++i) {
    sum += p[w + i];
    sq += p[w + i] * p[w + i];
  }
  EXPECT_NEAR(sum / 4096, 0.0, 0.03);
  EXPECT_NEAR(std::sqrt(sq / 4096), 2.0 / 4.0, 0.02);  // scale / sqrt(fan_in)

  // The same seed gives the same values; another seed others; a tensor added in front of "w"
  // changes its index and so its stream, one added after it does not.
  std::vector<float> again(b.total(), 7.0f);  // the gaps are left as they are
  InitializeParams(b.tensors(), 1, again.data());
  EXPECT_EQ(again, p);
  InitializeParams(b.tensors(), 2, again.data());
  EXPECT_NE(again[w], p[w]);
  ParamBuilder longer = b;
  longer.Add("after", {8}, true, InitKind::kFanIn, 8);
  std::vector<float> more(longer.total());
  InitializeParams(longer.tensors(), 1, more.data());
  for (int i = 0; i < 4096; ++i) ASSERT_EQ(more[w + i], p[w + i]);
}

}  // namespace
}  // namespace mesa::model
