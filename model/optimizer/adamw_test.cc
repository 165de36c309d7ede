#include "model/optimizer/adamw.h"

#include <cmath>

#include "gtest/gtest.h"
#include "model/backend/cpu_backend.h"

namespace mesa::model {
namespace {

// One layer, one head of 16, d_model 16.
ModelConfig TinyConfig() {
  ModelConfig config;
  config.vocab_size = 257;
  config.d_model = 16;
  config.n_layers = 1;
  config.n_heads = 1;
  config.head_dim = 16;
  config.mlp_hidden = 16;
  return config;
}

TEST(LearningRateTest, WarmupThenCosineToTenPercent) {
  OptimizerSettings s;
  s.lr = 1.0f;
  s.warmup_steps = 10;
  EXPECT_FLOAT_EQ(LearningRate(s, 0, 110), 0.1f);
  EXPECT_FLOAT_EQ(LearningRate(s, 9, 110), 1.0f);
  EXPECT_FLOAT_EQ(LearningRate(s, 10, 110), 1.0f);
  EXPECT_NEAR(LearningRate(s, 60, 110), 0.55f, 1e-6);
  EXPECT_NEAR(LearningRate(s, 110, 110), 0.1f, 1e-6);
  EXPECT_NEAR(LearningRate(s, 500, 110), 0.1f, 1e-6);
}

TEST(AdamWTest, DecaysOnlyMatricesAndClips) {
  ParamLayout layout(TinyConfig());
  CpuBackend backend;
  OptimizerSettings s;
  s.weight_decay = 0.5f;
  AdamW adamw(s, layout, &backend);
  std::vector<float> params(layout.total(), 1.0f), grads(layout.total(), 0.0f);
  adamw.Update(params.data(), grads.data(), 0.0, 0.1f, 0);
  for (const ParamTensor& t : layout.tensors()) {
    const float expected = t.weight_decay ? 1.0f - 0.1f * 0.5f : 1.0f;
    EXPECT_FLOAT_EQ(params[t.offset], expected) << t.name;
    const bool should_decay = t.name.find("proj.weight") != std::string::npos ||
                              t.name.find("conv1d") != std::string::npos;
    EXPECT_EQ(t.weight_decay, should_decay) << t.name;
  }
  // Clipping: gradient norm 100 is scaled to 1.
  std::fill(grads.begin(), grads.end(), 100.0f / std::sqrt(static_cast<float>(layout.total())));
  const double norm = adamw.GradNorm(grads.data());
  EXPECT_NEAR(norm, 100.0, 1e-3);
  adamw.Update(params.data(), grads.data(), norm, 0.0f, 1);
  EXPECT_NEAR(adamw.GradNorm(grads.data()), 1.0, 1e-5);
}

// One launch per run of same-decay tensors (gaps included) updates every tensor exactly like one
// launch per tensor, and leaves the zero gaps zero.
TEST(AdamWTest, MergedRunsUpdateLikeOneCallPerTensor) {
  ModelConfig config = TinyConfig();
  config.vocab_size = 259;  // padded unembedding rows and alignment gaps both occur
  config.d_model = 24;
  config.n_layers = 2;
  config.mlp_hidden = 48;
  ParamLayout layout(config);
  ASSERT_GT(layout.total(), layout.num_values());
  CpuBackend backend;
  OptimizerSettings s;
  s.weight_decay = 0.1f;
  const int64_t n = layout.total();
  std::vector<float> params(n, 0.0f), grads(n, 0.0f);
  for (const ParamTensor& t : layout.tensors()) {
    for (int64_t i = t.offset; i < t.offset + t.size; ++i) {
      params[i] = std::cos(0.11 * i);
      grads[i] = std::sin(0.37 * i);
    }
  }
  std::vector<float> reference = params, m(n, 0.0f), v(n, 0.0f);
  AdamW adamw(s, layout, &backend);
  for (int step = 0; step < 3; ++step) {
    adamw.Update(params.data(), grads.data(), 0.0, 1e-2f, step);
    const float bc1 = 1.0f - std::pow(s.beta1, static_cast<float>(step + 1));
    const float bc2 = 1.0f - std::pow(s.beta2, static_cast<float>(step + 1));
    for (const ParamTensor& t : layout.tensors()) {
      backend.AdamWUpdate(reference.data() + t.offset, grads.data() + t.offset, m.data() + t.offset,
                          v.data() + t.offset, t.size, 1e-2f, s.beta1, s.beta2, s.eps,
                          t.weight_decay ? s.weight_decay : 0.0f, bc1, bc2);
    }
  }
  EXPECT_EQ(params, reference);  // bit for bit, gaps (zero in both) included
}

// ZeRO-1: three instances owning consecutive ranges (cutting through tensors) update exactly
// like one unsharded instance, with the norm from the summed shard sums of squares.
TEST(AdamWTest, ShardsUpdateLikeTheWhole) {
  ParamLayout layout(TinyConfig());
  CpuBackend backend;
  OptimizerSettings s;
  s.weight_decay = 0.1f;
  s.grad_clip = 1.0f;
  const int64_t n = layout.total();
  std::vector<float> grads(n), params(n);
  for (int64_t i = 0; i < n; ++i) {
    grads[i] = std::sin(0.37 * i);
    params[i] = std::cos(0.11 * i);
  }
  AdamW whole(s, layout, &backend);
  const int64_t cut1 = n / 3 + 7, cut2 = 2 * n / 3 - 5;  // not on tensor boundaries
  AdamW a(s, layout, &backend, 0, cut1), b(s, layout, &backend, cut1, cut2),
      c(s, layout, &backend, cut2, n);
  EXPECT_EQ(a.size() + b.size() + c.size(), n);
  std::vector<float> p_whole = params, p_shard = params;
  for (int step = 0; step < 3; ++step) {
    std::vector<float> g_whole = grads, g_shard = grads;
    const double norm = whole.GradNorm(g_whole.data());
    const double shard_norm =
        std::sqrt(a.ShardSumOfSquares(g_shard.data()) + b.ShardSumOfSquares(g_shard.data()) +
                  c.ShardSumOfSquares(g_shard.data()));
    EXPECT_NEAR(norm, shard_norm, 1e-9 * norm);
    whole.Update(p_whole.data(), g_whole.data(), norm, 0.01f, step);
    for (AdamW* opt : {&a, &b, &c}) opt->Update(p_shard.data(), g_shard.data(), norm, 0.01f, step);
  }
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(p_whole[i], p_shard[i]) << i;
  EXPECT_EQ(b.m()[0], whole.m()[cut1]);
  EXPECT_EQ(c.v()[c.size() - 1], whole.v()[n - 1]);
}

}  // namespace
}  // namespace mesa::model
