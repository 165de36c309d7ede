#include "serve/engine.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "model/backend/cpu_backend.h"
#include "model/generate/generator.h"
#include "model/net/test_models.h"
#include "model/tokenizer/byte_tokenizer.h"

namespace mesa::serve {
namespace {

using model::MixerKind;
using model::ModelConfig;

ModelConfig ByteConfig(std::vector<MixerKind> layers) {
  ModelConfig config = model::SmallTestConfig(layers, /*vocab_size=*/257, /*bos_token=*/256);
  if (std::find(layers.begin(), layers.end(), MixerKind::kSwa) != layers.end()) {
    config.attention_window = 16;
  }
  return config;
}

model::CpuBackend Backend() {
  model::CpuBackendOptions options;
  options.num_threads = 2;
  return model::CpuBackend(options);
}

struct Outcome {
  std::string text;
  std::vector<int32_t> tokens;
  std::vector<double> logprobs;
  std::vector<double> prompt_logprobs;
  std::string finish_reason;
  int64_t cached_tokens = 0;
  absl::Status error;
};

Outcome Collect(RequestStream& stream) {
  Outcome out;
  while (true) {
    std::optional<EngineEvent> e = stream.Next(absl::Seconds(60));
    if (!e.has_value()) {
      out.error = absl::DeadlineExceededError("no event in 60 s");
      return out;
    }
    switch (e->kind) {
      case EngineEvent::Kind::kPrompt:
        out.prompt_logprobs.insert(out.prompt_logprobs.end(), e->prompt_logprobs.begin(),
                                   e->prompt_logprobs.end());
        break;
      case EngineEvent::Kind::kText:
        out.text += e->piece.text;
        out.tokens.insert(out.tokens.end(), e->piece.tokens.begin(), e->piece.tokens.end());
        out.logprobs.insert(out.logprobs.end(), e->piece.logprobs.begin(), e->piece.logprobs.end());
        break;
      case EngineEvent::Kind::kFinished:
        out.finish_reason = e->finish_reason;
        out.cached_tokens = e->cached_tokens;
        return out;
      case EngineEvent::Kind::kError:
        out.error = e->error;
        return out;
    }
  }
}

EngineRequest Greedy(const std::vector<int32_t>& prompt, int max_tokens) {
  EngineRequest r;
  r.prompt = prompt;
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  return r;
}

std::vector<int32_t> Bytes(const std::string& s) { return model::ByteTokenizer().Encode(s); }

const std::vector<std::vector<MixerKind>> kModels = {
    {MixerKind::kMesa, MixerKind::kMesa},
    {MixerKind::kGla, MixerKind::kDeltaNet},
    {MixerKind::kGatedDeltaNet, MixerKind::kAttention},
    {MixerKind::kMesa, MixerKind::kSwa}};

// The engine's greedy completions are the Generator's (mesa-generate's), for every mixer mix,
// with prompts longer than the prefill piece; a request alone and the same request among others
// give bit-identical tokens and log-probabilities (batch invariance).
TEST(EngineTest, MatchesTheGeneratorAndIsBatchInvariant) {
  model::ByteTokenizer tokenizer;
  for (const auto& layers : kModels) {
    model::CpuBackend backend = Backend();
    const ModelConfig config = ByteConfig(layers);
    const std::vector<float> params =
        model::NoisyTestParams(config, &backend, /*init_seed=*/11, /*noise_seed=*/5, 0.1f);
    const std::vector<std::string> prompts = {"the cat sat on the mat and the dog", "a",
                                              "hello there, general kenobi"};
    // The generator, one prompt at a time.
    absl::StatusOr<std::unique_ptr<model::Generator>> generator =
        model::Generator::Create(config, params, &backend, 1, 8);
    ASSERT_TRUE(generator.ok()) << generator.status();
    std::vector<std::vector<int32_t>> expected;
    for (const std::string& p : prompts) {
      model::GenerateOptions options;
      options.max_new_tokens = 12;
      options.sampling.temperature = 0;
      auto c = (*generator)->Generate({p}, tokenizer, options);
      ASSERT_TRUE(c.ok()) << c.status();
      expected.push_back((*c)[0].tokens);
    }

    absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(
        config, params, &backend, &tokenizer,
        {.slots = 4, .chunk = 8, .max_queue = 16, .cache_bytes = 0, .cache_stride = 8}, nullptr);
    ASSERT_TRUE(engine.ok()) << engine.status();
    // Alone.
    std::vector<Outcome> alone;
    for (const std::string& p : prompts) {
      auto s = (*engine)->Submit(Greedy(Bytes(p), 12));
      ASSERT_TRUE(s.ok()) << s.status();
      alone.push_back(Collect(**s));
      ASSERT_TRUE(alone.back().error.ok()) << alone.back().error;
    }
    // Together, with sampled requests beside them joining at different times.
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int round = 0; round < 2; ++round) {
      for (size_t i = 0; i < prompts.size(); ++i) {
        EngineRequest sampled = Greedy(Bytes(prompts[(i + 1) % prompts.size()] + "!"), 7 + i);
        sampled.sampling = {.temperature = 0.9f, .top_k = 0, .top_p = 0.95f, .seed = i};
        ASSERT_TRUE((*engine)->Submit(sampled).ok());
        auto s = (*engine)->Submit(Greedy(Bytes(prompts[i]), 12));
        ASSERT_TRUE(s.ok());
        streams.push_back(*s);
      }
    }
    for (size_t k = 0; k < streams.size(); ++k) {
      const Outcome together = Collect(*streams[k]);
      const Outcome& single = alone[k % prompts.size()];
      ASSERT_TRUE(together.error.ok()) << together.error;
      EXPECT_EQ(together.tokens, single.tokens) << "request " << k;
      EXPECT_EQ(together.logprobs, single.logprobs) << "request " << k;  // bit-identical
    }
    for (size_t i = 0; i < prompts.size(); ++i) {
      // The generator stops at nothing but max_new_tokens here, the engine too (eos aside).
      const std::vector<int32_t>& got = alone[i].tokens;
      ASSERT_LE(got.size(), expected[i].size());
      EXPECT_EQ(got, std::vector<int32_t>(expected[i].begin(), expected[i].begin() + got.size()))
          << "prompt " << i;
      if (alone[i].finish_reason == "length") EXPECT_EQ(got.size(), 12u);
    }
  }
}

// A prompt that shares a prefix with one served before resumes from its snapshot: the output is
// bit-identical to a run without the cache, and the snapshot covered the prefix's whole pieces.
TEST(EngineTest, PrefixCacheResumesBitIdentically) {
  model::ByteTokenizer tokenizer;
  model::CpuBackend backend = Backend();
  const ModelConfig config = ByteConfig({MixerKind::kMesa, MixerKind::kDeltaNet});
  const std::vector<float> params = model::NoisyTestParams(config, &backend, 11, 5, 0.1f);
  const std::string system = "You are a helpful assistant. Answer briefly: ";  // 45 bytes
  auto run = [&](int64_t cache_bytes, const std::vector<std::string>& questions) {
    auto engine = Engine::Create(
        config, params, &backend, &tokenizer,
        {.slots = 2, .chunk = 8, .max_queue = 8, .cache_bytes = cache_bytes, .cache_stride = 16},
        nullptr);
    EXPECT_TRUE(engine.ok()) << engine.status();
    std::vector<Outcome> out;
    for (const std::string& q : questions) {
      auto s = (*engine)->Submit(Greedy(Bytes(system + q), 10));
      EXPECT_TRUE(s.ok());
      out.push_back(Collect(**s));
    }
    return out;
  };
  const std::vector<std::string> questions = {"why is the sky blue?", "how much is 2+2?",
                                              "why is the sky blue?"};
  const std::vector<Outcome> cold = run(0, questions);
  const std::vector<Outcome> warm = run(1 << 20, questions);
  for (size_t i = 0; i < questions.size(); ++i) {
    ASSERT_TRUE(warm[i].error.ok()) << warm[i].error;
    EXPECT_EQ(warm[i].tokens, cold[i].tokens) << i;
    EXPECT_EQ(warm[i].logprobs, cold[i].logprobs) << i;
    EXPECT_EQ(cold[i].cached_tokens, 0);
  }
  EXPECT_EQ(warm[0].cached_tokens, 0);  // nothing seen yet
  // BOS + the 45-byte system prompt: the snapshot at 32 (a multiple of the stride 16) is shared.
  EXPECT_EQ(warm[1].cached_tokens, 32);
  // The same prompt again: its own last whole piece (BOS + 45 + 20 - 1 = 65 positions -> 64).
  EXPECT_EQ(warm[2].cached_tokens, 64);
}

// Prompts that are whole pieces long and were seen before go from the cache straight into free
// slots (several in one round, no staging), and decode bit-identically to a cold run.
TEST(EngineTest, WholePromptSnapshotsGoStraightIntoSlots) {
  model::ByteTokenizer tokenizer;
  model::CpuBackend backend = Backend();
  const ModelConfig config = ByteConfig({MixerKind::kMesa, MixerKind::kGatedDeltaNet});
  const std::vector<float> params = model::NoisyTestParams(config, &backend, 12, 5, 0.1f);
  const std::vector<std::string> prompts = {"The quick brown fox jumps over t",   // 32 bytes
                                            "Sixteen bytes!!!",                   // 16
                                            "A different prompt of 32 bytes.."};  // 32
  auto engine = Engine::Create(
      config, params, &backend, &tokenizer,
      {.slots = 2, .chunk = 8, .max_queue = 16, .cache_bytes = 1 << 20, .cache_stride = 16},
      nullptr);
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::vector<Outcome> cold;
  for (const std::string& p : prompts) {
    auto s = (*engine)->Submit(Greedy(Bytes(p), 6));
    ASSERT_TRUE(s.ok());
    cold.push_back(Collect(**s));
    ASSERT_TRUE(cold.back().error.ok()) << cold.back().error;
    EXPECT_EQ(cold.back().cached_tokens, 0);
  }
  // Each prompt three times at once: more than the two slots, all from snapshots.
  std::vector<std::pair<size_t, std::shared_ptr<RequestStream>>> warm;
  for (int copy = 0; copy < 3; ++copy) {
    for (size_t i = 0; i < prompts.size(); ++i) {
      auto s = (*engine)->Submit(Greedy(Bytes(prompts[i]), 6));
      ASSERT_TRUE(s.ok());
      warm.emplace_back(i, *s);
    }
  }
  for (auto& [i, stream] : warm) {
    const Outcome out = Collect(*stream);
    ASSERT_TRUE(out.error.ok()) << out.error;
    EXPECT_EQ(out.tokens, cold[i].tokens) << i;
    EXPECT_EQ(out.logprobs, cold[i].logprobs) << i;
    EXPECT_EQ(out.cached_tokens, static_cast<int64_t>(prompts[i].size())) << i;
  }
}

// echo + logprobs: the log-probability of every prompt token equals the full forward's.
TEST(EngineTest, PromptLogprobsEqualTheForward) {
  model::ByteTokenizer tokenizer;
  model::CpuBackend backend = Backend();
  const ModelConfig config = ByteConfig({MixerKind::kMesa, MixerKind::kAttention});
  const std::vector<float> params = model::NoisyTestParams(config, &backend, 11, 5, 0.1f);
  const std::vector<int32_t> prompt = Bytes("a prompt of some twenty-five bytes");
  const int n = static_cast<int>(prompt.size());
  // The forward over BOS + prompt: position j's logits score token j + 1.
  auto net = model::MesaNet::Create(config, &backend, 1, n);
  ASSERT_TRUE(net.ok());
  (*net)->SetParamsFromHost(params.data());
  std::vector<int32_t> tokens = {config.bos_token};
  tokens.insert(tokens.end(), prompt.begin(), prompt.end() - 1);
  ASSERT_TRUE((*net)->Forward(tokens.data(), prompt.data(), 1, {30, 0}).ok());
  std::vector<float> losses;
  (*net)->CopyLossesToHost(&losses);

  auto engine = Engine::Create(
      config, params, &backend, &tokenizer,
      {.slots = 2, .chunk = 8, .max_queue = 8, .cache_bytes = 1 << 20, .cache_stride = 8}, nullptr);
  ASSERT_TRUE(engine.ok());
  EngineRequest r = Greedy(prompt, 0);
  r.prompt_logprobs = true;
  r.top_logprobs = 3;
  auto s = (*engine)->Submit(r);
  ASSERT_TRUE(s.ok()) << s.status();
  const Outcome out = Collect(**s);
  ASSERT_TRUE(out.error.ok()) << out.error;
  EXPECT_EQ(out.finish_reason, "length");
  EXPECT_TRUE(out.tokens.empty());
  ASSERT_EQ(out.prompt_logprobs.size(), prompt.size());
  for (int j = 0; j < n; ++j) EXPECT_NEAR(out.prompt_logprobs[j], -losses[j], 2e-4) << j;
}

// Stop strings end the completion before them; nothing of a stop string is ever released.
TEST(EngineTest, StopStringsAndLimits) {
  model::ByteTokenizer tokenizer;
  model::CpuBackend backend = Backend();
  const ModelConfig config = ByteConfig({MixerKind::kGla});
  const std::vector<float> params = model::NoisyTestParams(config, &backend, 11, 5, 0.1f);
  auto engine = Engine::Create(
      config, params, &backend, &tokenizer,
      {.slots = 1, .chunk = 4, .max_queue = 1, .cache_bytes = 0, .cache_stride = 4}, nullptr);
  ASSERT_TRUE(engine.ok());
  auto free_run = (*engine)->Submit(Greedy(Bytes("xyz"), 20));
  ASSERT_TRUE(free_run.ok());
  const Outcome all = Collect(**free_run);
  ASSERT_TRUE(all.error.ok());
  ASSERT_GE(all.text.size(), 6u);
  EngineRequest stopped = Greedy(Bytes("xyz"), 20);
  stopped.stop = {all.text.substr(3, 2)};
  auto s = (*engine)->Submit(stopped);
  ASSERT_TRUE(s.ok());
  const Outcome cut = Collect(**s);
  EXPECT_EQ(cut.finish_reason, "stop");
  EXPECT_EQ(cut.text, all.text.substr(0, all.text.find(stopped.stop[0])));
  // Bad requests are refused at once.
  EXPECT_EQ((*engine)->Submit(Greedy({}, 4)).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*engine)->Submit(Greedy({999}, 4)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*engine)->Submit(Greedy({1}, 0)).status().code(), absl::StatusCode::kInvalidArgument);
}

// A cancelled request frees its slot: with one slot, the next request runs after it.
TEST(EngineTest, CancelFreesTheSlotAndAFullQueueIsRefused) {
  model::ByteTokenizer tokenizer;
  model::CpuBackend backend = Backend();
  const ModelConfig config = ByteConfig({MixerKind::kGla});
  const std::vector<float> params = model::NoisyTestParams(config, &backend, 11, 5, 0.1f);
  auto engine = Engine::Create(
      config, params, &backend, &tokenizer,
      {.slots = 1, .chunk = 4, .max_queue = 1, .cache_bytes = 0, .cache_stride = 4}, nullptr);
  ASSERT_TRUE(engine.ok());
  auto endless = (*engine)->Submit(Greedy(Bytes("abc"), 60000));
  ASSERT_TRUE(endless.ok());
  // Wait for its first token: it holds the slot now.
  std::optional<EngineEvent> first = (*endless)->Next(absl::Seconds(30));
  ASSERT_TRUE(first.has_value());
  auto waiting = (*engine)->Submit(Greedy(Bytes("def"), 3));
  ASSERT_TRUE(waiting.ok());
  EXPECT_EQ((*engine)->Submit(Greedy(Bytes("ghi"), 3)).status().code(),
            absl::StatusCode::kResourceExhausted);  // the queue holds one
  (*endless)->Cancel();
  const Outcome next = Collect(**waiting);
  ASSERT_TRUE(next.error.ok()) << next.error;
  EXPECT_EQ(next.finish_reason.empty(), false);
  // Stopping ends what is left with Unavailable.
  auto late = (*engine)->Submit(Greedy(Bytes("jkl"), 60000));
  ASSERT_TRUE(late.ok());
  (*engine)->Stop();
  EXPECT_EQ(Collect(**late).error.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ((*engine)->Submit(Greedy(Bytes("x"), 1)).status().code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace mesa::serve
