// CPU training throughput (forward + backward + AdamW) of a tiny MesaNet, in tokens/s.
//   bazel run -c opt //bench:cpu_throughput_benchmark -- --benchmark_min_time=5
// Figures are recorded in docs/journal.md ("MesaNet training throughput on the CPU backend").
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "model/backend/cpu_backend.h"
#include "model/net/mesanet.h"
#include "model/optimizer/adamw.h"

namespace mesa::model {
namespace {

// Arguments: mixer (0 = gla, 1 = mesa with 30 CG steps, 2 = deltanet, 3 = gated_deltanet),
// threads.
void BM_TrainStep(benchmark::State& state) {
  ModelConfig config;
  config.vocab_size = 257;
  config.d_model = 128;
  config.n_layers = 4;
  config.n_heads = 4;
  config.head_dim = 32;
  config.mlp_hidden = 384;
  constexpr MixerKind kMixers[] = {MixerKind::kGla, MixerKind::kMesa, MixerKind::kDeltaNet,
                                   MixerKind::kGatedDeltaNet};
  config.mixer = kMixers[state.range(0)];
  config.cg_steps = spec::TraitsOf(config.mixer).solves_with_cg ? 30 : 0;
  const int batch = 8, seq_len = 256;
  CpuBackendOptions options;
  options.num_threads = static_cast<int>(state.range(1));
  CpuBackend backend(options);
  auto net = MesaNet::Create(config, &backend, batch, seq_len);
  if (!net.ok()) {
    state.SkipWithError(std::string(net.status().message()).c_str());
    return;
  }
  (*net)->InitializeParams(1);
  OptimizerSettings settings;
  AdamW adamw(settings, (*net)->layout(), &backend);
  std::mt19937 rng(1);
  std::vector<int32_t> tokens(batch * seq_len), targets(batch * seq_len);
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = rng() % 256;
    targets[i] = rng() % 256;
  }
  const MesaSolve solve{config.cg_steps, 0.0f};
  int64_t step = 0;
  for (auto _ : state) {
    (*net)->ZeroGrads();
    auto stats = (*net)->Forward(tokens.data(), targets.data(), batch, solve);
    auto cg = (*net)->Backward(1.0f / (batch * seq_len));
    if (!stats.ok() || !cg.ok()) {
      state.SkipWithError("step failed");
      return;
    }
    const double norm = adamw.GradNorm((*net)->grads());
    adamw.Update((*net)->params(), (*net)->grads(), norm, 1e-3f, step++);
  }
  state.counters["tokens_per_second"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * batch * seq_len, benchmark::Counter::kIsRate);
  state.counters["params"] = static_cast<double>((*net)->num_params());
  state.SetLabel(absl::StrCat(MixerName(config.mixer), " B8xT256 4x128 heads 4x32"));
}
BENCHMARK(BM_TrainStep)
    ->ArgsProduct({{0, 1, 2, 3}, {1, 2}})
    ->ArgNames({"mixer", "threads"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace mesa::model

BENCHMARK_MAIN();
