// GPU benchmark: one full training step (forward + backward + grad norm + AdamW) of MesaNet-small
// (14 layers, d_model 768, 6 heads x 128, MLP 2304, vocab 50257, B=8, T=2048, 30 CG steps) on the
// CUDA backend, plus the Mesa op alone and every GEMM shape of the step (bf16 activations: bf16
// GEMMs; fp32 activations: each math mode).
//
// Usage: cuda_backend_bench [--activations bf16|fp32] [--gemm tf32|bf16|fp32] [--steps N]
//                           [--batch B] [--seq T] [--layers L] [--gemm_reps N] [--no_gemm_table]
//                           [--profile] [--mixer NAME (spec/mixers.h)]
// Prints "BENCH key value" lines and a summary table.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "model/backend/cuda/cuda_backend.h"
#include "model/mixers/mesa/mesa_ops.h"
#include "model/mixers/mixer_ops.h"
#include "model/net/mesanet.h"
#include "model/optimizer/adamw.h"
#include "spec/mixers.h"

namespace mesa::model {
namespace {

#define BENCH_CHECK(expr)                                                                \
  do {                                                                                   \
    cudaError_t _e = (expr);                                                             \
    if (_e != cudaSuccess) {                                                             \
      std::fprintf(stderr, "CUDA error %s at %s:%d\n", cudaGetErrorString(_e), __FILE__, \
                   __LINE__);                                                            \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? NAN : v[v.size() / 2];
}

struct Args {
  std::string activations = "bf16";
  std::string gemm = "tf32";
  int steps = 6;
  int batch = 8;
  int seq = 2048;
  int layers = 14;
  int gemm_reps = 10;
  bool gemm_table = true;
  bool profile = false;
  std::string mixer = "mesa";  // every layer's mixer, a name of spec/mixers.h
};

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", s.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (s == "--gemm")
      a.gemm = next();
    else if (s == "--activations")
      a.activations = next();
    else if (s == "--steps")
      a.steps = std::atoi(next().c_str());
    else if (s == "--batch")
      a.batch = std::atoi(next().c_str());
    else if (s == "--seq")
      a.seq = std::atoi(next().c_str());
    else if (s == "--layers")
      a.layers = std::atoi(next().c_str());
    else if (s == "--gemm_reps")
      a.gemm_reps = std::atoi(next().c_str());
    else if (s == "--no_gemm_table")
      a.gemm_table = false;
    else if (s == "--profile")
      a.profile = true;
    else if (s == "--mixer")
      a.mixer = next();
    else {
      std::fprintf(stderr, "unknown flag %s\n", s.c_str());
      std::exit(2);
    }
  }
  return a;
}

class Timer {
 public:
  explicit Timer(cudaStream_t s) : s_(s) {
    BENCH_CHECK(cudaEventCreate(&a_));
    BENCH_CHECK(cudaEventCreate(&b_));
  }
  ~Timer() {
    cudaEventDestroy(a_);
    cudaEventDestroy(b_);
  }
  void Start() { BENCH_CHECK(cudaEventRecord(a_, s_)); }
  double StopMs() {
    BENCH_CHECK(cudaEventRecord(b_, s_));
    BENCH_CHECK(cudaEventSynchronize(b_));
    float ms = 0;
    BENCH_CHECK(cudaEventElapsedTime(&ms, a_, b_));
    return ms;
  }

 private:
  cudaStream_t s_;
  cudaEvent_t a_, b_;
};

// Every GEMM of one training step, timed alone (random inputs, not zeros).
void GemmTable(Backend* be, CudaBackendControl* ctl, const ModelConfig& c, int64_t bt, int reps) {
  struct Shape {
    const char* name;
    int64_t m, k, n;
    int count;       // per step (forward; backward has the same count of dX and dW)
    int64_t ld = 0;  // row stride of out / d_out (0: dense, n)
  };
  const int64_t d = c.d_model, hd = c.qk_dim(), f = c.mlp_hidden, v = c.vocab_size;
  const std::vector<Shape> shapes = {
      {"qkv_proj", bt, d, hd, 3 * c.n_layers},
      {"gate_ab", bt, d, c.n_heads, 2 * c.n_layers},
      {"o_proj", bt, hd, d, c.n_layers},
      {"mlp_gate_up", bt, d, f, 2 * c.n_layers},
      {"mlp_down", bt, f, d, c.n_layers},
      // The model runs the lm_head over the padded vocabulary (ParamLayout::PaddedVocab); the
      // ragged width (n = vocab, rows padded) is kept for comparison and not counted in the step.
      {"lm_head_ragged", bt, d, v, 0, ParamLayout::PaddedVocab(v)},
      {"lm_head", bt, d, ParamLayout::PaddedVocab(v), 1},
  };
  int64_t max_in = 0, max_w = 0, max_out = 0;
  for (const Shape& s : shapes) {
    max_in = std::max(max_in, s.m * s.k);
    max_w = std::max(max_w, s.n * s.k);
    max_out = std::max(max_out, s.m * std::max(s.n, s.ld));
  }
  Act in = be->AllocateActivations(max_in);
  float* w = be->AllocateFloats(max_w);
  Act out = be->AllocateActivations(max_out);
  Act d_in = be->AllocateActivations(max_in);
  float* d_w = be->AllocateFloats(max_w);
  {
    std::mt19937 rng(5);
    std::normal_distribution<float> n01(0.f, 1.f);
    std::vector<float> h(std::max({max_in, max_w, max_out}));
    for (float& x : h) x = n01(rng);
    be->ActivationsFromHost(in, h.data(), max_in);
    be->ActivationsFromHost(d_in, h.data(), max_in);
    be->CopyToDevice(w, h.data(), sizeof(float) * max_w);
    be->CopyToDevice(d_w, h.data(), sizeof(float) * max_w);
    be->ActivationsFromHost(out, h.data(), max_out);
  }
  be->CacheWeights(w, max_w);  // bf16 activations: time the GEMMs, not a weight conversion
  const bool bf16_acts = be->activation_type() == ActivationType::kBfloat16;
  Timer timer(static_cast<cudaStream_t>(ctl->stream()));
  std::printf("\n%-6s %-14s %-22s %9s %9s %9s %8s %8s %8s\n", "math", "gemm", "MxKxN", "fwd_ms",
              "dX_ms", "dW_ms", "fwd_TF", "dX_TF", "dW_TF");
  // With bf16 activations the GEMMs are always bf16 x bf16 (the math mode applies to fp32 only).
  const std::vector<GemmMath> modes =
      bf16_acts ? std::vector<GemmMath>{GemmMath::kTf32}
                : std::vector<GemmMath>{GemmMath::kTf32, GemmMath::kFp32, GemmMath::kBf16};
  for (GemmMath math : modes) {
    ctl->SetGemmMath(math);
    const char* label = bf16_acts ? "bf16act" : GemmMathName(math);
    double step_ms = 0;
    for (const Shape& s : shapes) {
      const int r = math == GemmMath::kFp32 ? std::max(2, reps / 4) : reps;
      auto time = [&](auto&& fn) {
        fn();  // warm-up (plan + heuristic)
        std::vector<double> t;
        for (int i = 0; i < r; ++i) {
          timer.Start();
          fn();
          t.push_back(timer.StopMs());
        }
        return Median(t);
      };
      const int64_t ld = s.ld > 0 ? s.ld : s.n;
      const double fwd =
          time([&] { be->LinearForwardStrided(in, w, out, ld, s.m, s.k, s.n, false); });
      const double dx = time(
          [&] { be->LinearBackwardStrided(in, w, out, ld, d_in, nullptr, s.m, s.k, s.n, true); });
      const double dw =
          time([&] { be->LinearBackwardStrided(in, w, out, ld, Act{}, d_w, s.m, s.k, s.n, true); });
      const double flop = 2.0 * s.m * s.k * s.n;
      std::printf(
          "%-6s %-14s %-22s %9.3f %9.3f %9.3f %8.1f %8.1f %8.1f\n", label, s.name,
          (std::to_string(s.m) + "x" + std::to_string(s.k) + "x" + std::to_string(s.n)).c_str(),
          fwd, dx, dw, flop / fwd * 1e-9, flop / dx * 1e-9, flop / dw * 1e-9);
      step_ms += s.count * (fwd + dx + dw);
    }
    std::printf("BENCH gemm_step_ms_%s %.2f\n", label, step_ms);
  }
  be->Free(in);
  be->Free(w);
  be->Free(out);
  be->Free(d_in);
  be->Free(d_w);
  if (absl::Status st = ctl->Synchronize(); !st.ok()) {
    std::printf("GEMM table stopped: %s\n", std::string(st.message()).c_str());
  }
}

int Main(int argc, char** argv) {
  const Args args = Parse(argc, argv);
  CudaBackendOptions options;
  auto math = ParseGemmMath(args.gemm);
  if (!math.ok()) {
    std::fprintf(stderr, "%s\n", std::string(math.status().message()).c_str());
    return 2;
  }
  options.gemm_math = *math;
  if (args.activations == "bf16") {
    options.activations = ActivationType::kBfloat16;
  } else if (args.activations == "fp32") {
    options.activations = ActivationType::kFloat32;
  } else {
    std::fprintf(stderr, "--activations must be bf16 or fp32\n");
    return 2;
  }
  options.exact_cg_steps = false;  // fixed 30 steps: no per-layer sync for the step count
  auto be_or = CreateCudaBackend(options);
  if (!be_or.ok()) {
    std::fprintf(stderr, "%s\n", std::string(be_or.status().message()).c_str());
    return 1;
  }
  std::unique_ptr<Backend> be = std::move(*be_or);
  CudaBackendControl* ctl = GetCudaControl(be.get());
  cudaStream_t stream = static_cast<cudaStream_t>(ctl->stream());
  cudaDeviceProp prop{};
  BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
  size_t free0 = 0, total = 0;
  BENCH_CHECK(cudaMemGetInfo(&free0, &total));
  std::printf("BENCH device %s (%d SMs, %.1f GiB)\n", prop.name, prop.multiProcessorCount,
              total / double(1 << 30));

  ModelConfig config;
  config.vocab_size = 50257;
  config.d_model = 768;
  config.n_layers = args.layers;
  config.n_heads = 6;
  config.head_dim = 128;
  config.mlp_hidden = 2304;
  config.cg_steps = 30;
  config.bos_token = 50256;
  const spec::MixerTraits* mixer = spec::FindMixer(args.mixer);
  if (mixer == nullptr) {
    std::fprintf(stderr, "--mixer must be one of %s\n", spec::MixerNameList().c_str());
    return 2;
  }
  config.mixer = mixer->kind;
  if (!mixer->solves_with_cg) config.cg_steps = 0;
  std::printf("BENCH mixer %s\n", MixerName(config.mixer));
  const int b = args.batch, t = args.seq;
  const int64_t bt = int64_t{b} * t;

  auto net_or = MesaNet::Create(config, be.get(), b, t);
  if (!net_or.ok()) {
    std::fprintf(stderr, "MesaNet::Create: %s\n", std::string(net_or.status().message()).c_str());
    return 1;
  }
  MesaNet& net = **net_or;
  net.InitializeParams(1234);
  OptimizerSettings opt;
  AdamW adamw(opt, net.layout(), be.get());
  std::printf("BENCH params %lld  activation_GiB %.2f\n", static_cast<long long>(net.num_params()),
              net.activation_bytes_total() / double(1 << 30));

  std::vector<int32_t> tokens(bt), targets(bt);
  std::mt19937 rng(42);
  std::uniform_int_distribution<int32_t> tok(0, config.vocab_size - 2);
  for (auto& x : tokens) x = tok(rng);
  for (int64_t i = 0; i < bt; ++i) targets[i] = i + 1 < bt ? tokens[i + 1] : 0;
  for (int64_t i = 0; i < bt; i += 700) targets[i] = config.bos_token;  // some masked targets

  MesaSolve solve;
  solve.max_steps = config.cg_steps;
  Timer timer(stream);
  std::vector<double> step_ms, fwd_ms, bwd_ms, opt_ms, wall_ms;
  double loss = NAN, gnorm = NAN;
  for (int s = 0; s < args.steps + 2; ++s) {  // 2 warm-up steps
    const auto w0 = std::chrono::steady_clock::now();
    timer.Start();
    net.ZeroGrads();
    auto f = net.Forward(tokens.data(), targets.data(), b, solve);
    if (!f.ok()) {
      std::fprintf(stderr, "Forward: %s\n", std::string(f.status().message()).c_str());
      return 1;
    }
    const double tf = timer.StopMs();
    timer.Start();
    auto bw = net.Backward(1.0f / f->loss_tokens);
    if (!bw.ok()) {
      std::fprintf(stderr, "Backward: %s\n", std::string(bw.status().message()).c_str());
      return 1;
    }
    const double tb = timer.StopMs();
    timer.Start();
    gnorm = adamw.GradNorm(net.grads());
    adamw.Update(net.params(), net.grads(), gnorm, 1e-4f, s);
    const double to = timer.StopMs();
    const double wall =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - w0).count();
    loss = f->loss_sum / f->loss_tokens;
    std::printf("step %d loss %.4f gnorm %.3f fwd %.1f ms bwd %.1f ms opt %.1f ms wall %.1f ms\n",
                s, loss, gnorm, tf, tb, to, wall);
    if (s >= 2) {
      fwd_ms.push_back(tf);
      bwd_ms.push_back(tb);
      opt_ms.push_back(to);
      step_ms.push_back(tf + tb + to);
      wall_ms.push_back(wall);
    }
  }
  if (!ctl->Synchronize().ok()) return 1;
  if (args.profile) {
    // One more step with every op timed alone (synchronising after each: slower than the steps
    // above, but it says where the time goes).
    ctl->SetProfiling(true);
    net.ZeroGrads();
    auto f = net.Forward(tokens.data(), targets.data(), b, solve);
    if (!f.ok() || !net.Backward(1.0f / f->loss_tokens).ok()) return 1;
    const double gn = adamw.GradNorm(net.grads());
    adamw.Update(net.params(), net.grads(), gn, 1e-4f, args.steps + 2);
    ctl->SetProfiling(false);
    std::printf("\nPROFILE one step, per op (GPU time, each op waited for)\n%s",
                ctl->ProfileReport().c_str());
  }
  size_t free1 = 0;
  BENCH_CHECK(cudaMemGetInfo(&free1, &total));
  // Everything is allocated up front or in grow-only scratch, so memory in use after the steps is
  // the peak of the step (plus the CUDA context).
  const double used_gib = (total - free1) / double(1 << 30);

  // The Mesa op alone (one layer's shape), through the backend.
  double mesa_fwd = NAN, mesa_bwd = NAN;
  {
    const int64_t h = config.n_heads, d = config.head_dim, tokn = bt * h * d, gates = bt * h;
    std::vector<float> host(tokn);
    std::normal_distribution<float> n01(0.f, 1.f);
    auto normed = [&]() {
      for (int64_t i = 0; i < tokn; i += d) {
        double ss = 0;
        for (int64_t j = 0; j < d; ++j) {
          host[i + j] = n01(rng);
          ss += host[i + j] * host[i + j];
        }
        for (int64_t j = 0; j < d; ++j) host[i + j] /= std::sqrt(ss);
      }
      Act p = be->AllocateActivations(tokn);
      be->ActivationsFromHost(p, host.data(), tokn);
      return p;
    };
    Act q = normed(), k = normed(), v = normed(), d_o = normed();
    std::vector<float> hg(gates);
    std::uniform_real_distribution<float> u(0.f, 1.f);
    for (auto& x : hg) x = -0.01f - 0.1f * u(rng);
    float* lg = be->AllocateFloats(gates);
    be->CopyToDevice(lg, hg.data(), sizeof(float) * gates);
    for (auto& x : hg) x = 0.1f + 0.8f * u(rng);
    float* beta = be->AllocateFloats(gates);
    be->CopyToDevice(beta, hg.data(), sizeof(float) * gates);
    std::vector<float> hl(h * d, 1.0f);
    float* lambda = be->AllocateFloats(h * d);
    be->CopyToDevice(lambda, hl.data(), sizeof(float) * h * d);
    Act o = be->AllocateActivations(tokn), dq = be->AllocateActivations(tokn),
        dk = be->AllocateActivations(tokn), dv = be->AllocateActivations(tokn);
    float *qs = be->AllocateFloats(tokn), *dlg = be->AllocateFloats(gates),
          *db = be->AllocateFloats(gates), *dl = be->AllocateFloats(h * d);
    const MesaActs in{.dims = {b, t, h, d},
                      .q = q,
                      .k = k,
                      .v = v,
                      .log_gamma = lg,
                      .beta = beta,
                      .lambda = lambda};
    const MesaActGrads g{dq, dk, dv, dlg, db, dl};
    absl::StatusOr<std::unique_ptr<MesaOps>> mesa = MakeOps<MesaOps>(*be);
    if (!mesa.ok()) {
      std::fprintf(stderr, "%s\n", std::string(mesa.status().message()).c_str());
      return 1;
    }
    std::vector<double> tfw, tbw;
    for (int i = 0; i < 6; ++i) {
      timer.Start();
      if (!(*mesa)->Forward(in, solve, o, qs).ok()) return 1;
      const double a = timer.StopMs();
      timer.Start();
      if (!(*mesa)->Backward(in, qs, d_o, solve, g).ok()) return 1;
      const double c = timer.StopMs();
      if (i > 0) {
        tfw.push_back(a);
        tbw.push_back(c);
      }
    }
    mesa_fwd = Median(tfw);
    mesa_bwd = Median(tbw);
    for (Act p : {q, k, v, d_o, o, dq, dk, dv}) be->Free(p);
    for (float* p : {lg, beta, lambda, qs, dlg, db, dl}) be->Free(p);
  }

  const double step = Median(step_ms), wall = Median(wall_ms);
  const double tok_s = bt / (wall * 1e-3);
  const double dense_flops = net.TrainFlopsPerToken(0) * bt;
  const double cg_flops =
      (net.TrainFlopsPerToken(config.cg_steps) - net.TrainFlopsPerToken(0)) * bt;
  const double peak_bf16 = 989e12;  // H100/H200 SXM dense bf16 (datasheet)
  std::printf("\n========== MesaNet-small training step (%s activations, %s GEMMs) ==========\n",
              args.activations.c_str(), args.activations == "bf16" ? "bf16" : args.gemm.c_str());
  std::printf("BENCH device            %s\n", prop.name);
  std::printf("BENCH config            L=%d d=%d H=%dx%d mlp=%d V=%d B=%d T=%d cg=%d\n",
              config.n_layers, config.d_model, config.n_heads, config.head_dim, config.mlp_hidden,
              config.vocab_size, b, t, config.cg_steps);
  std::printf("BENCH step_ms           %.2f (events: fwd %.2f + bwd %.2f + opt %.2f)\n", step,
              Median(fwd_ms), Median(bwd_ms), Median(opt_ms));
  std::printf("BENCH wall_step_ms      %.2f\n", wall);
  std::printf("BENCH tokens_per_s      %.0f (target 200000: %.0f%%)\n", tok_s, 100.0 * tok_s / 2e5);
  std::printf("BENCH mesa_op_ms        fwd %.2f bwd %.2f per layer -> %.1f per step\n", mesa_fwd,
              mesa_bwd, config.n_layers * (mesa_fwd + mesa_bwd));
  std::printf("BENCH dense_TFLOP/step  %.2f  cg_TFLOP/step %.2f\n", dense_flops * 1e-12,
              cg_flops * 1e-12);
  std::printf("BENCH MFU_dense         %.1f%% of 989 TFLOP/s bf16 (%.0f TFLOP/s achieved)\n",
              100.0 * dense_flops / (wall * 1e-3) / peak_bf16, dense_flops / (wall * 1e-3) * 1e-12);
  std::printf("BENCH MFU_with_cg       %.1f%%\n",
              100.0 * (dense_flops + cg_flops) / (wall * 1e-3) / peak_bf16);
  std::printf("BENCH peak_mem_GiB      %.2f of %.1f (cudaMemGetInfo; before model %.2f)\n",
              used_gib, total / double(1 << 30), (total - free0) / double(1 << 30));
  std::printf("BENCH loss              %.4f gnorm %.3f\n", loss, gnorm);
  if (!ctl->Synchronize().ok()) return 1;
  // Last: a math mode cuBLASLt rejects makes the backend's error sticky.
  if (args.gemm_table) GemmTable(be.get(), ctl, config, bt, args.gemm_reps);
  return 0;
}

}  // namespace
}  // namespace mesa::model

int main(int argc, char** argv) { return mesa::model::Main(argc, argv); }
