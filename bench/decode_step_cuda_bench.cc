// Benchmark (tags gpu, benchmark, manual): one decoding step of MesaNet-small's mixers on the GPU
// through the fused step kernels (kernels/mesa/cuda/mesa_step_cuda.h, causal_conv_step_cuda.h,
// kernels/deltanet/cuda/step_cuda.h). by default H = 16 heads, D = 128, 12 layers, each with its
// own state and inputs; the layers' calls are captured in one CUDA graph and its replays timed with
// CUDA events (median), reported per layer. Mesa with bf16 q/k/v at fixed 30 CG steps, at tolerance
// 1e-4 (max 30; mean steps reported) and as GLA (0 steps); Gated DeltaNet; the q and k causal
// convolutions (C = H * D, W = 4). The floor column is the state bytes (read + write) at the
// measured copy bandwidth. Usage: decode_step_cuda_bench [--reps N] [--layers 12] [--heads 16]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/common/cuda/cuda_host_util.h"
#include "kernels/conv/cuda/causal_conv_step_cuda.h"
#include "kernels/deltanet/cuda/step_cuda.h"
#include "kernels/mesa/cuda/mesa_step_cuda.h"
#include "kernels/mesa/cuda/mesa_step_kernels.h"

namespace mesa::kernels::cuda {
namespace {

void CheckOk(const absl::Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    std::exit(2);
  }
}

// The benchmark shape of the decoding-step brief (--layers, --heads change it; the project's
// MesaNet-small, examples/train_small_gpu.yaml, has 14 layers of 6 heads).
int g_layers = 12, g_heads = 16;
constexpr int kDim = 128, kConvWidth = 4;

std::mt19937 rng(1234);

std::vector<float> Normal(size_t n, float scale) {
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> x(n);
  for (auto& v : x) v = d(rng);
  return x;
}
std::vector<float> Uniform(size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> x(n);
  for (auto& v : x) v = d(rng);
  return x;
}
std::vector<float> UnitRows(size_t rows) {
  std::vector<float> x = Normal(rows * kDim, 1.f);
  for (size_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int i = 0; i < kDim; ++i) ss += double(x[r * kDim + i]) * x[r * kDim + i];
    for (int i = 0; i < kDim; ++i) x[r * kDim + i] /= static_cast<float>(std::sqrt(ss));
  }
  return x;
}
// Per (sequence, head): H = sum of 64 beta k k^T, as after a prompt (16 distinct heads, tiled).
std::vector<float> KeyState(size_t rows) {
  constexpr size_t kDistinct = 16, kSize = size_t(kDim) * kDim;
  std::vector<float> h(rows * kSize, 0.f);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  for (size_t r = 0; r < std::min(rows, kDistinct); ++r) {
    const std::vector<float> ks = UnitRows(64);
    for (int m = 0; m < 64; ++m) {
      const float b = u(rng);
      float* hr = &h[r * kSize];
      for (int i = 0; i < kDim; ++i) {
        for (int j = 0; j < kDim; ++j) hr[i * kDim + j] += b * ks[m * kDim + i] * ks[m * kDim + j];
      }
    }
  }
  for (size_t r = kDistinct; r < rows; ++r) {
    std::copy_n(&h[(r % kDistinct) * kSize], kSize, &h[r * kSize]);
  }
  return h;
}

void* Upload(const std::vector<float>& x, bool bf16) {
  void* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, DeviceBytes(x.size(), bf16)));
  CopyToDevice(p, x, bf16);
  return p;
}
void* Alloc(size_t bytes) {
  void* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, bytes));
  return p;
}

// Device copy bandwidth (read + write bytes / s) over a 1 GiB buffer.
double CopyTbs() {
  const size_t n = size_t(1) << 30;
  void* a = Alloc(n);
  void* b = Alloc(n);
  CHECK_CUDA(cudaMemset(a, 1, n));
  const double ms =
      MedianMs([&] { CHECK_CUDA(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice)); }, 20);
  CHECK_CUDA(cudaFree(a));
  CHECK_CUDA(cudaFree(b));
  return 2.0 * n / (ms * 1e-3) / 1e12;
}

// Median ms of one replay of a graph holding `enqueue` (all layers) on a stream.
double GraphMs(const std::function<void(cudaStream_t)>& enqueue, int reps,
               const std::function<void()>& reset) {
  reset();
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t g;
  CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  enqueue(s);
  CHECK_CUDA(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t exec;
  CHECK_CUDA(cudaGraphInstantiate(&exec, g, 0));
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  for (int i = 0; i < 5; ++i) CHECK_CUDA(cudaGraphLaunch(exec, s));
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    CHECK_CUDA(cudaEventRecord(a, s));
    CHECK_CUDA(cudaGraphLaunch(exec, s));
    CHECK_CUDA(cudaEventRecord(b, s));
    CHECK_CUDA(cudaEventSynchronize(b));
    float t = 0;
    CHECK_CUDA(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  CHECK_CUDA(cudaGetLastError());
  std::sort(ms.begin(), ms.end());
  CHECK_CUDA(cudaEventDestroy(a));
  CHECK_CUDA(cudaEventDestroy(b));
  CHECK_CUDA(cudaGraphExecDestroy(exec));
  CHECK_CUDA(cudaGraphDestroy(g));
  CHECK_CUDA(cudaStreamDestroy(s));
  return ms[ms.size() / 2];
}

struct Layer {
  void *q, *k, *v;  // bf16 [B,H,D]
  float *lg, *beta, *lambda, *h, *g, *s, *tail_q, *tail_k, *wq, *wk;
  void *o, *cq, *ck;
  int32_t* steps;
};

void Bench(int64_t B, int reps, double copy_tbs) {
  const int64_t rows = B * g_heads, tok = rows * kDim, state = rows * kDim * kDim;
  const int64_t C = g_heads * kDim;
  std::vector<Layer> layers(g_layers);
  // The states are shared host data (generating every layer's at B = 64 takes long); the
  // token inputs differ per layer.
  const std::vector<float> h0 = KeyState(rows), g0 = Normal(state, 0.3f);
  for (Layer& l : layers) {
    l.q = Upload(UnitRows(rows), true);
    l.k = Upload(UnitRows(rows), true);
    l.v = Upload(Normal(tok, 1.f), true);
    l.lg = static_cast<float*>(Upload(Uniform(rows, -0.01f, -0.001f), false));
    l.beta = static_cast<float*>(Upload(Uniform(rows, 0.05f, 1.f), false));
    l.lambda = static_cast<float*>(Upload(Uniform(g_heads * kDim, 0.25f, 1.f), false));
    l.h = static_cast<float*>(Upload(h0, false));
    l.g = static_cast<float*>(Upload(g0, false));
    l.s = static_cast<float*>(Upload(g0, false));
    l.tail_q = static_cast<float*>(Upload(Normal(B * (kConvWidth - 1) * C, 1.f), false));
    l.tail_k = static_cast<float*>(Upload(Normal(B * (kConvWidth - 1) * C, 1.f), false));
    l.wq = static_cast<float*>(Upload(Normal(C * kConvWidth, 0.5f), false));
    l.wk = static_cast<float*>(Upload(Normal(C * kConvWidth, 0.5f), false));
    l.o = Alloc(tok * 2);
    l.cq = Alloc(tok * 2);
    l.ck = Alloc(tok * 2);
    l.steps = static_cast<int32_t*>(Alloc(rows * 4));
  }
  // Back to the initial states before each configuration (the replays advance them; with
  // gamma >= 0.99 the 35 replays of one keep most of the prompt state).
  auto reset = [&] {
    for (Layer& l : layers) {
      CopyToDevice(l.h, h0, false);
      CopyToDevice(l.g, g0, false);
      CopyToDevice(l.s, g0, false);
    }
    CHECK_CUDA(cudaDeviceSynchronize());
  };
  const MesaStepDims dims{B, g_heads, kDim};
  auto mesa = [&](CgOptions cg) {
    return [&, cg](cudaStream_t s) {
      for (Layer& l : layers) {
        CheckOk(MesaStepDevice(dims, cg, {DType::kBF16, l.q, l.k, l.v, l.lg, l.beta, l.lambda},
                               {l.h, l.g}, {l.o, nullptr, l.steps}, s));
      }
    };
  };
  auto mean_steps = [&] {
    double sum = 0;
    std::vector<int32_t> st(rows);
    for (Layer& l : layers) {
      CHECK_CUDA(cudaMemcpy(st.data(), l.steps, rows * 4, cudaMemcpyDeviceToHost));
      for (int32_t x : st) sum += x;
    }
    return sum / (rows * g_layers);
  };
  const double state_bytes = 2.0 * 2 * state * 4;  // H and G, read + write
  auto row = [&](const char* what, double ms, double steps, double bytes) {
    const double us = ms * 1e3 / g_layers;
    std::printf(
        "B=%-3lld %-28s %8.2f us/layer  %8.1f us/token(all layers)  steps %5.2f  "
        "%6.0f GB/s  floor %6.2f us\n",
        static_cast<long long>(B), what, us, us * g_layers, steps, bytes / (us * 1e-6) / 1e9,
        bytes / (copy_tbs * 1e12) * 1e6);
  };
  const double fixed = GraphMs(mesa({30, 0.f}), reps, reset);
  row("mesa fixed 30", fixed, mean_steps(), state_bytes);
  // The kernel variants (mesa_step_kernels.h, MesaStepKernelArgs::variant) at fixed 30 steps and at
  // tolerance 1e-4.
  for (int variant = 1; variant < kMesaStepVariants; ++variant) {
    for (const CgOptions cg : {CgOptions{30, 0.f}, CgOptions{30, 1e-4f}}) {
      const double ms = GraphMs(
          [&](cudaStream_t s) {
            for (Layer& l : layers) {
              CheckOk(MesaStepDeviceVariant(variant, dims, cg,
                                            {DType::kBF16, l.q, l.k, l.v, l.lg, l.beta, l.lambda},
                                            {l.h, l.g}, {l.o, nullptr, l.steps}, s));
            }
          },
          reps, reset);
      const std::string name = std::string(cg.tolerance > 0 ? "mesa tol 1e-4" : "mesa fixed 30") +
                               ", variant " + std::to_string(variant);
      row(name.c_str(), ms, mean_steps(), state_bytes);
    }
  }
  const double tol = GraphMs(mesa({30, 1e-4f}), reps, reset);
  row("mesa tol 1e-4 (max 30)", tol, mean_steps(), state_bytes);
  const double gla = GraphMs(mesa({0, 0.f}), reps, reset);
  row("mesa 0 steps (GLA, H kept)", gla, 0, state_bytes);
  const double delta = GraphMs(
      [&](cudaStream_t s) {
        for (Layer& l : layers) {
          CheckOk(deltanet::cuda::DeltaStepDevice(
              {B, g_heads, kDim}, {DType::kBF16, l.q, l.k, l.v, l.beta, l.lg}, l.s, l.o, s));
        }
      },
      reps, reset);
  row("gated deltanet", delta, 0, state_bytes / 2);
  const ConvDims conv{B, 1, C, kConvWidth};
  const double convs = GraphMs(
      [&](cudaStream_t s) {
        for (Layer& l : layers) {
          CheckOk(CausalConvAppendDevice(conv, DType::kBF16, l.q, l.wq, l.tail_q, l.cq, s));
          CheckOk(CausalConvAppendDevice(conv, DType::kBF16, l.k, l.wk, l.tail_k, l.ck, s));
        }
      },
      reps, reset);
  const double conv_bytes = 2.0 * (B * C * (2 + 2 + 2 * 4 * (kConvWidth - 1)) + C * kConvWidth * 4);
  row("q+k causal conv (W=4)", convs, 0, conv_bytes);
  // The same as one launch (what the model runs: CausalConvAppendPair).
  const double conv_pairs = GraphMs(
      [&](cudaStream_t s) {
        for (Layer& l : layers) {
          CheckOk(CausalConvAppendPairDevice(conv, DType::kBF16, {l.q, l.wq, l.tail_q, l.cq},
                                             {l.k, l.wk, l.tail_k, l.ck}, s));
        }
      },
      reps, reset);
  row("q+k causal conv, one launch", conv_pairs, 0, conv_bytes);
  // Direct launches (no graph), for the launch overhead.
  auto direct = mesa({30, 1e-4f});
  reset();
  const double direct_ms = MedianMs([&] { direct(nullptr); }, reps);
  row("mesa tol 1e-4, no graph", direct_ms, mean_steps(), state_bytes);
  for (Layer& l : layers) {
    for (void* p : {l.q, l.k, l.v, static_cast<void*>(l.lg), static_cast<void*>(l.beta),
                    static_cast<void*>(l.lambda), static_cast<void*>(l.h), static_cast<void*>(l.g),
                    static_cast<void*>(l.s), static_cast<void*>(l.tail_q),
                    static_cast<void*>(l.tail_k), static_cast<void*>(l.wq),
                    static_cast<void*>(l.wk), l.o, l.cq, l.ck, static_cast<void*>(l.steps)}) {
      CHECK_CUDA(cudaFree(p));
    }
  }
}

}  // namespace
}  // namespace mesa::kernels::cuda

int main(int argc, char** argv) {
  int reps = 30;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--layers") == 0) {
      mesa::kernels::cuda::g_layers = std::atoi(argv[i + 1]);
    }
    if (std::strcmp(argv[i], "--heads") == 0) mesa::kernels::cuda::g_heads = std::atoi(argv[i + 1]);
  }
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  const double tbs = mesa::kernels::cuda::CopyTbs();
  std::printf(
      "%s, %d SMs, L2 %d MB; device copy %.2f TB/s (read + write); %d layers of %d heads "
      "x 128\n",
      prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20, tbs,
      mesa::kernels::cuda::g_layers, mesa::kernels::cuda::g_heads);
  for (int64_t b : {1, 64}) mesa::kernels::cuda::Bench(b, reps, tbs);
  return 0;
}
