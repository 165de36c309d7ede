// CpuBackend::SoftcapSample is model::SampleToken on the soft-capped logits, row by row (the CPU
// counterpart the CUDA kernel is checked against in tests/gpu).
#include <cmath>
#include <random>
#include <span>
#include <vector>

#include "gtest/gtest.h"
#include "model/backend/cpu_backend.h"
#include "model/inference/sampler.h"

namespace mesa::model {
namespace {

TEST(CpuBackendSampleTest, IsSampleTokenOnTheCappedLogits) {
  CpuBackend backend(CpuBackendOptions{.num_threads = 1});
  const int64_t rows = 12, v = 300, ld = 304;
  const float cap = 5.f;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.f, 4.f);
  std::vector<float> logits(rows * ld, NAN);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < v; ++j) logits[r * ld + j] = normal(rng);
  }
  std::vector<SamplingRow> params(rows);
  for (int64_t r = 0; r < rows; ++r) {
    params[r] = {.temperature = r % 3 == 0 ? 0.f : 0.8f,
                 .top_k = r % 4 == 1 ? 10 : 0,
                 .top_p = r % 4 == 2 ? 0.7f : 1.f,
                 .seed = static_cast<uint64_t>(r),
                 .draw = static_cast<uint64_t>(3 * r)};
  }
  std::vector<int32_t> tokens(rows);
  std::vector<float> logprobs(rows);
  backend.SoftcapSample(CpuBackend::AsAct(logits.data()), rows, v, ld, cap, params.data(),
                        tokens.data(), logprobs.data());
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> capped(v);
    for (int64_t j = 0; j < v; ++j) capped[j] = cap * std::tanh(logits[r * ld + j] / cap);
    const SamplingRow& p = params[r];
    absl::StatusOr<SampledToken> want = SampleToken(
        capped, {.temperature = p.temperature, .top_k = p.top_k, .top_p = p.top_p, .seed = p.seed},
        p.draw);
    ASSERT_TRUE(want.ok());
    EXPECT_EQ(tokens[r], want->token) << r;
    EXPECT_FLOAT_EQ(logprobs[r], static_cast<float>(want->logprob)) << r;
  }
}

}  // namespace
}  // namespace mesa::model
