// Whole-model checks: gradients by finite differences (float32, directional derivatives per
// tensor so the round-off of a float forward stays small against the signal), causality, BOS
// masking and initialisation.
#include "model/net/mesanet.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "model/backend/cpu_backend.h"
#include "model/mixers/qk_params.h"

namespace mesa::model {
namespace {

ModelConfig TinyConfig(MixerKind mixer) {
  ModelConfig config;
  config.vocab_size = 259;
  config.d_model = 16;
  config.n_layers = 2;
  config.n_heads = 2;
  config.head_dim = 16;
  config.mlp_hidden = 48;
  config.mixer = mixer;
  config.cg_steps = mixer == MixerKind::kMesa ? 30 : 0;
  config.bos_token = 256;
  return config;
}

struct Batch {
  std::vector<int32_t> tokens, targets;
};

Batch RandomBatch(int b, int t, int vocab, uint32_t seed, int bos) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(0, vocab - 1);
  Batch batch;
  for (int i = 0; i < b * t; ++i) {
    batch.tokens.push_back(dist(rng));
    batch.targets.push_back(dist(rng));
  }
  if (bos >= 0) batch.targets[3] = bos;  // one BOS target, which must not count
  return batch;
}

// `layers`: a per-layer mixer list (a hybrid), else every layer is `mixer`. `param_noise`: the
// spread of the perturbation added to the initial parameters. The delta rule makes the loss far
// more curved than Mesa's regularised solve at the noisier points (a first DeltaNet layer under
// 0.1 needed h = 2e-5 for the central difference to agree, which float32 losses cannot resolve
// for small gradients), so the delta-rule checks use a smaller spread. `reset_at_bos`: documents
// start at a few BOS tokens of both rows (docs/math.md §8.6).
void CheckModelGradients(MixerKind mixer, kernels::MesaImpl impl,
                         std::vector<MixerKind> layers = {}, float param_noise = 0.1f,
                         int attention_window = 0, bool tie_embeddings = true,
                         bool reset_at_bos = false) {
  ModelConfig config = TinyConfig(mixer);
  config.reset_at_bos = reset_at_bos;
  config.tie_embeddings = tie_embeddings;
  config.layer_mixers = layers;
  if (!layers.empty()) config.n_layers = static_cast<int>(layers.size());
  config.attention_window = attention_window;
  if (config.LayersOf(MixerKind::kHawk) > 0) config.rnn_width = 20;  // 2 gate blocks of 10
  if (config.LayersOf(MixerKind::kMamba2) > 0) {  // 3 SSD heads of 8 (d_in 24), state 4
    config.ssm_inner = 24;
    config.ssm_head_dim = 8;
    config.ssm_state = 4;
  }
  CpuBackendOptions options;
  options.num_threads = 1;
  options.mesa_impl = impl;
  CpuBackend backend(options);
  const int b = 2, t = 8;
  auto net_or = MesaNet::Create(config, &backend, b, t);
  ASSERT_TRUE(net_or.ok()) << net_or.status();
  MesaNet& net = **net_or;
  net.InitializeParams(7);
  // Perturb the init so that no gradient is trivially structured (norm weights all 1, etc.).
  std::vector<float> params(net.num_params());
  net.GetParamsToHost(params.data());
  std::mt19937 rng(3);
  std::normal_distribution<float> noise(0.0f, param_noise);
  for (float& x : params) x += noise(rng);
  net.SetParamsFromHost(params.data());
  Batch batch = RandomBatch(b, t, config.vocab_size, 11, config.bos_token);
  if (reset_at_bos) {
    for (int at : {2, 5, t + 3}) batch.tokens[at] = config.bos_token;
  }
  const MesaSolve solve{config.cg_steps, 0.0f};

  auto loss_at = [&](const std::vector<float>& p) {
    net.SetParamsFromHost(p.data());
    auto stats = net.Forward(batch.tokens.data(), batch.targets.data(), b, solve);
    EXPECT_TRUE(stats.ok()) << stats.status();
    EXPECT_TRUE(stats->finite);
    return stats->loss_sum;
  };
  net.ZeroGrads();
  net.SetParamsFromHost(params.data());
  auto stats = net.Forward(batch.tokens.data(), batch.targets.data(), b, solve);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->loss_tokens, b * t - 1);
  ASSERT_TRUE(net.Backward(1.0f).ok());
  std::vector<float> grads(net.num_params());
  net.GetGradsToHost(grads.data());

  std::bernoulli_distribution coin(0.5);
  for (const ParamTensor& tensor : net.layout().tensors()) {
    std::vector<float> direction(tensor.size);
    double analytic = 0, grad_sq = 0;
    for (int64_t i = 0; i < tensor.size; ++i) {
      direction[i] = coin(rng) ? 1.0f : -1.0f;
      analytic += static_cast<double>(direction[i]) * grads[tensor.offset + i];
      grad_sq += static_cast<double>(grads[tensor.offset + i]) * grads[tensor.offset + i];
    }
    // A random-sign direction has a derivative of size ~|g|_2; a wrong or missing gradient term
    // shows up at that scale, far above the O(h^2) and float round-off errors.
    const float h = 5e-4f;
    std::vector<float> plus = params, minus = params;
    for (int64_t i = 0; i < tensor.size; ++i) {
      plus[tensor.offset + i] += h * direction[i];
      minus[tensor.offset + i] -= h * direction[i];
    }
    const double numeric = (loss_at(plus) - loss_at(minus)) / (2.0 * h);
    // GLA ignores λ (q* = q), so its gradient is exactly zero.
    int layer = -1;
    if (std::sscanf(tensor.name.c_str(), "model.layers.%d.", &layer) != 1) layer = -1;
    const bool unused = tensor.name.find("lambda") != std::string::npos && layer >= 0 &&
                        config.LayerMixer(layer) == MixerKind::kGla;
    if (unused) {
      EXPECT_EQ(grad_sq, 0.0) << tensor.name;
    } else {
      EXPECT_GT(grad_sq, 0.0) << tensor.name;
    }
    EXPECT_NEAR(analytic, numeric, 0.03 * std::sqrt(grad_sq) + 2e-3)
        << tensor.name << " (mixers " << LayerMixersName(config) << ")";
  }
}

TEST(MesaNetTest, GradientsMatchFiniteDifferencesMesaExactSolve) {
  CheckModelGradients(MixerKind::kMesa, kernels::MesaImpl::kReference);
}

// model.tie_embeddings false: lm_head.weight gets the head's gradient, the embedding only the
// (unscaled) lookup's.
TEST(MesaNetTest, GradientsMatchFiniteDifferencesUntiedHead) {
  CheckModelGradients(MixerKind::kMesa, kernels::MesaImpl::kReference, {}, 0.1f, 0,
                      /*tie_embeddings=*/false);
}

TEST(MesaNetTest, UntiedHeadIsTheLastTensorAndTheLookupIsUnscaled) {
  ModelConfig config = TinyConfig(MixerKind::kMesa);
  config.tie_embeddings = false;
  const ParamLayout layout(config);
  const ParamTensor& head = layout.tensors().back();
  EXPECT_EQ(head.name, "lm_head.weight");
  EXPECT_EQ(head.offset, layout.head());
  EXPECT_NE(layout.head(), layout.embeddings());
  EXPECT_EQ(head.shape, (std::vector<int64_t>{config.vocab_size, config.d_model}));
  // The padding rows follow the head, inside the buffer.
  EXPECT_EQ(layout.total(), layout.head() + layout.padded_vocab() * config.d_model);
  EXPECT_EQ(layout.num_values(), config.NumParameters());
  EXPECT_EQ(config.NumParameters(),
            TinyConfig(MixerKind::kMesa).NumParameters() + config.vocab_size * config.d_model);
  EXPECT_EQ(config.EmbeddingScale(), 1.0f);
  EXPECT_EQ(TinyConfig(MixerKind::kMesa).EmbeddingScale(), 4.0f);  // sqrt(16)
  // Rows of tokens that are never inputs get no gradient: the embedding takes none from the head.
  CpuBackend backend({.num_threads = 1});
  const int b = 1, t = 8;
  auto net = MesaNet::Create(config, &backend, b, t);
  ASSERT_TRUE(net.ok()) << net.status();
  (*net)->InitializeParams(5);
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8}, targets = {9, 9, 9, 9, 9, 9, 9, 9};
  (*net)->ZeroGrads();
  ASSERT_TRUE((*net)->Forward(tokens.data(), targets.data(), b, {config.cg_steps, 0.0f}).ok());
  ASSERT_TRUE((*net)->Backward(1.0f).ok());
  std::vector<float> grads((*net)->num_params());
  (*net)->GetGradsToHost(grads.data());
  const int64_t c = config.d_model;
  double row9 = 0, head9 = 0;
  for (int64_t j = 0; j < c; ++j) {
    row9 += std::abs(grads[layout.embeddings() + 9 * c + j]);
    head9 += std::abs(grads[layout.head() + 9 * c + j]);
  }
  EXPECT_EQ(row9, 0.0);
  EXPECT_GT(head9, 0.0);
}

TEST(MesaNetTest, GradientsMatchFiniteDifferencesMesaChunked) {
  CheckModelGradients(MixerKind::kMesa, kernels::MesaImpl::kChunked);
}

TEST(MesaNetTest, GradientsMatchFiniteDifferencesGla) {
  CheckModelGradients(MixerKind::kGla, kernels::MesaImpl::kChunked);
}

TEST(MesaNetTest, GradientsMatchFiniteDifferencesHybridGlaMesa) {
  // Layer 0 reads out directly (GLA), layer 1 solves (Mesa): every tensor of both is checked.
  CheckModelGradients(MixerKind::kMesa, kernels::MesaImpl::kChunked,
                      {MixerKind::kGla, MixerKind::kMesa});
}

TEST(MesaNetTest, GradientsMatchFiniteDifferencesDeltaNetAndMesa) {
  CheckModelGradients(MixerKind::kMesa, kernels::MesaImpl::kChunked,
                      {MixerKind::kDeltaNet, MixerKind::kMesa}, 0.02f);
}

TEST(MesaNetTest, GradientsMatchFiniteDifferencesDeltaNetTwoLayers) {
  CheckModelGradients(MixerKind::kDeltaNet, kernels::MesaImpl::kChunked, {}, 0.02f);
}

TEST(MesaNetTest, GradientsMatchFiniteDifferencesGatedDeltaNetReference) {
  CheckModelGradients(MixerKind::kMesa, kernels::MesaImpl::kReference,
                      {MixerKind::kGatedDeltaNet, MixerKind::kMesa}, 0.02f);
}

TEST(MesaNetTest, GradientsMatchFiniteDifferencesGatedDeltaNet) {
  CheckModelGradients(MixerKind::kGatedDeltaNet, kernels::MesaImpl::kChunked, {}, 0.02f);
}

TEST(MesaNetTest, GradientsMatchFiniteDifferencesHybridMesaAttentionExact) {
  CheckModelGradients(MixerKind::kMesa, kernels::MesaImpl::kReference,
                      {MixerKind::kMesa, MixerKind::kAttention});
}

TEST(MesaNetTest, GradientsMatchFiniteDifferencesHybridMesaAttention) {
  CheckModelGradients(MixerKind::kMesa, kernels::MesaImpl::kChunked,
                      {MixerKind::kMesa, MixerKind::kAttention});
}

TEST(MesaNetTest, GradientsMatchFiniteDifferencesSlidingWindowAndGlobalAttention) {
  // A window of 3 in sequences of 8: the window cuts keys off (layer 0); layer 1 is global.
  CheckModelGradients(MixerKind::kSwa, kernels::MesaImpl::kChunked,
                      {MixerKind::kSwa, MixerKind::kAttention}, 0.1f, /*attention_window=*/3);
}

// The paper's "same parameters as multi-head attention": an attention layer is a Mesa layer
// without its gates (a_proj, b_proj) and λ, and the counts in code and in the spec agree.
// Every kind of mixer at once. Five layers at 0.02 make the loss too curved for h = 5e-4 (the
// central difference of o_proj moved towards the analytic value as h shrank), hence 0.005.
TEST(MesaNetTest, GradientsMatchFiniteDifferencesWithDocumentResets) {
  CheckModelGradients(MixerKind::kMesa, kernels::MesaImpl::kChunked,
                      {MixerKind::kMesa, MixerKind::kDeltaNet, MixerKind::kGatedDeltaNet,
                       MixerKind::kSwa, MixerKind::kAttention},
                      0.005f, /*attention_window=*/3, /*tie_embeddings=*/true,
                      /*reset_at_bos=*/true);
}

// The MesaNet paper's "Mamba2": GLA with β ≡ 1 (no b_proj, no λ), alone and beside Mesa. Without
// β's damping the state, and the loss's curvature, grow: the smaller spread of the delta-rule
// checks.
TEST(MesaNetTest, GradientsMatchFiniteDifferencesMamba2Mesa) {
  CheckModelGradients(MixerKind::kMamba2Mesa, kernels::MesaImpl::kChunked, {}, 0.02f);
  CheckModelGradients(MixerKind::kMesa, kernels::MesaImpl::kReference,
                      {MixerKind::kMamba2Mesa, MixerKind::kMesa}, 0.02f, 0, true,
                      /*reset_at_bos=*/true);
}

// With β ≡ 1 a mamba2_mesa layer is a GLA layer whose input gate is saturated: the same outputs
// as GLA with b_proj = 0 and its bias large, and the parameter count of GLA less b_proj and λ.
TEST(MesaNetTest, Mamba2MesaIsGlaWithBetaOne) {
  ModelConfig m2 = TinyConfig(MixerKind::kMamba2Mesa);
  ModelConfig gla = TinyConfig(MixerKind::kGla);
  EXPECT_EQ(gla.NumParameters() - m2.NumParameters(),
            m2.n_layers * (m2.n_heads * m2.d_model + m2.n_heads + m2.qk_dim()));
  CpuBackend backend;
  const int b = 2, t = 8;
  auto net_m2 = MesaNet::Create(m2, &backend, b, t);
  auto net_gla = MesaNet::Create(gla, &backend, b, t);
  ASSERT_TRUE(net_m2.ok() && net_gla.ok());
  (*net_gla)->InitializeParams(5);
  std::vector<float> gla_params((*net_gla)->num_params());
  (*net_gla)->GetParamsToHost(gla_params.data());
  // Copy every tensor mamba2_mesa has from the GLA model; saturate GLA's β (bias 40: σ = 1 in
  // float32) with a zero b_proj.
  std::vector<float> m2_params((*net_m2)->num_params(), 0.f);
  for (const ParamTensor& t2 : (*net_m2)->layout().tensors()) {
    const int64_t at = (*net_gla)->layout().OffsetOf(t2.name);
    ASSERT_GE(at, 0) << t2.name;
    std::copy_n(gla_params.begin() + at, t2.size, m2_params.begin() + t2.offset);
  }
  for (const ParamTensor& tg : (*net_gla)->layout().tensors()) {
    if (tg.name.find("b_proj.weight") != std::string::npos) {
      std::fill_n(gla_params.begin() + tg.offset, tg.size, 0.f);
    } else if (tg.name.find("b_proj.bias") != std::string::npos) {
      std::fill_n(gla_params.begin() + tg.offset, tg.size, 40.f);
    }
  }
  (*net_gla)->SetParamsFromHost(gla_params.data());
  (*net_m2)->SetParamsFromHost(m2_params.data());
  Batch batch = RandomBatch(b, t, m2.vocab_size, 3, -1);
  const MesaSolve solve{0, 0.0f};
  auto a = (*net_m2)->Forward(batch.tokens.data(), batch.targets.data(), b, solve);
  auto c = (*net_gla)->Forward(batch.tokens.data(), batch.targets.data(), b, solve);
  ASSERT_TRUE(a.ok() && c.ok());
  EXPECT_NEAR(a->loss_sum, c->loss_sum, 1e-4 * std::abs(c->loss_sum));
  // And the same gradients for every tensor the two share (σ'(40) = 0: nothing reaches b_proj).
  (*net_m2)->ZeroGrads();
  (*net_gla)->ZeroGrads();
  ASSERT_TRUE((*net_m2)->Backward(1.0f).ok());
  ASSERT_TRUE((*net_gla)->Backward(1.0f).ok());
  std::vector<float> g2((*net_m2)->num_params()), gg((*net_gla)->num_params());
  (*net_m2)->GetGradsToHost(g2.data());
  (*net_gla)->GetGradsToHost(gg.data());
  for (const ParamTensor& t2 : (*net_m2)->layout().tensors()) {
    const int64_t at = (*net_gla)->layout().OffsetOf(t2.name);
    double diff = 0, norm = 0;
    for (int64_t i = 0; i < t2.size; ++i) {
      diff = std::max(diff, std::abs(double(g2[t2.offset + i]) - gg[at + i]));
      norm = std::max(norm, std::abs(double(gg[at + i])));
    }
    EXPECT_LE(diff, 1e-4 * std::max(norm, 1e-3)) << t2.name;
  }
}

// mLSTM: exponential input gates, the stabilised memory, q and k without normalisation.
TEST(MesaNetTest, GradientsMatchFiniteDifferencesMlstm) {
  CheckModelGradients(MixerKind::kMlstm, kernels::MesaImpl::kChunked, {}, 0.02f);
  CheckModelGradients(MixerKind::kMlstm, kernels::MesaImpl::kReference, {}, 0.02f, 0, true,
                      /*reset_at_bos=*/true);
  CheckModelGradients(MixerKind::kMesa, kernels::MesaImpl::kChunked,
                      {MixerKind::kMlstm, MixerKind::kMesa}, 0.05f, 0, true,
                      /*reset_at_bos=*/true);
}

// Mamba-2's block: the in-projection's row blocks, the conv over x | B | C with SiLU, the SSD
// (softplus dt, A_log, D), the gated RMSNorm and its own output projection; with resets and next
// to a Mesa layer.
TEST(MesaNetTest, GradientsMatchFiniteDifferencesMamba2) {
  CheckModelGradients(MixerKind::kMamba2, kernels::MesaImpl::kChunked, {}, 0.05f);
  CheckModelGradients(MixerKind::kMamba2, kernels::MesaImpl::kReference, {}, 0.05f, 0, true,
                      /*reset_at_bos=*/true);
  CheckModelGradients(MixerKind::kMesa, kernels::MesaImpl::kChunked,
                      {MixerKind::kMamba2, MixerKind::kMesa}, 0.05f, 0, true,
                      /*reset_at_bos=*/true);
}

TEST(MesaNetTest, GradientsMatchFiniteDifferencesHawk) {
  CheckModelGradients(MixerKind::kHawk, kernels::MesaImpl::kChunked, {}, 0.05f);
}

TEST(MesaNetTest, GradientsMatchFiniteDifferencesHawkReference) {
  CheckModelGradients(MixerKind::kHawk, kernels::MesaImpl::kReference, {}, 0.05f);
}

// The MesaNet paper's best recurrent model: Hawk and Mesa layers alternating; with resets.
TEST(MesaNetTest, GradientsMatchFiniteDifferencesHawkMesaWithDocumentResets) {
  CheckModelGradients(MixerKind::kMesa, kernels::MesaImpl::kChunked,
                      {MixerKind::kHawk, MixerKind::kMesa}, 0.05f, 0, true,
                      /*reset_at_bos=*/true);
}

// A Hawk layer owns its projections: no o_norm or o_proj in its block, and the parameter count in
// code and in the spec agree.
TEST(MesaNetTest, HawkLayersHaveTheirOwnOutputPathAndNoHeadNorm) {
  ModelConfig config = TinyConfig(MixerKind::kMesa);
  config.layer_mixers = {MixerKind::kHawk, MixerKind::kMesa};
  config.rnn_width = 20;
  CpuBackend backend;
  auto net = MesaNet::Create(config, &backend, 1, 4);
  ASSERT_TRUE(net.ok()) << net.status();
  const ParamLayout& layout = (*net)->layout();
  EXPECT_EQ(layout.OffsetOf("model.layers.0.attn.o_proj.weight"), -1);
  EXPECT_EQ(layout.OffsetOf("model.layers.0.attn.o_norm.weight"), -1);
  EXPECT_GE(layout.OffsetOf("model.layers.0.attn.linear_out.weight"), 0);
  EXPECT_GE(layout.OffsetOf("model.layers.0.attn.rg_lru.a_param"), 0);
  EXPECT_GE(layout.OffsetOf("model.layers.1.attn.o_proj.weight"), 0);
  EXPECT_EQ(layout.num_values(), config.NumParameters());
}

TEST(MesaNetTest, AttentionLayerIsAMesaLayerWithoutGatesAndLambda) {
  ModelConfig config = TinyConfig(MixerKind::kMesa);
  config.layer_mixers = {MixerKind::kMesa, MixerKind::kAttention};
  const ParamLayout layout(config);
  std::vector<std::string> mesa, attention;
  int64_t mesa_values = 0, attention_values = 0;
  for (const ParamTensor& t : layout.tensors()) {
    if (t.name.rfind("model.layers.0.", 0) == 0) {
      mesa.push_back(t.name.substr(15));
      mesa_values += t.size;
    } else if (t.name.rfind("model.layers.1.", 0) == 0) {
      attention.push_back(t.name.substr(15));
      attention_values += t.size;
    }
  }
  std::vector<std::string> expected;
  for (const std::string& name : mesa) {
    if (name.find("a_proj") == std::string::npos && name.find("b_proj") == std::string::npos &&
        name.find("lambda") == std::string::npos) {
      expected.push_back(name);
    }
  }
  EXPECT_EQ(attention, expected);
  const int64_t h = config.n_heads, c = config.d_model, hd = config.qk_dim();
  EXPECT_EQ(mesa_values - attention_values, 2 * (h * c + h) + hd);
  EXPECT_EQ(config.NumParameters(), layout.num_values());
  EXPECT_EQ(layout.layer(1).mixer[kBWeight], -1);
  EXPECT_EQ(layout.layer(1).mixer[kAWeight], -1);
  EXPECT_EQ(layout.OffsetOf("model.layers.1.attn.lambda_params"), -1);
}

TEST(MesaNetTest, DeltaNetLayersHaveNoLambdaAndDeltaNetNoForgetGate) {
  ModelConfig config = TinyConfig(MixerKind::kMesa);
  config.layer_mixers = {MixerKind::kDeltaNet, MixerKind::kGatedDeltaNet};
  config.cg_steps = 0;
  const ParamLayout layout(config);
  std::vector<std::string> names;
  for (const ParamTensor& t : layout.tensors()) names.push_back(t.name);
  auto has = [&](const std::string& name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  EXPECT_FALSE(has("model.layers.0.attn.a_proj.weight"));
  EXPECT_FALSE(has("model.layers.0.attn.lambda_params"));
  EXPECT_TRUE(has("model.layers.0.attn.b_proj.weight"));
  EXPECT_TRUE(has("model.layers.1.attn.a_proj.weight"));
  EXPECT_FALSE(has("model.layers.1.attn.lambda_params"));
  EXPECT_EQ(layout.OffsetOf("model.layers.0.attn.lambda_params"), -1);
  EXPECT_EQ(layout.layer(0).mixer[kAWeight], -1);
}

TEST(MesaNetTest, HybridLayersSolveOnlyWhereTheyAreMesa) {
  // The forward's mean CG steps average over layers: the GLA layer adds 0, the Mesa layer at most
  // 30 (fewer for tokens whose residual vanishes early), even when asked for 30 everywhere.
  ModelConfig config = TinyConfig(MixerKind::kMesa);
  config.layer_mixers = {MixerKind::kGla, MixerKind::kMesa};
  CpuBackend backend;
  auto net = MesaNet::Create(config, &backend, 1, 8);
  ASSERT_TRUE(net.ok()) << net.status();
  (*net)->InitializeParams(1);
  const Batch batch = RandomBatch(1, 8, config.vocab_size, 5, -1);
  auto stats = (*net)->Forward(batch.tokens.data(), batch.targets.data(), 1, MesaSolve{30, 0.0f});
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_GT(stats->cg_steps_mean, 0.0);
  EXPECT_LE(stats->cg_steps_mean, 15.0);
  config.layer_mixers = {MixerKind::kGla, MixerKind::kGla};
  config.cg_steps = 0;  // no layer solves, so no step count applies
  auto gla = MesaNet::Create(config, &backend, 1, 8);
  ASSERT_TRUE(gla.ok());
  (*gla)->InitializeParams(1);
  stats = (*gla)->Forward(batch.tokens.data(), batch.targets.data(), 1, MesaSolve{30, 0.0f});
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->cg_steps_mean, 0.0) << "no layer solves";
  ModelConfig uniform = TinyConfig(MixerKind::kMesa);
  auto dense = MesaNet::Create(uniform, &backend, 1, 8);
  ASSERT_TRUE(dense.ok());
  EXPECT_LT((*net)->TrainFlopsPerToken(30), (*dense)->TrainFlopsPerToken(30))
      << "CG FLOPs are counted for Mesa layers only";
}

TEST(MesaNetTest, CausalAndDeterministic) {
  const ModelConfig config = TinyConfig(MixerKind::kMesa);
  CpuBackend backend;
  const int b = 1, t = 12;
  auto net = MesaNet::Create(config, &backend, b, t);
  ASSERT_TRUE(net.ok());
  (*net)->InitializeParams(1);
  Batch batch = RandomBatch(b, t, 256, 5, -1);
  const MesaSolve solve{30, 0.0f};
  ASSERT_TRUE((*net)->Forward(batch.tokens.data(), batch.targets.data(), b, solve).ok());
  std::vector<float> before, again, after;
  (*net)->CopyLossesToHost(&before);
  ASSERT_TRUE((*net)->Forward(batch.tokens.data(), batch.targets.data(), b, solve).ok());
  (*net)->CopyLossesToHost(&again);
  EXPECT_EQ(before, again);
  batch.tokens[8] = (batch.tokens[8] + 1) % 256;
  ASSERT_TRUE((*net)->Forward(batch.tokens.data(), batch.targets.data(), b, solve).ok());
  (*net)->CopyLossesToHost(&after);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(before[i], after[i]) << "position " << i;
  EXPECT_NE(before[8], after[8]);
}

TEST(MesaNetTest, InitialLossIsNearUniform) {
  ModelConfig config = TinyConfig(MixerKind::kGla);
  config.d_model = 64;
  config.mlp_hidden = 192;
  CpuBackend backend;
  auto net = MesaNet::Create(config, &backend, 4, 32);
  ASSERT_TRUE(net.ok());
  (*net)->InitializeParams(42);
  Batch batch = RandomBatch(4, 32, 256, 9, -1);
  auto stats = (*net)->Forward(batch.tokens.data(), batch.targets.data(), 4, MesaSolve{0, 0});
  ASSERT_TRUE(stats.ok());
  const double mean = stats->loss_sum / stats->loss_tokens;
  EXPECT_NEAR(mean, std::log(259.0), 1.0);
  // Tensor names follow the public checkpoints.
  EXPECT_EQ((*net)->layout().tensors().front().name, "model.embeddings.weight");
  EXPECT_EQ((*net)->layout().tensors().back().name, "model.norm.weight");
}

TEST(MesaNetTest, RejectsOutOfVocabularyTokens) {
  const ModelConfig config = TinyConfig(MixerKind::kGla);
  CpuBackend backend;
  auto net = MesaNet::Create(config, &backend, 1, 4);
  ASSERT_TRUE(net.ok());
  std::vector<int32_t> tokens = {1, 2, 999, 3}, targets = {1, 2, 3, 4};
  auto stats = (*net)->Forward(tokens.data(), targets.data(), 1, MesaSolve{0, 0});
  EXPECT_FALSE(stats.ok());
  EXPECT_NE(stats.status().message().find("vocabulary"), std::string::npos);
}

TEST(MesaNetTest, APlanOverTheProcesssMemoryLimitIsRefusedNamingTheLimit) {
  // Regression: admission compared against physical RAM; under a tighter limit the trainer was
  // OOM-killed, classed as infrastructure and retried to death. A child process under RLIMIT_AS
  // (a real limit) asks for a plan of about 1.5 GiB.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    rlimit current;
    getrlimit(RLIMIT_AS, &current);
    if (current.rlim_cur != RLIM_INFINITY) _exit(2);
    std::ifstream statm("/proc/self/statm");
    int64_t pages = 0;
    statm >> pages;
    const rlim_t cap = pages * sysconf(_SC_PAGE_SIZE) + (rlim_t{512} << 20);
    rlimit limit{cap, cap};
    if (setrlimit(RLIMIT_AS, &limit) != 0) _exit(3);
    ModelConfig config = TinyConfig(MixerKind::kGla);
    CpuBackend backend;
    auto net = MesaNet::Create(config, &backend, 64, 4096);
    const bool refused = !net.ok() && net.status().code() == absl::StatusCode::kResourceExhausted &&
                         net.status().message().find("limited by RLIMIT_AS") != std::string::npos;
    if (!refused) fprintf(stderr, "%s\n", net.status().ToString().c_str());
    // The numbers say why: what is needed exceeds the budget it is compared against (90% of the
    // headroom), never a headroom larger than the need.
    const std::string message(net.status().message());
    long long need = 0, budget = 0, headroom = 0;
    const size_t at = message.find("needs about ");
    const size_t budget_at = message.find("budget of ");
    const bool numbers =
        at != std::string::npos && budget_at != std::string::npos &&
        std::sscanf(message.c_str() + at, "needs about %lld MiB", &need) == 1 &&
        std::sscanf(message.c_str() + budget_at, "budget of %lld MiB (90%% of the %lld MiB",
                    &budget, &headroom) == 2 &&
        need > budget && budget <= headroom * 9 / 10 + 1 && budget >= headroom * 9 / 10 - 1;
    if (refused && !numbers) fprintf(stderr, "numbers: %s\n", message.c_str());
    _exit(refused && numbers ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 2) GTEST_SKIP() << "RLIMIT_AS is already set here";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// A Forward of a 3-layer Mesa model on random (perturbed) parameters, ready for Backward.
struct HookFixture {
  HookFixture() : backend(Options()) {
    config = TinyConfig(MixerKind::kMesa);
    config.n_layers = 3;
    auto net_or = MesaNet::Create(config, &backend, kBatch, kSeq);
    EXPECT_TRUE(net_or.ok()) << net_or.status();
    net = std::move(*net_or);
    net->InitializeParams(5);
    batch = RandomBatch(kBatch, kSeq, config.vocab_size, 13, config.bos_token);
  }
  static CpuBackendOptions Options() {
    CpuBackendOptions options;
    options.num_threads = 1;
    return options;
  }
  void Forward() {
    net->ZeroGrads();
    auto stats = net->Forward(batch.tokens.data(), batch.targets.data(), kBatch,
                              MesaSolve{config.cg_steps, 0.0f});
    ASSERT_TRUE(stats.ok()) << stats.status();
  }
  // The documented order: final norm, layers last to first, then the embedding.
  std::vector<std::pair<int64_t, int64_t>> ExpectedRanges() const {
    const ParamLayout& layout = net->layout();
    std::vector<std::pair<int64_t, int64_t>> ranges = {
        {layout.final_norm(), layout.total() - layout.final_norm()}};
    for (int l = config.n_layers - 1; l >= 0; --l) {
      const int64_t end =
          l + 1 < config.n_layers ? layout.layer(l + 1).attn_norm : layout.final_norm();
      ranges.push_back({layout.layer(l).attn_norm, end - layout.layer(l).attn_norm});
    }
    ranges.push_back({layout.embeddings(), layout.layer(0).attn_norm - layout.embeddings()});
    return ranges;
  }

  static constexpr int kBatch = 2, kSeq = 8;
  ModelConfig config;
  CpuBackend backend;
  std::unique_ptr<MesaNet> net;
  Batch batch;
};

TEST(MesaNetTest, GradsReadyRangesAreOrderedDisjointCompleteAndFinal) {
  HookFixture fx;
  MesaNet& net = *fx.net;
  // Reference gradients without a hook.
  fx.Forward();
  ASSERT_TRUE(net.Backward(1.0f).ok());
  std::vector<float> reference(net.num_params());
  net.GetGradsToHost(reference.data());

  fx.Forward();
  std::vector<std::pair<int64_t, int64_t>> ranges;
  std::vector<std::vector<float>> snapshots;
  auto status_or = net.Backward(1.0f, [&](int64_t offset, int64_t n) {
    ranges.push_back({offset, n});
    // The CPU backend is synchronous: what is there now is what the reduction would send.
    std::vector<float> snapshot(n);
    fx.backend.CopyToHost(snapshot.data(), net.grads() + offset, sizeof(float) * n);
    snapshots.push_back(std::move(snapshot));
    return absl::OkStatus();
  });
  ASSERT_TRUE(status_or.ok()) << status_or.status();
  std::vector<float> grads(net.num_params());
  net.GetGradsToHost(grads.data());
  EXPECT_EQ(grads, reference);  // the hook does not change the result

  EXPECT_EQ(ranges, fx.ExpectedRanges());
  // Disjoint and covering [0, num_params) exactly.
  std::vector<std::pair<int64_t, int64_t>> sorted = ranges;
  std::sort(sorted.begin(), sorted.end());
  int64_t next = 0;
  for (const auto& [offset, n] : sorted) {
    EXPECT_EQ(offset, next);
    EXPECT_GT(n, 0);
    next = offset + n;
  }
  EXPECT_EQ(next, net.num_params());
  // Each range was already final when it was handed out.
  for (size_t i = 0; i < ranges.size(); ++i) {
    const auto [offset, n] = ranges[i];
    const std::vector<float> final_values(grads.begin() + offset, grads.begin() + offset + n);
    EXPECT_EQ(snapshots[i], final_values) << "range " << i << " at offset " << offset;
  }
}

TEST(MesaNetTest, GradsReadyErrorStopsBackward) {
  HookFixture fx;
  fx.Forward();
  int calls = 0;
  auto result = fx.net->Backward(1.0f, [&](int64_t, int64_t) {
    return ++calls == 2 ? absl::UnavailableError("peer went away") : absl::OkStatus();
  });
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(result.status().message(), "peer went away");
  EXPECT_EQ(calls, 2);
}

TEST(MesaNetTest, NonFiniteBackwardStillReportsEveryRangeAndPoisonsGradients) {
  // A NaN loss scale reaches the Mesa operator, which refuses it: the step must be skipped, and
  // every range must still be handed out (other ranks wait for the same collectives).
  HookFixture fx;
  fx.Forward();
  std::vector<std::pair<int64_t, int64_t>> ranges;
  auto cg = fx.net->Backward(NAN, [&](int64_t offset, int64_t n) {
    ranges.push_back({offset, n});
    return absl::OkStatus();
  });
  ASSERT_TRUE(cg.ok()) << cg.status();
  EXPECT_TRUE(std::isnan(*cg));
  EXPECT_EQ(ranges, fx.ExpectedRanges());
  std::vector<float> grads(fx.net->num_params());
  fx.net->GetGradsToHost(grads.data());
  EXPECT_TRUE(std::any_of(grads.begin(), grads.end(), [](float g) { return std::isnan(g); }));
}

TEST(MesaNetTest, LogitsToHostDropsRowPadding) {
  ModelConfig config = TinyConfig(MixerKind::kGla);
  config.vocab_size = 259;  // padded to 264 logit columns
  CpuBackend backend;
  const int b = 1, t = 4;
  auto net = MesaNet::Create(config, &backend, b, t);
  ASSERT_TRUE(net.ok());
  ASSERT_GT((*net)->logits_ld(), config.vocab_size);
  (*net)->InitializeParams(3);
  Batch batch = RandomBatch(b, t, 256, 2, -1);
  auto stats = (*net)->Forward(batch.tokens.data(), batch.targets.data(), b, MesaSolve{0, 0});
  ASSERT_TRUE(stats.ok());
  std::vector<float> logits, losses;
  (*net)->CopyLogitsToHost(&logits);
  (*net)->CopyLossesToHost(&losses);
  ASSERT_EQ(logits.size(), size_t{b * t} * config.vocab_size);
  // Each row's loss recomputed from the host logits (softcap, then log-softmax).
  for (int r = 0; r < b * t; ++r) {
    const float* row = logits.data() + int64_t{r} * config.vocab_size;
    double max = -INFINITY, sum = 0;
    std::vector<double> capped(config.vocab_size);
    for (int j = 0; j < config.vocab_size; ++j) {
      capped[j] = config.logit_softcap * std::tanh(row[j] / config.logit_softcap);
      max = std::max(max, capped[j]);
    }
    for (double x : capped) sum += std::exp(x - max);
    const double loss = std::log(sum) + max - capped[batch.targets[r]];
    EXPECT_NEAR(losses[r], loss, 1e-4) << "row " << r;
  }
}

TEST(MesaNetTest, UnembeddingPaddingRowsStayZeroAndAddNothing) {
  ModelConfig config = TinyConfig(MixerKind::kMesa);
  config.vocab_size = 259;  // padded to 264 rows
  CpuBackend backend;
  const int b = 2, t = 8;
  auto net_or = MesaNet::Create(config, &backend, b, t);
  ASSERT_TRUE(net_or.ok());
  MesaNet& net = **net_or;
  const ParamLayout& layout = net.layout();
  ASSERT_EQ(layout.padded_vocab(), 264);
  ASSERT_EQ(net.logits_ld(), 264);
  const int64_t c = config.d_model, pad_begin = layout.embeddings() + 259 * c,
                pad_end = layout.embeddings() + 264 * c;
  ASSERT_LE(pad_end, layout.layer(0).attn_norm);
  net.InitializeParams(5);
  std::vector<float> params(net.num_params());
  net.GetParamsToHost(params.data());
  for (int64_t i = pad_begin; i < pad_end; ++i) EXPECT_EQ(params[i], 0.0f);
  // Garbage in the padding rows is dropped: the model keeps them zero.
  for (int64_t i = pad_begin; i < pad_end; ++i) params[i] = 1e3f;
  net.SetParamsFromHost(params.data());
  std::vector<float> stored(net.num_params());
  net.GetParamsToHost(stored.data());
  for (int64_t i = pad_begin; i < pad_end; ++i) ASSERT_EQ(stored[i], 0.0f);

  const Batch batch = RandomBatch(b, t, config.vocab_size, 4, config.bos_token);
  auto stats = net.Forward(batch.tokens.data(), batch.targets.data(), b, MesaSolve{4, 0});
  ASSERT_TRUE(stats.ok());
  ASSERT_TRUE(net.Backward(1.0f).ok());
  std::vector<float> grads(net.num_params());
  net.GetGradsToHost(grads.data());
  for (int64_t i = pad_begin; i < pad_end; ++i) ASSERT_EQ(grads[i], 0.0f) << i;
  double embedding_sq = 0;
  for (int64_t i = layout.embeddings(); i < pad_begin; ++i) embedding_sq += grads[i] * grads[i];
  EXPECT_GT(embedding_sq, 0.0);
}

TEST(MesaNetTest, ParameterTensorsAreAlignedForTheGemms) {
  const ParamLayout layout(TinyConfig(MixerKind::kMesa));
  int64_t values = 0, end = 0;
  for (const ParamTensor& t : layout.tensors()) {
    EXPECT_EQ(t.offset % ParamLayout::kTensorAlign, 0) << t.name;
    EXPECT_GE(t.offset, end) << t.name;  // in order, no overlap
    end = t.offset + t.size;
    values += t.size;
  }
  EXPECT_EQ(layout.num_values(), values);
  EXPECT_EQ(layout.total(), end);
  EXPECT_GT(layout.total(), layout.num_values());  // the tiny config has unaligned tensors
}

TEST(MesaNetTest, ActivationBytesCountBothPools) {
  const ModelConfig config = TinyConfig(MixerKind::kMesa);
  CpuBackend backend;
  auto net = MesaNet::Create(config, &backend, 2, 8);
  ASSERT_TRUE(net.ok());
  EXPECT_GT((*net)->activation_bytes_total(), 0);
  EXPECT_EQ((*net)->activation_bytes_total() % 256, 0);  // every sub-buffer is 256-byte rounded
  EXPECT_EQ((*net)->activation_floats() * 4, (*net)->activation_bytes_total());
}

}  // namespace
}  // namespace mesa::model
