// Scoring speed of multiple-choice items (eval.tasks) with a MesaNet-small-sized model (random
// weights, 14 layers, d_model 768, 6 heads x 128, vocab 50257): HellaSwag-shaped items (a context
// of about --context bytes, --choices continuations of about --choice bytes; byte tokens) scored
// by ScoreTask (a) in rows of the job's window (--batch x --seq_len, how EVAL jobs scored before)
// and (b) in rows planned for the items (net_for_rows: the shortest window that holds them,
// rounded up to 64, with as many rows as the same tokens allow, at most 256), and (c) in those
// rows with context reuse (each item's context run once, its continuations from the saved state;
// model/tasks/shared_context.h) in a net of a 64-token window and many rows, as the trainer
// scores now. Prints items/s for each and the largest relative difference of the
// log-likelihoods from (a)'s.
//   task_scoring_bench [--device cpu|cuda] [--items 512] [--context 100] [--choices 4]
//                      [--choice 20] [--batch 8] [--seq_len 2048] [--layers 14]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "model/backend/cpu_backend.h"
#include "model/backend/cuda/cuda_backend.h"
#include "model/net/mesanet.h"
#include "model/tasks/task_scoring.h"
#include "model/tokenizer/byte_tokenizer.h"

namespace mesa::model {
namespace {

struct Args {
  std::string device = "cuda";
  int items = 512, context = 100, choices = 4, choice = 20, batch = 8, seq_len = 2048, layers = 14;
};

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "-h" || k == "--help") {
      std::printf(
          "task_scoring_bench [--device cpu|cuda] [--items 512] [--context 100] [--choices 4]\n"
          "                   [--choice 20] [--batch 8] [--seq_len 2048] [--layers 14]\n");
      std::exit(0);
    }
    if (i + 1 >= argc) break;
    const std::string v = argv[++i];
    if (k == "--device")
      a.device = v;
    else if (k == "--items")
      a.items = std::atoi(v.c_str());
    else if (k == "--context")
      a.context = std::atoi(v.c_str());
    else if (k == "--choices")
      a.choices = std::atoi(v.c_str());
    else if (k == "--choice")
      a.choice = std::atoi(v.c_str());
    else if (k == "--batch")
      a.batch = std::atoi(v.c_str());
    else if (k == "--seq_len")
      a.seq_len = std::atoi(v.c_str());
    else if (k == "--layers")
      a.layers = std::atoi(v.c_str());
  }
  return a;
}

// Words of lower-case letters, about `bytes` long.
std::string Text(std::mt19937& rng, int bytes) {
  std::uniform_int_distribution<int> letter('a', 'z'), length(2, 8);
  std::string out;
  while (static_cast<int>(out.size()) < bytes) {
    if (!out.empty()) out.push_back(' ');
    for (int n = length(rng); n > 0; --n) out.push_back(static_cast<char>(letter(rng)));
  }
  return out;
}

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int Main(int argc, char** argv) {
  const Args args = Parse(argc, argv);
  std::unique_ptr<Backend> backend;
  if (args.device == "cuda") {
    CudaBackendOptions options;
    options.activations = ActivationType::kBfloat16;  // as EVAL jobs run on GPUs (precision auto)
    auto cuda = CreateCudaBackend(options);
    if (!cuda.ok()) {
      std::fprintf(stderr, "%s\n", std::string(cuda.status().message()).c_str());
      return 1;
    }
    backend = *std::move(cuda);
  } else {
    backend = std::make_unique<CpuBackend>();
  }
  ModelConfig config;
  config.vocab_size = 50257;
  config.d_model = 768;
  config.n_layers = args.layers;
  config.n_heads = 6;
  config.head_dim = 128;
  config.mlp_hidden = 2304;
  config.mixer = MixerKind::kMesa;
  config.cg_steps = 30;
  config.bos_token = ByteTokenizer::kBos;
  const MesaSolve solve{30, 0.0f};
  auto window_net = MesaNet::Create(config, backend.get(), args.batch, args.seq_len);
  if (!window_net.ok()) {
    std::fprintf(stderr, "%s\n", std::string(window_net.status().message()).c_str());
    return 1;
  }
  (*window_net)->InitializeParams(1);
  std::vector<float> params((*window_net)->num_params());
  (*window_net)->GetParamsToHost(params.data());

  std::mt19937 rng(7);
  std::vector<TaskExample> items(args.items);
  for (TaskExample& e : items) {
    e.context = Text(rng, args.context);
    for (int c = 0; c < args.choices; ++c) e.choices.push_back(Text(rng, args.choice));
    e.gold = {0};
    e.delimiter = " ";
  }
  ByteTokenizer tokenizer;
  std::unique_ptr<MesaNet> rows_net;
  int rows = 0, row_len = 0;
  TaskScoreOptions planned;
  planned.solve = solve;
  planned.net_for_rows = [&](int inputs) -> absl::StatusOr<TaskScoreOptions::ScoringNet> {
    row_len = std::min(args.seq_len, (inputs + 63) / 64 * 64);
    rows = std::min(256, args.batch * args.seq_len / row_len);
    if (rows_net == nullptr) {
      auto net = MesaNet::Create(config, backend.get(), rows, row_len);
      if (!net.ok()) return net.status();
      rows_net = *std::move(net);
      rows_net->SetParamsFromHost(params.data());
    }
    return TaskScoreOptions::ScoringNet{rows_net.get(), rows, row_len};
  };
  TaskScoreOptions window;
  window.solve = solve;
  TaskScoreOptions reused = planned;
  reused.reuse_context = true;
  // Shared contexts in a net of a 64-token window with the same tokens as the job's micro-batch
  // (at most 256 rows), as the trainer plans it.
  const int wave_window = std::min(64, args.seq_len);
  const int wave_rows = std::min(256, args.batch * args.seq_len / wave_window);
  std::unique_ptr<MesaNet> wave_net;
  reused.net_for_waves = [&]() -> absl::StatusOr<TaskScoreOptions::ScoringNet> {
    if (wave_net == nullptr) {
      auto net = MesaNet::Create(config, backend.get(), wave_rows, wave_window);
      if (!net.ok()) return net.status();
      wave_net = *std::move(net);
      wave_net->SetParamsFromHost(params.data());
    }
    return TaskScoreOptions::ScoringNet{wave_net.get(), wave_rows, wave_window};
  };
  std::printf(
      "BENCH task scoring device %s layers %d: %d items, %d choices, context ~%d bytes, "
      "choices ~%d bytes\n",
      args.device.c_str(), args.layers, args.items, args.choices, args.context, args.choice);
  std::vector<std::vector<double>> reference;
  for (const auto& [name, options] :
       {std::pair<const char*, const TaskScoreOptions*>{"window rows", &window},
        std::pair<const char*, const TaskScoreOptions*>{"planned rows", &planned},
        std::pair<const char*, const TaskScoreOptions*>{"reused ctx", &reused}}) {
    // One untimed pass (plans, graphs, caches), then the timed one.
    auto warm = ScoreTask(**window_net, tokenizer, items, args.batch, args.seq_len, *options);
    if (!warm.ok()) {
      std::fprintf(stderr, "%s\n", std::string(warm.status().message()).c_str());
      return 1;
    }
    const auto start = std::chrono::steady_clock::now();
    auto score = ScoreTask(**window_net, tokenizer, items, args.batch, args.seq_len, *options);
    const double seconds = Seconds(start);
    if (!score.ok()) return 1;
    double worst = 0;
    if (reference.empty()) {
      reference = score->loglikelihood;
    } else {
      for (size_t i = 0; i < reference.size(); ++i) {
        for (size_t c = 0; c < reference[i].size(); ++c) {
          worst = std::max(worst, std::abs(reference[i][c] - score->loglikelihood[i][c]) /
                                      (1 + std::abs(reference[i][c])));
        }
      }
    }
    const bool planned_rows = options != &window;
    std::printf(
        "BENCH %-12s rows %3d x %4d: %.3f s, %8.1f items/s, %9.0f requests/s%s\n", name,
        planned_rows ? rows : args.batch, planned_rows ? row_len : args.seq_len, seconds,
        args.items / seconds, args.items * args.choices / seconds,
        planned_rows ? (" (max rel LL difference " + std::to_string(worst) + ")").c_str() : "");
  }
  return 0;
}

}  // namespace
}  // namespace mesa::model

int main(int argc, char** argv) { return mesa::model::Main(argc, argv); }
