#include "model/inference/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mesa::model {
namespace {

using ::testing::HasSubstr;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::vector<float> RandomLogits(int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 2.f);
  std::vector<float> logits(vocab);
  for (float& x : logits) x = normal(rng);
  return logits;
}

// softmax(logits / temperature) over `keep` (all tokens when empty), zero elsewhere.
std::vector<double> Softmax(const std::vector<float>& logits, double temperature,
                            const std::set<int>& keep = {}) {
  std::vector<double> p(logits.size(), 0.0);
  double sum = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (!keep.empty() && !keep.count(int(i))) continue;
    p[i] = std::exp(double(logits[i]) / temperature);
    sum += p[i];
  }
  for (double& x : p) x /= sum;
  return p;
}

// Frequencies of `draws` draws (draw indices 0..draws-1).
std::vector<double> Frequencies(const std::vector<float>& logits, const SamplingOptions& options,
                                int draws) {
  std::vector<double> freq(logits.size(), 0.0);
  for (int d = 0; d < draws; ++d) {
    absl::StatusOr<SampledToken> t = SampleToken(logits, options, d);
    EXPECT_TRUE(t.ok()) << t.status();
    if (t.ok()) freq[t->token] += 1.0 / draws;
  }
  return freq;
}

// 20k draws: the standard deviation of a frequency is at most sqrt(0.25 / 20000) = 0.0035; the
// bound is about 3.5 of those (and the draws are fixed by the seed, so the test is deterministic).
constexpr int kDraws = 20000;
constexpr double kFreqTol = 0.0125;

void ExpectFrequencies(const std::vector<double>& freq, const std::vector<double>& expected) {
  ASSERT_EQ(freq.size(), expected.size());
  for (size_t i = 0; i < freq.size(); ++i) {
    EXPECT_NEAR(freq[i], expected[i], kFreqTol) << "token " << i;
    if (expected[i] == 0) {
      EXPECT_EQ(freq[i], 0) << "token " << i << " is outside the kept set";
    }
  }
}

TEST(SamplerTest, TemperatureZeroIsArgMaxWithLowestIdOnTies) {
  const std::vector<float> logits = {0.5f, 3.f, -1.f, 3.f, 2.9f};
  for (uint64_t draw : {0, 1, 17}) {
    absl::StatusOr<SampledToken> t = SampleToken(logits, {.temperature = 0.f, .seed = 5}, draw);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->token, 1);
  }
}

TEST(SamplerTest, TopKOneEqualsGreedy) {
  for (uint64_t seed = 0; seed < 50; ++seed) {
    const std::vector<float> logits = RandomLogits(300, seed);
    const SampledToken greedy = *SampleToken(logits, {.temperature = 0.f}, 0);
    const SampledToken top1 =
        *SampleToken(logits, {.temperature = 1.3f, .top_k = 1, .seed = seed}, seed);
    EXPECT_EQ(top1.token, greedy.token);
    EXPECT_EQ(top1.logprob, greedy.logprob);
  }
}

TEST(SamplerTest, TemperatureSamplesMatchSoftmax) {
  const std::vector<float> logits = {1.f, 0.f, 2.f, -1.f, 0.5f, 1.5f};
  for (float temperature : {1.f, 0.7f, 2.f}) {
    SCOPED_TRACE(temperature);
    ExpectFrequencies(Frequencies(logits, {.temperature = temperature, .seed = 42}, kDraws),
                      Softmax(logits, temperature));
  }
}

TEST(SamplerTest, TopKKeepsTheKMostLikelyAndRenormalises) {
  const std::vector<float> logits = {1.f, 0.f, 2.f, -1.f, 0.5f, 1.5f};
  ExpectFrequencies(Frequencies(logits, {.temperature = 1.f, .top_k = 3, .seed = 7}, kDraws),
                    Softmax(logits, 1.0, {2, 5, 0}));
  // top_k >= vocabulary size keeps everything.
  ExpectFrequencies(Frequencies(logits, {.temperature = 1.f, .top_k = 6, .seed = 7}, kDraws),
                    Softmax(logits, 1.0));
}

TEST(SamplerTest, TopPKeepsTheSmallestSetReachingP) {
  // Probabilities 0.5, 0.3, 0.15, 0.05 (in token order 2, 0, 3, 1).
  const std::vector<float> logits = {std::log(0.3f), std::log(0.05f), std::log(0.5f),
                                     std::log(0.15f)};
  const std::map<float, std::set<int>> kept = {
      {0.3f, {2}}, {0.5f, {2}}, {0.7f, {2, 0}}, {0.85f, {2, 0, 3}}, {0.96f, {2, 0, 3, 1}}};
  for (const auto& [top_p, set] : kept) {
    SCOPED_TRACE(top_p);
    ExpectFrequencies(Frequencies(logits, {.temperature = 1.f, .top_p = top_p, .seed = 3}, kDraws),
                      Softmax(logits, 1.0, set));
  }
}

// The nucleus computed from a full sort, and the draw over it (in token id order), written out
// plainly: the sampler finds the nucleus by weighted selection instead, which must not change
// any token.
int32_t NucleusByFullSort(const std::vector<float>& logits, float temperature, float top_p,
                          uint64_t seed, uint64_t draw) {
  std::vector<int32_t> order(logits.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = int32_t(i);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  const double max = logits[order[0]];
  const double inv_temperature = 1.0 / double(temperature);  // as the sampler rounds it
  auto weight = [&](int32_t i) { return std::exp((double(logits[i]) - max) * inv_temperature); };
  double total = 0;
  for (size_t i = 0; i < logits.size(); ++i) total += weight(int32_t(i));
  double mass = 0;
  size_t kept = 0;
  while (kept < order.size() && !(mass >= double(top_p) * total)) mass += weight(order[kept++]);
  std::vector<int32_t> nucleus(order.begin(), order.begin() + kept);
  std::sort(nucleus.begin(), nucleus.end());
  double nucleus_mass = 0;
  for (int32_t i : nucleus) nucleus_mass += weight(i);
  const double u = CounterUniform(seed, draw) * nucleus_mass;
  double acc = 0;
  for (int32_t i : nucleus) {
    acc += weight(i);
    if (u < acc) return i;
  }
  return nucleus.back();
}

TEST(SamplerTest, NucleusOfALargeVocabularyEqualsTheFullSort) {
  // Flat logits make the nucleus large (thousands of tokens), peaked ones small.
  for (float scale : {0.3f, 3.f}) {
    std::vector<float> logits = RandomLogits(50257, 21);
    for (float& x : logits) x *= scale;
    for (float top_p : {0.1f, 0.9f, 0.99f}) {
      for (uint64_t draw = 0; draw < 5; ++draw) {
        const SamplingOptions options{.temperature = 0.8f, .top_p = top_p, .seed = 77};
        EXPECT_EQ(SampleToken(logits, options, draw)->token,
                  NucleusByFullSort(logits, 0.8f, top_p, 77, draw))
            << "scale " << scale << " top_p " << top_p << " draw " << draw;
      }
    }
  }
}

// top-p applies to the temperature-scaled, top-k-cut distribution.
TEST(SamplerTest, TopPAfterTemperatureAndTopK) {
  const std::vector<float> logits = {std::log(0.3f), std::log(0.05f), std::log(0.5f),
                                     std::log(0.15f)};
  // T = 0.5 squares the probabilities: 0.25, 0.09, 0.0225, 0.0025 (/0.365) = 0.685, 0.247, ...
  ExpectFrequencies(Frequencies(logits, {.temperature = 0.5f, .top_p = 0.9f, .seed = 11}, kDraws),
                    Softmax(logits, 0.5, {2, 0}));
  // top_k = 3 then top_p = 0.95 of {0.5, 0.3, 0.15}/0.95: keeps all three.
  ExpectFrequencies(
      Frequencies(logits, {.temperature = 1.f, .top_k = 3, .top_p = 0.95f, .seed = 11}, kDraws),
      Softmax(logits, 1.0, {2, 0, 3}));
}

TEST(SamplerTest, MaskedTokensAreNeverChosen) {
  const std::vector<float> logits = {kNegInf, 0.f, kNegInf, 0.f};
  ExpectFrequencies(Frequencies(logits, {.seed = 1}, 2000), {0, 0.5, 0, 0.5});
  EXPECT_EQ(SampleToken(logits, {.temperature = 0.f}, 0)->token, 1);
  EXPECT_EQ(SampleToken(logits, {.top_k = 3}, 0)->token % 2, 1);
}

TEST(SamplerTest, LogProbIsUnderTheUnmodifiedDistribution) {
  const std::vector<float> logits = RandomLogits(50, 9);
  const std::vector<double> p = Softmax(logits, 1.0);
  for (const SamplingOptions& options :
       {SamplingOptions{.temperature = 0.f}, SamplingOptions{.temperature = 0.3f, .top_k = 4},
        SamplingOptions{.temperature = 1.7f, .top_p = 0.5f, .seed = 2}}) {
    for (uint64_t draw = 0; draw < 20; ++draw) {
      const SampledToken t = *SampleToken(logits, options, draw);
      EXPECT_NEAR(t.logprob, std::log(p[t.token]), 1e-12);
    }
  }
  // Large logits do not overflow.
  const std::vector<float> big = {1e30f, 1e30f, 0.f};
  EXPECT_NEAR(SampleToken(big, {.temperature = 0.f}, 0)->logprob, std::log(0.5), 1e-12);
}

TEST(SamplerTest, SameSeedSameTokensWhateverTheBatchPosition) {
  const std::vector<float> logits = RandomLogits(1000, 4);
  const SamplingOptions options{.temperature = 1.f, .top_p = 0.9f, .seed = 1234};
  // Request A alone.
  Sampler alone = *Sampler::Create(options);
  std::vector<int32_t> a_alone;
  for (int i = 0; i < 64; ++i) a_alone.push_back(alone.Next(logits)->token);
  // Request A as the second row of a batch, interleaved with B (another seed).
  Sampler a = *Sampler::Create(options);
  Sampler b = *Sampler::Create({.temperature = 1.f, .top_p = 0.9f, .seed = 99});
  std::vector<int32_t> a_batched, b_batched;
  for (int i = 0; i < 64; ++i) {
    b_batched.push_back(b.Next(logits)->token);
    a_batched.push_back(a.Next(logits)->token);
  }
  EXPECT_EQ(a_alone, a_batched);
  EXPECT_NE(a_alone, b_batched);
  EXPECT_EQ(a.draws(), 64u);
  // The stateless form gives the same tokens at the same draw indices.
  for (int i = 0; i < 64; ++i) EXPECT_EQ(SampleToken(logits, options, i)->token, a_alone[i]);
}

TEST(SamplerTest, CounterUniformIsInRangeAndUniform) {
  double sum = 0;
  int below_tenth = 0;
  for (uint64_t d = 0; d < 100000; ++d) {
    const double u = CounterUniform(5, d);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    below_tenth += u < 0.1;
  }
  EXPECT_NEAR(sum / 100000, 0.5, 0.005);
  EXPECT_NEAR(below_tenth / 100000.0, 0.1, 0.005);
  EXPECT_NE(CounterUniform(5, 0), CounterUniform(6, 0));
  EXPECT_EQ(CounterUniform(5, 7), CounterUniform(5, 7));
}

TEST(SamplerTest, RejectsBadOptions) {
  const std::vector<float> logits = {0.f, 1.f};
  for (const auto& [options, needle] : std::vector<std::pair<SamplingOptions, std::string>>{
           {{.temperature = -0.5f}, "temperature"},
           {{.temperature = NAN}, "temperature"},
           {{.temperature = INFINITY}, "temperature"},
           {{.top_k = -1}, "top_k"},
           {{.top_p = 0.f}, "top_p"},
           {{.top_p = 1.5f}, "top_p"},
           {{.top_p = NAN}, "top_p"}}) {
    absl::StatusOr<SampledToken> t = SampleToken(logits, options, 0);
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << needle;
    EXPECT_THAT(t.status().message(), HasSubstr(needle));
    EXPECT_EQ(Sampler::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(SamplerTest, RejectsBadLogits) {
  for (const auto& [logits, needle] :
       std::vector<std::pair<std::vector<float>, std::string>>{{{}, "empty"},
                                                               {{0.f, NAN, 1.f}, "token 1"},
                                                               {{0.f, 1.f, INFINITY}, "token 2"},
                                                               {{kNegInf, kNegInf}, "-infinity"}}) {
    for (float temperature : {0.f, 1.f}) {
      absl::StatusOr<SampledToken> t = SampleToken(logits, {.temperature = temperature}, 0);
      EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << needle;
      EXPECT_THAT(t.status().message(), HasSubstr(needle));
    }
  }
  Sampler sampler = *Sampler::Create({});
  EXPECT_FALSE(sampler.Next(std::vector<float>{NAN}).ok());
  EXPECT_EQ(sampler.draws(), 0u);  // a failed draw does not advance the counter
}

}  // namespace
}  // namespace mesa::model
