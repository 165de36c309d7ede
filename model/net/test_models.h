// Small models for tests (testonly): a tiny MesaNet of given layers and parameters moved away from
// their initialisation, so that every layer's state shows in the logits.
#ifndef MESANET_MODEL_NET_TEST_MODELS_H_
#define MESANET_MODEL_NET_TEST_MODELS_H_

#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "model/net/mesanet.h"

namespace mesa::model {

// d_model 32, 2 heads of 16, MLP 64; 30 CG steps when a layer is Mesa.
inline ModelConfig SmallTestConfig(const std::vector<MixerKind>& layers, int vocab_size,
                                   int bos_token) {
  ModelConfig config;
  config.vocab_size = vocab_size;
  config.d_model = 32;
  config.n_layers = static_cast<int>(layers.size());
  config.n_heads = 2;
  config.head_dim = 16;
  config.mlp_hidden = 64;
  config.layer_mixers = layers;
  config.cg_steps = config.MesaLayers() > 0 ? 30 : 0;
  config.bos_token = bos_token;
  return config;
}

// The initial parameters of `init_seed` plus normal noise of `sigma` (seeded by `noise_seed`).
inline std::vector<float> NoisyTestParams(const ModelConfig& config, Backend* backend,
                                          uint64_t init_seed, uint32_t noise_seed, float sigma) {
  auto net = MesaNet::Create(config, backend, 1, 1);
  EXPECT_TRUE(net.ok()) << net.status();
  if (!net.ok()) return {};
  (*net)->InitializeParams(init_seed);
  std::vector<float> params((*net)->num_params());
  (*net)->GetParamsToHost(params.data());
  std::mt19937 rng(noise_seed);
  std::normal_distribution<float> noise(0.0f, sigma);
  for (float& p : params) p += noise(rng);
  return params;
}

}  // namespace mesa::model

#endif  // MESANET_MODEL_NET_TEST_MODELS_H_
