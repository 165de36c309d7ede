// Small models for tests (testonly): a tiny MesaNet of given layers and parameters moved away from
// their initialisation, so that every layer's state shows in the logits.
#ifndef MESANET_MODEL_NET_TEST_MODELS_H_
#define MESANET_MODEL_NET_TEST_MODELS_H_

#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/limits.h"
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
  config.cg_steps = config.MesaLayers() > 0 ? kernels::kDefaultCgSteps : 0;
  config.bos_token = bos_token;
  // Hawk layers: 2 gate blocks of 20 (D_rnn = 1.25 d_model, the default multiplier).
  if (config.LayersOf(MixerKind::kHawk) > 0) {
    config.rnn_width = static_cast<int>(spec::RnnWidthOf(config.d_model, 0));
  }
  // Mamba-2 layers: d_in = 2 d_model in 4 SSD heads of 16, a state of 8.
  if (config.LayersOf(MixerKind::kMamba2) > 0) {
    config.ssm_inner = 2 * config.d_model;
    config.ssm_head_dim = 16;
    config.ssm_state = 8;
  }
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

// New parameters mid-decoding: one row decodes `tokens` one step at a time, the first `switch_at`
// with params `a`, the rest after SetParamsFromHost(b) on the same net and state (what a changed
// checkpoint does to a running decoder), and the same steps are run with the rest on a second net
// made with `b` continuing that state. Returns both runs' logits of the steps after the switch,
// which must be equal: anything derived from the parameters and kept between steps (converted
// weights, λ, a recorded step) must follow SetParamsFromHost.
struct ParamSwitchLogits {
  std::vector<float> switched, fresh;
};
inline ParamSwitchLogits DecodeAcrossParamSwitch(const ModelConfig& config, Backend* backend,
                                                 const std::vector<float>& a,
                                                 const std::vector<float>& b,
                                                 const std::vector<int32_t>& tokens, int switch_at,
                                                 const MesaSolve& solve) {
  ParamSwitchLogits out;
  for (const bool switched : {true, false}) {
    auto net = MesaNet::Create(config, backend, 1, 8);
    auto other = MesaNet::Create(config, backend, 1, 8);
    EXPECT_TRUE(net.ok() && other.ok());
    if (!net.ok() || !other.ok()) return out;
    (*net)->SetParamsFromHost(a.data());
    (*other)->SetParamsFromHost(b.data());
    auto state = (*net)->NewDecodeState(1);
    EXPECT_TRUE(state.ok());
    if (!state.ok()) return out;
    std::vector<float> logits;
    for (int s = 0; s < static_cast<int>(tokens.size()); ++s) {
      if (s == switch_at && switched) (*net)->SetParamsFromHost(b.data());
      MesaNet& step_net = s < switch_at || switched ? **net : **other;
      EXPECT_TRUE(step_net.Advance(&tokens[s], 1, 1, solve, **state, 0).ok());
      if (s < switch_at) continue;
      step_net.CopyLogitsToHost(&logits);
      std::vector<float>& into = switched ? out.switched : out.fresh;
      into.insert(into.end(), logits.begin(), logits.end());
    }
  }
  return out;
}

}  // namespace mesa::model

#endif  // MESANET_MODEL_NET_TEST_MODELS_H_
