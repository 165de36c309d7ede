// CPU benchmark of the single-token decoding steps (float32): microseconds per step
// of one layer (every head of every sequence of the batch), for Mesa (fixed and tolerance CG),
// GLA and Gated DeltaNet. Each step feeds the next token of a random model-like sequence, from a
// random initial state, as decoding does.
//   bazel run -c opt //bench:decode_step_cpu_bench -- [--tokens N] [--threads N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

#include "absl/flags/flag.h"
#include "base/cli_flags.h"
#include "kernels/deltanet/step.h"
#include "kernels/mesa/mesa_test_util.h"
#include "kernels/mesa/step.h"

ABSL_FLAG(int32_t, tokens, 64, "decoded tokens per configuration (median step time reported)");
ABSL_FLAG(int32_t, threads, 1, "threads over the (sequence, head) rows (0 = all cores)");

namespace mesa::kernels {
namespace {

// Token t of a [B, T, per_token...] tensor as a [B, per_token] tensor.
std::vector<float> Token(const std::vector<float>& x, int64_t b, int64_t t_len, int64_t per_token,
                         int64_t t) {
  std::vector<float> out(b * per_token);
  for (int64_t i = 0; i < b; ++i) {
    std::copy_n(x.begin() + (i * t_len + t) * per_token, per_token, out.begin() + i * per_token);
  }
  return out;
}

struct TokenInputs {
  std::vector<float> q, k, v, log_gamma, beta;
};

// Median over the tokens of the time of step(token index).
double MedianUs(int tokens, const std::function<void(int)>& step) {
  std::vector<double> us;
  for (int t = 0; t < tokens; ++t) {
    const auto start = std::chrono::steady_clock::now();
    step(t);
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
                     .count());
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

void Bench(int64_t b, int64_t h, int64_t d) {
  const int tokens = absl::GetFlag(FLAGS_tokens);
  const int threads = absl::GetFlag(FLAGS_threads);
  const testing::Problem p = testing::RandomProblem(
      {.batch = b, .seq_len = tokens, .heads = h, .head_dim = d, .initial_state = true, .seed = 1});
  std::vector<TokenInputs> inputs;
  for (int t = 0; t < tokens; ++t) {
    inputs.push_back({Token(p.q, b, tokens, h * d, t), Token(p.k, b, tokens, h * d, t),
                      Token(p.v, b, tokens, h * d, t), Token(p.log_gamma, b, tokens, h, t),
                      Token(p.beta, b, tokens, h, t)});
  }
  std::vector<float> o(b * h * d);
  std::vector<int32_t> steps(b * h);
  for (const CgOptions cg :
       {CgOptions{.max_steps = 30}, CgOptions{.max_steps = 30, .tolerance = 1e-4f},
        CgOptions{.max_steps = 0}}) {
    std::vector<float> hs = p.h0, gs = p.g0;
    double total_steps = 0;
    const double us = MedianUs(tokens, [&](int t) {
      const TokenInputs& x = inputs[t];
      (void)cpu::MesaStep({.dims = {b, h, d},
                           .q = x.q,
                           .k = x.k,
                           .v = x.v,
                           .log_gamma = x.log_gamma,
                           .beta = x.beta,
                           .lambda = p.lambda},
                          cg, {hs, gs}, {.o = o, .cg_steps = steps}, threads);
      for (int32_t s : steps) total_steps += s;
    });
    std::printf("B=%-3lld H=%lld D=%lld  %-22s %9.1f us/step  (%.1f CG steps per token and head)\n",
                (long long)b, (long long)h, (long long)d,
                cg.max_steps == 0  ? "gla"
                : cg.tolerance > 0 ? "mesa tol 1e-4, max 30"
                                   : "mesa 30 fixed",
                us, total_steps / (double(tokens) * b * h));
  }
  std::vector<float> s = p.g0;
  const double us = MedianUs(tokens, [&](int t) {
    const TokenInputs& x = inputs[t];
    (void)deltanet::DeltaNetStep(
        {.dims = {b, h, d}, .q = x.q, .k = x.k, .v = x.v, .beta = x.beta, .log_gamma = x.log_gamma},
        s, o, threads);
  });
  std::printf("B=%-3lld H=%lld D=%lld  %-22s %9.1f us/step\n", (long long)b, (long long)h,
              (long long)d, "gated deltanet", us);
}

}  // namespace
}  // namespace mesa::kernels

int main(int argc, char** argv) {
  mesa::base::ParseFlagsOrExit(argc, argv,
                               "decode_step_cpu_bench [--tokens N] [--threads N]\n"
                               "  CPU benchmark of single-token decoding steps.");
  mesa::kernels::Bench(1, 6, 128);   // one MesaNet-small layer, one sequence
  mesa::kernels::Bench(64, 6, 128);  // a batch of 64 sequences
  return 0;
}
