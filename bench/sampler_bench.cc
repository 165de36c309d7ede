// CPU benchmark of SampleToken on a GPT-2-sized row of logits (V = 50257): microseconds per draw
// for greedy, temperature, top-k and top-p with flat and peaked logits.
//   bazel run -c opt //bench:sampler_bench
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "model/inference/sampler.h"

namespace mesa::model {
namespace {

void Bench(const char* name, const std::vector<float>& logits, const SamplingOptions& options) {
  constexpr int kDraws = 200;
  std::vector<double> us;
  for (int d = 0; d < kDraws; ++d) {
    const auto start = std::chrono::steady_clock::now();
    (void)SampleToken(logits, options, d);
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
                     .count());
  }
  std::sort(us.begin(), us.end());
  std::printf("%-40s %8.1f us/draw\n", name, us[us.size() / 2]);
}

}  // namespace
}  // namespace mesa::model

int main() {
  using mesa::model::Bench;
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> flat(50257), peaked(50257);
  for (size_t i = 0; i < flat.size(); ++i) {
    flat[i] = 0.3f * normal(rng);
    peaked[i] = 3.f * normal(rng);
  }
  Bench("greedy", peaked, {.temperature = 0.f});
  Bench("temperature 1", peaked, {.temperature = 1.f});
  Bench("top_k 50", peaked, {.temperature = 1.f, .top_k = 50});
  Bench("top_p 0.9, peaked logits (sd 3)", peaked, {.temperature = 1.f, .top_p = 0.9f});
  Bench("top_p 0.9, flat logits (sd 0.3)", flat, {.temperature = 1.f, .top_p = 0.9f});
  Bench("top_k 50 + top_p 0.9", peaked, {.temperature = 1.f, .top_k = 50, .top_p = 0.9f});
  return 0;
}
