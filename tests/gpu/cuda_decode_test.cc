// GPU test (part of //tests/gpu:cuda_backend_test): decoding on the CUDA backend. A
// prompt prefilled in pieces (the chunkwise CUDA operators with initial and final states) and then
// advanced one token at a time (the fused step kernels, state in place; convolution tails kept by
// 2D copies) gives the logits of the whole sequence's forward, on the GPU and against the CPU
// backend's decoding of the same weights.
#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/backend/cpu_backend.h"
#include "model/backend/cuda/cuda_backend.h"
#include "model/net/mesanet.h"
#include "model/net/test_models.h"

namespace mesa::model {
namespace {

double MaxRelDiff(const float* a, const float* b, int64_t n) {
  double diff = 0, scale = 1e-6;
  for (int64_t i = 0; i < n; ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return diff / scale;
}

// Logits of every position of `tokens`, decoded in `pieces` (then single steps for the rest).
std::vector<float> Decoded(const ModelConfig& config, Backend* backend,
                           const std::vector<float>& params, const std::vector<int32_t>& tokens,
                           const std::vector<int>& pieces) {
  auto net = MesaNet::Create(config, backend, 1, 64);
  EXPECT_TRUE(net.ok()) << net.status();
  (*net)->SetParamsFromHost(params.data());
  auto state = (*net)->NewDecodeState(1);
  EXPECT_TRUE(state.ok()) << state.status();
  const MesaSolve solve{config.cg_steps, 0.0f};
  std::vector<float> all, logits;
  size_t begin = 0;
  for (size_t i = 0; begin < tokens.size(); ++i) {
    const int n = i < pieces.size() ? pieces[i] : 1;
    auto stats = (*net)->Advance(tokens.data() + begin, 1, n, solve, **state, 0);
    EXPECT_TRUE(stats.ok()) << backend->Name() << ": " << stats.status();
    if (!stats.ok()) return {};
    (*net)->CopyLogitsToHost(&logits);
    all.insert(all.end(), logits.begin(), logits.end());
    begin += n;
  }
  return all;
}

TEST(CudaDecode, PiecesAndStepsMatchTheFullForwardAndTheCpu) {
  for (const std::vector<MixerKind>& layers :
       {std::vector<MixerKind>{MixerKind::kMesa, MixerKind::kMesa},
        std::vector<MixerKind>{MixerKind::kDeltaNet, MixerKind::kGatedDeltaNet},
        std::vector<MixerKind>{MixerKind::kGla, MixerKind::kMesa},
        // Attention: a global layer's KV cache grows past 64 and 128 tokens; the window of the
        // [swa, attention] pattern (24) wraps its ring buffer within the 40-token piece.
        std::vector<MixerKind>{MixerKind::kMesa, MixerKind::kAttention},
        std::vector<MixerKind>{MixerKind::kSwa, MixerKind::kAttention},
        std::vector<MixerKind>{MixerKind::kHawk, MixerKind::kMesa},
        std::vector<MixerKind>{MixerKind::kMlstm, MixerKind::kGla},
        std::vector<MixerKind>{MixerKind::kMamba2, MixerKind::kMesa}}) {
    ModelConfig config;
    config.vocab_size = 97;
    config.d_model = 64;
    config.n_layers = 2;
    config.n_heads = 2;
    config.head_dim = 32;
    config.mlp_hidden = 128;
    config.layer_mixers = layers;
    config.cg_steps = config.MesaLayers() > 0 ? 30 : 0;
    config.bos_token = 96;
    if (layers[0] == MixerKind::kSwa) config.attention_window = 24;
    if (layers[0] == MixerKind::kHawk) config.rnn_width = 80;
    if (layers[0] == MixerKind::kMamba2) {
      config.ssm_inner = 128;
      config.ssm_head_dim = 64;
      config.ssm_state = 128;
    }
    CudaBackendOptions options;
    options.activations = ActivationType::kFloat32;
    options.gemm_math = GemmMath::kFp32;
    auto gpu = CreateCudaBackend(options);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    CpuBackend cpu;
    auto init = MesaNet::Create(config, &cpu, 1, 1);
    ASSERT_TRUE(init.ok());
    (*init)->InitializeParams(3);
    std::vector<float> params((*init)->num_params());
    (*init)->GetParamsToHost(params.data());
    std::mt19937 rng(9);
    std::normal_distribution<float> noise(0.f, 0.05f);
    for (float& p : params) p += noise(rng);
    std::uniform_int_distribution<int32_t> token(0, config.vocab_size - 1);
    std::vector<int32_t> tokens(150);
    for (int32_t& t : tokens) t = token(rng);

    auto full_net = MesaNet::Create(config, gpu->get(), 1, static_cast<int>(tokens.size()));
    ASSERT_TRUE(full_net.ok());
    (*full_net)->SetParamsFromHost(params.data());
    ASSERT_TRUE(
        (*full_net)->Forward(tokens.data(), tokens.data(), 1, {config.cg_steps, 0.0f}).ok());
    std::vector<float> full;
    (*full_net)->CopyLogitsToHost(&full);
    const std::vector<int> pieces = {17, 64, 1, 40};  // then 28 single steps
    const std::vector<float> on_gpu = Decoded(config, gpu->get(), params, tokens, pieces);
    const std::vector<float> on_cpu = Decoded(config, &cpu, params, tokens, pieces);
    ASSERT_EQ(on_gpu.size(), full.size());
    ASSERT_EQ(on_cpu.size(), full.size());
    const std::string name = LayerMixersName(config);
    // The chunkwise CUDA operators round on the way (Mesa: fp16 chunk states; the delta rule:
    // bf16 tensor-core operands, ~5e-3 relative against float64 per operator, deltanet_cuda_test)
    // while the step kernels work in fp32: the bound is theirs. A state handed over wrongly
    // between pieces moves the logits by O(1).
    const double tol = 3e-2;
    const int64_t v = config.vocab_size;
    double worst_full = 0, worst_cpu = 0;
    for (size_t pos = 0; pos < tokens.size(); ++pos) {
      worst_full = std::max(worst_full, MaxRelDiff(&on_gpu[pos * v], &full[pos * v], v));
      worst_cpu = std::max(worst_cpu, MaxRelDiff(&on_gpu[pos * v], &on_cpu[pos * v], v));
    }
    std::printf("%s: decoded vs full forward %.3g, CUDA vs CPU decoding %.3g\n", name.c_str(),
                worst_full, worst_cpu);
    EXPECT_LT(worst_full, tol) << name;
    EXPECT_LT(worst_cpu, tol) << name;
  }
}

// After SetParamsFromHost a decoder's next step runs directly (converting the weights and
// recomputing λ), and its recorded steps replay with the new parameters: the logits equal those of
// a net made with them, continuing the same state (fixed and tolerance steps).
TEST(CudaDecode, NewParametersReachRecordedSteps) {
  const ModelConfig config = SmallTestConfig({MixerKind::kMesa, MixerKind::kGatedDeltaNet},
                                             /*vocab_size=*/97, /*bos_token=*/96);
  CudaBackendOptions options;
  options.activations = ActivationType::kFloat32;
  options.gemm_math = GemmMath::kFp32;
  auto gpu = CreateCudaBackend(options);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const std::vector<float> a = NoisyTestParams(config, gpu->get(), 1, 1, 0.05f),
                           b = NoisyTestParams(config, gpu->get(), 2, 2, 0.05f);
  const std::vector<int32_t> tokens = {3, 14, 15, 92, 65, 35, 89, 79};
  for (const float tol : {0.0f, 1e-3f}) {
    // Steps 0-2 record and replay with a; step 4 is the first after the switch.
    const ParamSwitchLogits logits =
        DecodeAcrossParamSwitch(config, gpu->get(), a, b, tokens, 4, {config.cg_steps, tol});
    ASSERT_FALSE(logits.fresh.empty());
    EXPECT_EQ(logits.switched, logits.fresh) << "tolerance " << tol;
  }
}

// Tolerance-mode steps are recorded as CUDA graphs like fixed ones (the first step of a
// (state, rows) runs directly, the second is recorded, later ones replay) and their CG counts read
// back after each replay: logits and counts equal those of the same steps run directly.
TEST(CudaDecode, RecordedToleranceStepsEqualDirectOnes) {
  const ModelConfig config = SmallTestConfig(
      {MixerKind::kMesa, MixerKind::kGatedDeltaNet, MixerKind::kMesa}, /*vocab_size=*/97,
      /*bos_token=*/96);
  CudaBackendOptions options;
  options.activations = ActivationType::kFloat32;
  options.gemm_math = GemmMath::kFp32;
  auto gpu = CreateCudaBackend(options);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  constexpr int kRows = 2, kPrompt = 20, kSteps = 12;
  const MesaSolve solve{30, 1e-3f};
  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> token(0, config.vocab_size - 1);
  std::vector<int32_t> prompt(kRows * kPrompt), steps(kRows * kSteps);
  for (int32_t& t : prompt) t = token(rng);
  for (int32_t& t : steps) t = token(rng);
  struct Run {
    std::vector<float> logits;
    std::vector<std::vector<int32_t>> counts;  // per step, every layer's [rows, H] concatenated
    std::vector<double> means;
  };
  auto run = [&](bool record) {
    Run out;
    auto net = MesaNet::Create(config, gpu->get(), kRows, kPrompt);
    EXPECT_TRUE(net.ok()) << net.status();
    (*net)->InitializeParams(11);
    (*net)->set_record_steps(record);
    auto state = (*net)->NewDecodeState(kRows);
    EXPECT_TRUE(state.ok());
    EXPECT_TRUE((*net)->Advance(prompt.data(), kRows, kPrompt, solve, **state, 0).ok());
    std::vector<float> logits;
    for (int s = 0; s < kSteps; ++s) {
      std::vector<int32_t> next(kRows);
      for (int r = 0; r < kRows; ++r) next[r] = steps[r * kSteps + s];
      auto stats = (*net)->Advance(next.data(), kRows, 1, solve, **state, 0);
      EXPECT_TRUE(stats.ok()) << stats.status();
      if (!stats.ok()) return out;
      (*net)->CopyLogitsToHost(&logits);
      out.logits.insert(out.logits.end(), logits.begin(), logits.end());
      std::vector<int32_t> all;
      for (const std::vector<int32_t>& layer : stats->layer_head_cg_steps) {
        all.insert(all.end(), layer.begin(), layer.end());
      }
      out.counts.push_back(all);
      out.means.push_back(stats->cg_steps_mean);
    }
    return out;
  };
  const Run direct = run(false), recorded = run(true);
  ASSERT_EQ(direct.logits.size(), recorded.logits.size());
  ASSERT_FALSE(direct.logits.empty());
  EXPECT_EQ(direct.logits, recorded.logits);
  EXPECT_EQ(direct.counts, recorded.counts);
  double total = 0;
  for (size_t s = 0; s < direct.means.size(); ++s) {
    EXPECT_DOUBLE_EQ(direct.means[s], recorded.means[s]) << "step " << s;
    ASSERT_EQ(direct.counts[s].size(), 2u * kRows * config.n_heads) << "step " << s;
    total += recorded.means[s];
  }
  // A tolerance stop takes fewer steps than the maximum (a placeholder would read 30 here).
  const double mean = total / kSteps * config.n_layers / 2;  // over the two Mesa layers
  std::printf("recorded tolerance steps: mean CG steps %.2f of at most 30\n", mean);
  EXPECT_GT(mean, 0.5);
  EXPECT_LT(mean, 29.0);
}

}  // namespace
}  // namespace mesa::model
