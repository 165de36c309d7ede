// Decoding speed of a MesaNet-small-sized model (14 layers, d_model 768, 6 heads x 128, vocab
// 50257; random weights): prefill of a context by the chunkwise forward, then single-token steps
// for every row, greedy, with the logits read back each step as generation does. Reports prefill
// tokens/s and decode tokens/s per (batch, context), and the mean CG steps per token.
//   decode_bench [--device cpu|cuda] [--mixer mesa] [--layers 14] [--batches 1,64]
//                [--contexts 1024,8192,32768] [--steps 32] [--cg_tol 0] [--chunk 2048]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "model/backend/cpu_backend.h"
#include "model/backend/cuda/cuda_backend.h"
#include "model/generate/generator.h"
#include "model/net/mesanet.h"
#include "spec/mixers.h"

namespace mesa::model {
namespace {

struct Args {
  std::string device = "cuda", mixer = "mesa";
  int layers = 14, steps = 32, chunk = 2048;
  float cg_tol = 0;
  bool profile = false;  // per-op GPU times of one step after the timed ones
  std::vector<int> batches = {1, 64}, contexts = {1024, 8192, 32768};
};

std::vector<int> Ints(const std::string& list) {
  std::vector<int> out;
  for (absl::string_view item : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    int v = 0;
    if (absl::SimpleAtoi(item, &v)) out.push_back(v);
  }
  return out;
}

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--device")
      a.device = v;
    else if (k == "--mixer")
      a.mixer = v;
    else if (k == "--layers")
      a.layers = std::atoi(v.c_str());
    else if (k == "--steps")
      a.steps = std::atoi(v.c_str());
    else if (k == "--chunk")
      a.chunk = std::atoi(v.c_str());
    else if (k == "--cg_tol")
      a.cg_tol = std::strtof(v.c_str(), nullptr);
    else if (k == "--batches")
      a.batches = Ints(v);
    else if (k == "--contexts")
      a.contexts = Ints(v);
    else if (k == "--profile")
      a.profile = v == "1";
    else
      std::fprintf(stderr, "unknown flag %s\n", k.c_str()), std::exit(2);
  }
  return a;
}

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int Main(int argc, char** argv) {
  const Args args = Parse(argc, argv);
  std::unique_ptr<Backend> backend;
  if (args.device == "cuda") {
    CudaBackendOptions options;
    options.exact_cg_steps = false;  // as mesa-generate: fixed steps are not read back
    auto cuda = CreateCudaBackend(options);
    if (!cuda.ok()) {
      std::fprintf(stderr, "%s\n", std::string(cuda.status().message()).c_str());
      return 1;
    }
    backend = *std::move(cuda);
  } else {
    backend = std::make_unique<CpuBackend>();
  }
  CudaBackendControl* control = GetCudaControl(backend.get());
  auto sync = [&] {
    if (control != nullptr) (void)control->Synchronize();
  };
  const spec::MixerTraits* mixer = spec::FindMixer(args.mixer);
  if (mixer == nullptr) return 2;
  ModelConfig config;
  config.vocab_size = 50257;
  config.d_model = 768;
  config.n_layers = args.layers;
  config.n_heads = 6;
  config.head_dim = 128;
  config.mlp_hidden = 2304;
  config.mixer = mixer->kind;
  config.cg_steps = mixer->solves_with_cg ? 30 : 0;
  config.bos_token = 50256;
  const MesaSolve solve{config.cg_steps, args.cg_tol};
  std::printf("BENCH decode device %s mixer %s layers %d cg %s\n", args.device.c_str(),
              args.mixer.c_str(), args.layers,
              args.cg_tol > 0 ? ("tolerance " + std::to_string(args.cg_tol)).c_str() : "fixed 30");
  std::printf("BENCH %6s %8s %14s %14s %12s %14s %16s %10s\n", "batch", "context", "prefill tok/s",
              "decode tok/s", "ms/step", "ms/step(GPU)", "tok/s(dev argmax)", "CG/token");
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> byte(0, 255);
  for (const int b : args.batches) {
    // Prefill pieces of `chunk` tokens per row; fewer for wide batches, so that the activations of
    // one piece (b x chunk tokens) stay a few GiB.
    const int chunk = std::max(1, std::min(args.chunk, (1 << 16) / b));
    auto net = MesaNet::Create(config, backend.get(), b, chunk);
    if (!net.ok()) {
      std::fprintf(stderr, "%s\n", std::string(net.status().message()).c_str());
      return 1;
    }
    (*net)->InitializeParams(1);
    for (const int context : args.contexts) {
      auto state = (*net)->NewDecodeState(b);
      if (!state.ok()) return 1;
      std::vector<int32_t> tokens(static_cast<size_t>(b) * chunk);
      for (int32_t& t : tokens) t = byte(rng);
      sync();
      auto start = std::chrono::steady_clock::now();
      for (int done = 0; done < context; done += chunk) {
        const int n = std::min(chunk, context - done);
        if (!(*net)->Advance(tokens.data(), b, n, solve, **state, 0).ok()) return 1;
      }
      sync();
      const double prefill_s = Seconds(start);
      std::vector<float> logits;
      std::vector<int32_t> next(b, 32);
      double cg = 0;
      start = std::chrono::steady_clock::now();
      for (int s = 0; s < args.steps; ++s) {
        auto stats = (*net)->Advance(next.data(), b, 1, solve, **state, 0);
        if (!stats.ok()) return 1;
        cg += SolvingLayersMean(config, stats->layer_cg_steps);
        (*net)->CopyLogitsToHost(&logits);  // synchronises, as sampling on the host does
        for (int r = 0; r < b; ++r) {
          const float* row = logits.data() + static_cast<size_t>(r) * config.vocab_size;
          next[r] = static_cast<int32_t>(std::max_element(row, row + config.vocab_size) - row);
        }
      }
      const double decode_s = Seconds(start);
      // Greedy on the device: only each row's token comes back (what mesa-generate does at
      // temperature 0).
      std::vector<int32_t> greedy;
      std::vector<float> greedy_lp;
      sync();
      start = std::chrono::steady_clock::now();
      for (int s = 0; s < args.steps; ++s) {
        if (!(*net)->Advance(next.data(), b, 1, solve, **state, 0).ok()) return 1;
        (*net)->GreedyFromLogits(&greedy, &greedy_lp);
        std::copy(greedy.begin(), greedy.end(), next.begin());
      }
      const double device_greedy_s = Seconds(start);
      // The same steps without reading the logits back (what the GPU work alone takes).
      sync();
      start = std::chrono::steady_clock::now();
      for (int s = 0; s < args.steps; ++s) {
        if (!(*net)->Advance(next.data(), b, 1, solve, **state, 0).ok()) return 1;
      }
      sync();
      const double gpu_s = Seconds(start);
      std::printf("BENCH %6d %8d %14.0f %14.0f %12.3f %14.3f %16.0f %10.2f\n", b, context,
                  double(b) * context / prefill_s, double(b) * args.steps / decode_s,
                  1e3 * decode_s / args.steps, 1e3 * gpu_s / args.steps,
                  double(b) * args.steps / device_greedy_s, cg / args.steps);
      std::fflush(stdout);
      if (args.profile && control != nullptr) {
        control->SetProfiling(true);
        if (!(*net)->Advance(next.data(), b, 1, solve, **state, 0).ok()) return 1;
        (*net)->CopyLogitsToHost(&logits);
        control->SetProfiling(false);
        std::printf("PROFILE batch %d context %d\n%s\n", b, context,
                    control->ProfileReport().c_str());
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace mesa::model

int main(int argc, char** argv) { return mesa::model::Main(argc, argv); }
