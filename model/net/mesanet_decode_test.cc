// Decoding through MesaNet::Advance: prefill in pieces and one-token steps continue every layer's
// recurrent state (operator state and convolution tails) exactly as the whole sequence's forward
// does, for every mixer, on the CPU in float32.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/backend/cpu_backend.h"
#include "model/net/mesanet.h"
#include "model/net/test_models.h"
#include "spec/mixers.h"

namespace mesa::model {
namespace {

// `window`: model.attention_window, for attention layers (16: shorter than most prompts below, so
// the sliding-window ring buffer wraps, also within one prefill piece).
ModelConfig DecodeConfig(std::vector<MixerKind> layers, int window = 0) {
  ModelConfig config = SmallTestConfig(layers, /*vocab_size=*/97, /*bos_token=*/96);
  config.attention_window = window;
  return config;
}

std::vector<float> NoisyParams(const ModelConfig& config, Backend* backend, uint32_t seed) {
  return NoisyTestParams(config, backend, seed, seed, 0.05f);
}

std::vector<int32_t> RandomTokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(0, vocab - 1);
  std::vector<int32_t> tokens(n);
  for (int32_t& t : tokens) t = dist(rng);
  return tokens;
}

// Logits [rows * T, vocab] of the whole-sequence forward of `tokens` ([rows, T]).
std::vector<float> FullLogits(const ModelConfig& config, Backend* backend,
                              const std::vector<float>& params, const std::vector<int32_t>& tokens,
                              int rows, const MesaSolve& solve) {
  const int t = static_cast<int>(tokens.size()) / rows;
  auto net = MesaNet::Create(config, backend, rows, t);
  EXPECT_TRUE(net.ok()) << net.status();
  (*net)->SetParamsFromHost(params.data());
  auto stats = (*net)->Forward(tokens.data(), tokens.data(), rows, solve);
  EXPECT_TRUE(stats.ok()) << stats.status();
  std::vector<float> logits;
  (*net)->CopyLogitsToHost(&logits);
  return logits;
}

double MaxRelDiff(const float* a, const float* b, int64_t n) {
  double diff = 0, scale = 1e-6;
  for (int64_t i = 0; i < n; ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return diff / scale;
}

struct Case {
  std::string name;
  std::vector<MixerKind> layers;
  int window = 0;
};

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (const spec::MixerTraits& m : spec::kMixers) {
    // "swa" needs a window; "attention" is global here and windowed below.
    cases.push_back({std::string(m.name), {m.kind, m.kind}, m.kind == MixerKind::kSwa ? 16 : 0});
  }
  cases.push_back({"deltanet_mesa", {MixerKind::kDeltaNet, MixerKind::kMesa}});
  cases.push_back({"hawk_mesa", {MixerKind::kHawk, MixerKind::kMesa}});
  cases.push_back({"attention_window_16", {MixerKind::kAttention, MixerKind::kAttention}, 16});
  cases.push_back({"mesa_attention", {MixerKind::kMesa, MixerKind::kAttention}});
  cases.push_back({"deltanet_swa", {MixerKind::kDeltaNet, MixerKind::kSwa}, 16});
  cases.push_back({"swa_attention", {MixerKind::kSwa, MixerKind::kAttention}, 16});  // local+global
  return cases;
}

class DecodeTest : public ::testing::TestWithParam<kernels::MesaImpl> {
 protected:
  CpuBackend Backend() const {
    CpuBackendOptions options;
    options.num_threads = 2;
    options.mesa_impl = GetParam();
    return CpuBackend(options);
  }
  // The float64 reference solves exactly on both paths; the chunked float32 op rounds
  // differently per chunk layout.
  double Tol() const { return GetParam() == kernels::MesaImpl::kReference ? 2e-5 : 2e-4; }
};

// Prefill of T-1 tokens (without logits: only the state is needed), then one decoding step: the
// step's logits are the full forward's at position T-1, for T around the chunk size (64) and past
// it.
TEST_P(DecodeTest, PrefillThenOneStepMatchesTheFullForward) {
  CpuBackend backend = Backend();
  for (const Case& c : Cases()) {
    const ModelConfig config = DecodeConfig(c.layers, c.window);
    const MesaSolve solve{config.cg_steps, 0.0f};
    const std::vector<float> params = NoisyParams(config, &backend, 3);
    for (const int t : {1, 63, 64, 65, 200}) {
      const std::vector<int32_t> tokens = RandomTokens(t, config.vocab_size, 100 + t);
      const std::vector<float> full = FullLogits(config, &backend, params, tokens, 1, solve);
      auto net = MesaNet::Create(config, &backend, 1, 64);
      ASSERT_TRUE(net.ok()) << net.status();
      (*net)->SetParamsFromHost(params.data());
      auto state = (*net)->NewDecodeState(1);
      ASSERT_TRUE(state.ok()) << state.status();
      for (int begin = 0; begin < t - 1; begin += 64) {  // prefill in chunks of at most 64
        const int n = std::min(64, t - 1 - begin);
        ASSERT_TRUE((*net)
                        ->Advance(tokens.data() + begin, 1, n, solve, **state, 0,
                                  /*logits=*/false)
                        .ok());
        // No logits: no losses to take of them.
        std::vector<float> none;
        EXPECT_EQ((*net)->LossesOfLastAdvance(tokens.data() + begin, &none).code(),
                  absl::StatusCode::kFailedPrecondition);
      }
      ASSERT_TRUE((*net)->Advance(tokens.data() + t - 1, 1, 1, solve, **state, 0).ok());
      std::vector<float> step;
      (*net)->CopyLogitsToHost(&step);
      ASSERT_EQ(step.size(), static_cast<size_t>(config.vocab_size));
      const double err =
          MaxRelDiff(step.data(), full.data() + (t - 1) * config.vocab_size, config.vocab_size);
      EXPECT_LT(err, Tol()) << c.name << " T=" << t;
    }
  }
}

// A prompt in uneven pieces (with single tokens among them) gives the full forward's logits at
// every position.
TEST_P(DecodeTest, UnevenPiecesMatchTheFullForwardEverywhere) {
  CpuBackend backend = Backend();
  const std::vector<int> pieces = {17, 1, 40, 64, 3, 1, 1, 33};
  int total = 0;
  for (int n : pieces) total += n;
  for (const Case& c : Cases()) {
    const ModelConfig config = DecodeConfig(c.layers, c.window);
    const MesaSolve solve{config.cg_steps, 0.0f};
    const std::vector<float> params = NoisyParams(config, &backend, 4);
    const std::vector<int32_t> tokens = RandomTokens(total, config.vocab_size, 7);
    const std::vector<float> full = FullLogits(config, &backend, params, tokens, 1, solve);
    auto net = MesaNet::Create(config, &backend, 1, 64);
    ASSERT_TRUE(net.ok()) << net.status();
    (*net)->SetParamsFromHost(params.data());
    auto state = (*net)->NewDecodeState(1);
    ASSERT_TRUE(state.ok());
    int begin = 0;
    for (int n : pieces) {
      ASSERT_TRUE((*net)->Advance(tokens.data() + begin, 1, n, solve, **state, 0).ok());
      std::vector<float> logits;
      (*net)->CopyLogitsToHost(&logits);
      const double err = MaxRelDiff(logits.data(), full.data() + begin * config.vocab_size,
                                    int64_t{n} * config.vocab_size);
      EXPECT_LT(err, Tol()) << c.name << " piece at " << begin << " of " << n;
      begin += n;
    }
  }
}

// Two prompts of different lengths, each prefilled on its own row, then decoded together: each
// row follows its own sequence.
TEST_P(DecodeTest, RowsOfDifferentLengthsDecodeTogether) {
  CpuBackend backend = Backend();
  for (const Case& c : Cases()) {
    const ModelConfig config = DecodeConfig(c.layers, c.window);
    const MesaSolve solve{config.cg_steps, 0.0f};
    const std::vector<float> params = NoisyParams(config, &backend, 5);
    const std::vector<int> lengths = {37, 90};
    std::vector<std::vector<int32_t>> seqs;
    for (int r = 0; r < 2; ++r) seqs.push_back(RandomTokens(lengths[r] + 3, config.vocab_size, r));
    auto net = MesaNet::Create(config, &backend, 2, 64);
    ASSERT_TRUE(net.ok());
    (*net)->SetParamsFromHost(params.data());
    auto state = (*net)->NewDecodeState(2);
    ASSERT_TRUE(state.ok());
    for (int r = 0; r < 2; ++r) {
      for (int begin = 0; begin < lengths[r]; begin += 64) {
        const int n = std::min(64, lengths[r] - begin);
        ASSERT_TRUE((*net)->Advance(seqs[r].data() + begin, 1, n, solve, **state, r).ok());
      }
    }
    for (int step = 0; step < 3; ++step) {
      const int32_t next[2] = {seqs[0][lengths[0] + step], seqs[1][lengths[1] + step]};
      ASSERT_TRUE((*net)->Advance(next, 2, 1, solve, **state, 0).ok());
      std::vector<float> logits;
      (*net)->CopyLogitsToHost(&logits);
      for (int r = 0; r < 2; ++r) {
        std::vector<int32_t> prefix(seqs[r].begin(), seqs[r].begin() + lengths[r] + step + 1);
        const std::vector<float> full = FullLogits(config, &backend, params, prefix, 1, solve);
        const double err =
            MaxRelDiff(logits.data() + r * config.vocab_size,
                       full.data() + (prefix.size() - 1) * config.vocab_size, config.vocab_size);
        EXPECT_LT(err, Tol()) << c.name << " row " << r << " step " << step;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Impl, DecodeTest,
                         ::testing::Values(kernels::MesaImpl::kReference,
                                           kernels::MesaImpl::kChunked),
                         [](const auto& info) {
                           return info.param == kernels::MesaImpl::kReference ? "Reference"
                                                                              : "Chunked";
                         });

// A CPU backend that counts what is allocated and still alive.
class CountingBackend final : public CpuBackend {
 public:
  using CpuBackend::CpuBackend;
  float* AllocateFloats(int64_t n) override {
    ++allocations;
    return CpuBackend::AllocateFloats(n);
  }
  Act AllocateActivations(int64_t n) override {
    ++allocations;
    return CpuBackend::AllocateActivations(n);
  }
  int32_t* AllocateInts(int64_t n) override {
    ++allocations;
    return CpuBackend::AllocateInts(n);
  }
  int64_t allocations = 0;
};

// Decoding after SetParamsFromHost uses the new parameters everywhere (the steps reuse λ and the
// converted weights while the parameters stay the same).
TEST(DecodeParamsTest, NewParametersReachTheNextSteps) {
  CpuBackend backend;
  const ModelConfig config = DecodeConfig({MixerKind::kMesa, MixerKind::kGatedDeltaNet});
  const std::vector<float> a = NoisyParams(config, &backend, 1),
                           b = NoisyParams(config, &backend, 2);
  const ParamSwitchLogits logits = DecodeAcrossParamSwitch(
      config, &backend, a, b, RandomTokens(7, config.vocab_size, 4), 3, {config.cg_steps, 0.0f});
  ASSERT_FALSE(logits.fresh.empty());
  EXPECT_EQ(logits.switched, logits.fresh);
}

// The backend's live allocations after each of `steps` single decoding tokens of one sequence.
std::vector<int64_t> AllocationsPerToken(const ModelConfig& config, int steps) {
  CpuBackendOptions options;
  options.num_threads = 1;
  CountingBackend backend(options);
  const MesaSolve solve{config.cg_steps, 0.0f};
  std::vector<int64_t> allocations;
  auto net = MesaNet::Create(config, &backend, 1, 8);
  EXPECT_TRUE(net.ok()) << net.status();
  if (!net.ok()) return allocations;
  (*net)->InitializeParams(1);
  auto state = (*net)->NewDecodeState(1);
  EXPECT_TRUE(state.ok()) << state.status();
  if (!state.ok()) return allocations;
  int32_t token = 5;
  for (int step = 0; step < steps; ++step) {
    const auto stats = (*net)->Advance(&token, 1, 1, solve, **state, 0);
    EXPECT_TRUE(stats.ok()) << stats.status();
    if (!stats.ok()) break;
    token = (token * 31 + 7) % config.vocab_size;
    allocations.push_back(backend.allocations);
  }
  return allocations;
}

// Memory does not grow with the context: after the first steps, thousands more allocate nothing.
TEST(DecodeMemoryTest, TenThousandStepsAllocateNothingMore) {
  const std::vector<int64_t> allocations =
      AllocationsPerToken(DecodeConfig({MixerKind::kDeltaNet, MixerKind::kMesa}), 10000);
  ASSERT_EQ(allocations.size(), 10000u);
  EXPECT_EQ(allocations.back(), allocations[99]);
}

// The same with sliding-window attention layers: their KV cache is a ring buffer of the window.
TEST(DecodeMemoryTest, SlidingWindowCacheAllocatesNothingMore) {
  const std::vector<int64_t> allocations =
      AllocationsPerToken(DecodeConfig({MixerKind::kMesa, MixerKind::kSwa}, /*window=*/32), 3000);
  ASSERT_EQ(allocations.size(), 3000u);
  EXPECT_EQ(allocations.back(), allocations[99]);
}

// Global attention's cache grows with the context, doubling from 256 slots: it allocates when a
// sequence reaches 257 and 513 tokens, and not in between.
TEST(DecodeMemoryTest, GlobalAttentionCacheGrowsByDoubling) {
  const std::vector<int64_t> allocations =
      AllocationsPerToken(DecodeConfig({MixerKind::kAttention}), 600);
  ASSERT_EQ(allocations.size(), 600u);
  EXPECT_EQ(allocations[255], allocations[0]);    // 256 tokens fit the first cache
  EXPECT_GT(allocations[256], allocations[255]);  // the 257th grows it to 512
  EXPECT_EQ(allocations[511], allocations[256]);
  EXPECT_GT(allocations[512], allocations[511]);  // and the 513th to 1024
  EXPECT_EQ(allocations[599], allocations[512]);
}

// A CPU backend that sums the bytes of what it allocates.
class ByteCountingBackend final : public CpuBackend {
 public:
  float* AllocateFloats(int64_t n) override {
    bytes += n * 4;
    return CpuBackend::AllocateFloats(n);
  }
  Act AllocateActivations(int64_t n) override {
    bytes += n * 4;
    return CpuBackend::AllocateActivations(n);
  }
  int32_t* AllocateInts(int64_t n) override {
    bytes += n * 4;
    return CpuBackend::AllocateInts(n);
  }
  int64_t bytes = 0;
};

// Hawk's decoding state at the MesaNet paper's small size (d_model 768, 6 heads, D_rnn 960, conv
// 4), measured as what a layer's state allocates per sequence: h (3,840 B), the conv tail of 3
// inputs (11,520 B) and the started flag (4 B), 15,364 B per layer, 215 KB for 14 layers. A Mesa
// layer's state allocates more than 50x that on this backend (printed).
TEST(DecodeMemoryTest, HawkStateIsHTailAndStartedFlag) {
  ModelConfig config = DecodeConfig({MixerKind::kHawk});
  config.d_model = 768;
  config.n_heads = 6;
  config.head_dim = 128;
  config.rnn_width = 960;
  config.mlp_hidden = 2304;
  ByteCountingBackend backend;
  for (int rows : {1, 8}) {
    backend.bytes = 0;
    auto state = MakeMixerLayer(MixerKind::kHawk, config)->NewState(backend, rows);
    ASSERT_TRUE(state.ok()) << state.status();
    EXPECT_EQ(backend.bytes, 15364 * rows);
  }
  EXPECT_EQ(14 * 15364, 215096);
  config.layer_mixers = {MixerKind::kMesa};
  config.rnn_width = 0;
  backend.bytes = 0;
  auto mesa = MakeMixerLayer(MixerKind::kMesa, config)->NewState(backend, 1);
  ASSERT_TRUE(mesa.ok());
  std::printf("decode state per sequence and layer: hawk 15364 B, mesa %lld B (%.1fx)\n",
              static_cast<long long>(backend.bytes), backend.bytes / 15364.0);
  EXPECT_GT(backend.bytes, 50 * 15364);
}

// Mamba-2's decoding state at the MesaNet paper's small width (d_model 768, d_in 1536 in 24 SSD
// heads of 64, N 128, conv 4): S (24 x 64 x 128 floats, 786,432 B) and the conv tail of 3
// pre-convolution rows of d_in + 2N = 1792 (21,504 B): 807,936 B per sequence and layer, the same
// order as Mesa's 2 H D^2 (MIXERS-2's table).
TEST(DecodeMemoryTest, Mamba2StateIsSAndConvTail) {
  ModelConfig config = DecodeConfig({MixerKind::kMamba2});
  config.d_model = 768;
  config.n_heads = 6;
  config.head_dim = 128;
  config.mlp_hidden = 2304;
  config.ssm_inner = 1536;
  config.ssm_head_dim = 64;
  config.ssm_state = 128;
  ByteCountingBackend backend;
  for (int rows : {1, 8}) {
    backend.bytes = 0;
    auto state = MakeMixerLayer(MixerKind::kMamba2, config)->NewState(backend, rows);
    ASSERT_TRUE(state.ok()) << state.status();
    EXPECT_EQ(backend.bytes, 807936 * rows);
  }
}

TEST(DecodeErrorsTest, BadRowsAndLengthsAreInvalidArgument) {
  CpuBackend backend;
  const ModelConfig config = DecodeConfig({MixerKind::kMesa});
  const MesaSolve solve{30, 0.0f};
  auto net = MesaNet::Create(config, &backend, 2, 8);
  ASSERT_TRUE(net.ok());
  auto state = (*net)->NewDecodeState(2);
  ASSERT_TRUE(state.ok());
  const std::vector<int32_t> tokens(16, 1);
  EXPECT_EQ((*net)->Advance(tokens.data(), 1, 9, solve, **state, 0).status().code(),
            absl::StatusCode::kInvalidArgument);  // more tokens than planned
  EXPECT_EQ((*net)->Advance(tokens.data(), 2, 1, solve, **state, 1).status().code(),
            absl::StatusCode::kInvalidArgument);  // rows past the state
  const int32_t bad = config.vocab_size;
  EXPECT_EQ((*net)->Advance(&bad, 1, 1, solve, **state, 0).status().code(),
            absl::StatusCode::kInvalidArgument);  // token outside the vocabulary
  ASSERT_TRUE((*net)->Advance(tokens.data(), 1, 1, solve, **state, 0).ok());
  EXPECT_EQ((*net)->Backward(1.0f).status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace mesa::model
