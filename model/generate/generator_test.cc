#include "model/generate/generator.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/backend/cpu_backend.h"
#include "model/net/test_models.h"
#include "model/tokenizer/byte_tokenizer.h"

namespace mesa::model {
namespace {

// Attention layers of a pattern with "swa" see a window of 16 (shorter than the prompts and
// completions below, so the KV cache's ring buffer wraps).
ModelConfig ByteConfig(std::vector<MixerKind> layers) {
  ModelConfig config = SmallTestConfig(layers, /*vocab_size=*/257, /*bos_token=*/256);
  if (std::find(layers.begin(), layers.end(), MixerKind::kSwa) != layers.end()) {
    config.attention_window = 16;
  }
  return config;
}

// Parameters away from the initialisation, so that the context changes the argmax.
std::vector<float> NoisyParams(const ModelConfig& config, Backend* backend) {
  return NoisyTestParams(config, backend, /*init_seed=*/11, /*noise_seed=*/5, 0.1f);
}

CpuBackend ReferenceBackend() {
  CpuBackendOptions options;
  options.num_threads = 2;
  options.mesa_impl = kernels::MesaImpl::kReference;  // exact solves: no near-tie flips
  return CpuBackend(options);
}

const std::vector<std::vector<MixerKind>> kModels = {
    {MixerKind::kMesa, MixerKind::kMesa},      {MixerKind::kGla},
    {MixerKind::kDeltaNet, MixerKind::kMesa},  {MixerKind::kGatedDeltaNet},
    {MixerKind::kMesa, MixerKind::kAttention}, {MixerKind::kDeltaNet, MixerKind::kSwa}};

// Greedy decoding equals re-running the whole forward on the growing sequence and taking the
// arg max of the last position each time.
TEST(GeneratorTest, GreedyEqualsArgmaxOfTheFullForward) {
  CpuBackend backend = ReferenceBackend();
  ByteTokenizer tokenizer;
  for (const auto& layers : kModels) {
    const ModelConfig config = ByteConfig(layers);
    const std::vector<float> params = NoisyParams(config, &backend);
    auto gen = Generator::Create(config, params, &backend, 1, 16);
    ASSERT_TRUE(gen.ok()) << gen.status();
    GenerateOptions options;
    options.max_new_tokens = 64;
    options.sampling.temperature = 0;
    options.solve = {30, 0.0f};
    auto out = (*gen)->Generate({"The quick brown fox"}, tokenizer, options);
    ASSERT_TRUE(out.ok()) << out.status();
    const Completion& c = (*out)[0];
    ASSERT_EQ(c.tokens.size(), 64u);
    EXPECT_EQ(c.finish_reason, "length");
    std::vector<int32_t> seq = {config.bos_token};
    for (char ch : std::string("The quick brown fox")) seq.push_back(static_cast<uint8_t>(ch));
    for (size_t i = 0; i < c.tokens.size(); ++i) {
      const int t = static_cast<int>(seq.size());
      auto net = MesaNet::Create(config, &backend, 1, t);
      ASSERT_TRUE(net.ok());
      (*net)->SetParamsFromHost(params.data());
      ASSERT_TRUE((*net)->Forward(seq.data(), seq.data(), 1, {30, 0.0f}).ok());
      std::vector<float> logits;
      (*net)->CopyLogitsToHost(&logits);
      const float* last = logits.data() + (t - 1) * config.vocab_size;
      const int32_t argmax =
          static_cast<int32_t>(std::max_element(last, last + config.vocab_size) - last);
      ASSERT_EQ(c.tokens[i], argmax) << LayerMixersName(config) << " token " << i;
      seq.push_back(c.tokens[i]);
    }
    EXPECT_EQ(c.completion, tokenizer.Decode(c.tokens));
    EXPECT_EQ(c.cg_steps.size(), c.tokens.size());
  }
}

// The log-probabilities are the model's: each equals minus the training loss of that token at that
// position (the soft-capped cross entropy) when the whole sequence is scored.
TEST(GeneratorTest, LogProbsAreTheModelsLossAtEachPosition) {
  CpuBackend backend = ReferenceBackend();
  ByteTokenizer tokenizer;
  const ModelConfig config = ByteConfig({MixerKind::kDeltaNet, MixerKind::kMesa});
  const std::vector<float> params = NoisyParams(config, &backend);
  auto gen = Generator::Create(config, params, &backend, 1, 16);
  ASSERT_TRUE(gen.ok());
  GenerateOptions options;
  options.max_new_tokens = 24;
  options.sampling = {.temperature = 0.7f, .seed = 3};
  const std::string prompt = "Hello there";
  auto out = (*gen)->Generate({prompt}, tokenizer, options);
  ASSERT_TRUE(out.ok()) << out.status();
  const Completion& c = (*out)[0];
  std::vector<int32_t> seq = {config.bos_token};
  for (char ch : prompt) seq.push_back(static_cast<uint8_t>(ch));
  const int first = static_cast<int>(seq.size()) - 1;  // position predicting the first token
  seq.insert(seq.end(), c.tokens.begin(), c.tokens.end());
  const int t = static_cast<int>(seq.size()) - 1;
  auto net = MesaNet::Create(config, &backend, 1, t);
  ASSERT_TRUE(net.ok());
  (*net)->SetParamsFromHost(params.data());
  ASSERT_TRUE((*net)->Forward(seq.data(), seq.data() + 1, 1, {30, 0.0f}).ok());
  std::vector<float> losses;
  (*net)->CopyLossesToHost(&losses);
  ASSERT_EQ(c.logprobs.size(), c.tokens.size());
  for (size_t i = 0; i < c.tokens.size(); ++i) {
    EXPECT_NEAR(-c.logprobs[i], losses[first + i], 1e-4 * (1 + losses[first + i])) << i;
  }
}

// Teacher-forced continuations after prompts longer than the window (16): the log-likelihood is
// the whole sequence's loss over the continuation, and greedy says whether each continuation token
// is the full forward's argmax; pairs run one after another from a clear state.
TEST(GeneratorTest, ScoredContinuationsAreTheFullForwardsLossAndArgmax) {
  CpuBackend backend = ReferenceBackend();
  const ModelConfig config = ByteConfig({MixerKind::kDeltaNet, MixerKind::kMesa});
  const std::vector<float> params = NoisyParams(config, &backend);
  auto gen = Generator::Create(config, params, &backend, 1, 16);
  ASSERT_TRUE(gen.ok());
  const std::string prompt = "A prompt that is longer than the window of sixteen tokens: the";
  std::vector<int32_t> prompt_ids;
  for (char ch : prompt) prompt_ids.push_back(static_cast<uint8_t>(ch));
  std::vector<int32_t> seq = {config.bos_token};
  seq.insert(seq.end(), prompt_ids.begin(), prompt_ids.end());
  // The model's own greedy continuation, and one that is surely not.
  GenerateOptions options;
  options.max_new_tokens = 5;
  options.sampling.temperature = 0;
  options.solve = {30, 0.0f};
  auto greedy = (*gen)->GenerateTokens({prompt_ids}, nullptr, options);
  ASSERT_TRUE(greedy.ok()) << greedy.status();
  std::vector<int32_t> own = (*greedy)[0].tokens, other = own;
  other[2] = own[2] == 'q' ? 'z' : 'q';
  auto scored = (*gen)->ScoreContinuations({prompt_ids, prompt_ids}, {own, other}, {30, 0.0f});
  ASSERT_TRUE(scored.ok()) << scored.status();
  EXPECT_TRUE((*scored)[0].greedy);
  EXPECT_FALSE((*scored)[1].greedy);
  for (int k = 0; k < 2; ++k) {
    std::vector<int32_t> whole = seq;
    whole.insert(whole.end(), (k == 0 ? own : other).begin(), (k == 0 ? own : other).end());
    const int t = static_cast<int>(whole.size()) - 1;
    auto net = MesaNet::Create(config, &backend, 1, t);
    ASSERT_TRUE(net.ok());
    (*net)->SetParamsFromHost(params.data());
    ASSERT_TRUE((*net)->Forward(whole.data(), whole.data() + 1, 1, {30, 0.0f}).ok());
    std::vector<float> losses;
    (*net)->CopyLossesToHost(&losses);
    double ll = 0;
    for (int p = static_cast<int>(seq.size()) - 1; p < t; ++p) ll -= losses[p];
    EXPECT_NEAR((*scored)[k].loglikelihood, ll, 1e-4 * (1 + std::abs(ll))) << k;
  }
  // A continuation longer than the window less one is refused.
  EXPECT_FALSE(
      (*gen)->ScoreContinuations({prompt_ids}, {std::vector<int32_t>(16, 'a')}, {30, 0.0f}).ok());
}

// A prompt decoded beside another gives what it gives alone with the same seed (prompt i draws
// with seed + i), and the same seed gives the same tokens again.
TEST(GeneratorTest, SeededSamplingIsReproducibleAndIndependentOfTheBatch) {
  CpuBackend backend = ReferenceBackend();
  ByteTokenizer tokenizer;
  // Attention layers keep one KV cache row per prompt, of its own length.
  for (const auto& layers : {std::vector<MixerKind>{MixerKind::kDeltaNet, MixerKind::kMesa},
                             std::vector<MixerKind>{MixerKind::kMesa, MixerKind::kAttention}}) {
    const ModelConfig config = ByteConfig(layers);
    const std::vector<float> params = NoisyParams(config, &backend);
    auto gen = Generator::Create(config, params, &backend, 2, 8);
    ASSERT_TRUE(gen.ok());
    GenerateOptions options;
    options.max_new_tokens = 20;
    options.sampling = {.temperature = 0.9f, .top_k = 50, .top_p = 0.95f, .seed = 42};
    auto both = (*gen)->Generate({"Hello", "A much longer second prompt"}, tokenizer, options);
    ASSERT_TRUE(both.ok()) << both.status();
    auto first = (*gen)->Generate({"Hello"}, tokenizer, options);
    options.sampling.seed = 43;
    auto second = (*gen)->Generate({"A much longer second prompt"}, tokenizer, options);
    ASSERT_TRUE(first.ok() && second.ok());
    EXPECT_EQ((*both)[0].tokens, (*first)[0].tokens);
    EXPECT_EQ((*both)[1].tokens, (*second)[0].tokens);
    EXPECT_NE((*both)[0].tokens, (*both)[1].tokens);
    for (double lp : (*both)[0].logprobs) EXPECT_LE(lp, 0.0);
  }
}

// A stop string ends the completion before it; the completion's text excludes it.
TEST(GeneratorTest, StopSequenceEndsTheCompletion) {
  CpuBackend backend = ReferenceBackend();
  ByteTokenizer tokenizer;
  const ModelConfig config = ByteConfig({MixerKind::kMesa});
  const std::vector<float> params = NoisyParams(config, &backend);
  auto gen = Generator::Create(config, params, &backend, 1, 8);
  ASSERT_TRUE(gen.ok());
  GenerateOptions options;
  options.max_new_tokens = 40;
  options.sampling.temperature = 0;
  auto free_run = (*gen)->Generate({"xyz"}, tokenizer, options);
  ASSERT_TRUE(free_run.ok());
  const std::string text = (*free_run)[0].completion;
  ASSERT_GE(text.size(), 12u);
  const std::string stop = text.substr(8, 3);
  const size_t at = text.find(stop);
  options.stop = {stop};
  auto stopped = (*gen)->Generate({"xyz"}, tokenizer, options);
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_EQ((*stopped)[0].finish_reason, "stop");
  EXPECT_EQ((*stopped)[0].completion, text.substr(0, at));
  EXPECT_EQ((*stopped)[0].tokens.size(), at);  // bytes: one token each
}

TEST(GeneratorTest, BadRequestsAreInvalidArgument) {
  CpuBackend backend;
  ByteTokenizer tokenizer;
  const ModelConfig config = ByteConfig({MixerKind::kGla});
  auto net = MesaNet::Create(config, &backend, 1, 1);
  ASSERT_TRUE(net.ok());
  std::vector<float> params((*net)->num_params(), 0.01f);
  auto gen = Generator::Create(config, params, &backend, 2, 8);
  ASSERT_TRUE(gen.ok());
  GenerateOptions options;
  auto code = [&](const std::vector<std::string>& prompts, const GenerateOptions& o) {
    return (*gen)->Generate(prompts, tokenizer, o).status().code();
  };
  EXPECT_EQ(code({""}, options), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({}, options), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({"a", "b", "c"}, options), absl::StatusCode::kInvalidArgument);  // > rows
  GenerateOptions bad = options;
  bad.max_new_tokens = 0;
  EXPECT_EQ(code({"a"}, bad), absl::StatusCode::kInvalidArgument);
  bad = options;
  bad.sampling.temperature = -1;
  EXPECT_EQ(code({"a"}, bad), absl::StatusCode::kInvalidArgument);
  bad = options;
  bad.stop = {""};
  EXPECT_EQ(code({"a"}, bad), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*gen)->GenerateTokens({{300}}, &tokenizer, options).status().code(),
            absl::StatusCode::kInvalidArgument);  // outside the vocabulary
  EXPECT_EQ(Generator::Create(config, {1.0f}, &backend, 1, 8).status().code(),
            absl::StatusCode::kInvalidArgument);  // parameters of another model
}

}  // namespace
}  // namespace mesa::model
