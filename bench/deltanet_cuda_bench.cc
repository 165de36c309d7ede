// Benchmark (tags gpu, benchmark, manual): times the CUDA DeltaNet-family operator (DeltaNet and
// Gated DeltaNet) with CUDA events (warm-up, median of many repetitions) on random inputs with
// the model's value ranges (L2-normalised q, k; sigmoid beta; log-sigmoid gates). Prints
// RESULT lines with ms and TFLOP/s (kernels/deltanet/README.md counts the FLOPs).
// Usage: deltanet_cuda_bench [--reps N] [--B 8 --T 2048 --H 16 --D 128] [--fp32]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/common/cuda/cuda_host_util.h"
#include "kernels/deltanet/cuda/deltanet_cuda.h"

namespace mesa::kernels::deltanet::cuda {
namespace {

using ::mesa::kernels::cuda::MedianMs;
using ::mesa::kernels::cuda::NewDeviceCopy;

int Main(int argc, char** argv) {
  int reps = 50;
  int64_t B = 8, T = 2048, H = 16, D = 128;
  bool bf16 = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() { return i + 1 < argc ? std::atoll(argv[++i]) : 0; };
    if (a == "--reps")
      reps = static_cast<int>(next());
    else if (a == "--B")
      B = next();
    else if (a == "--T")
      T = next();
    else if (a == "--H")
      H = next();
    else if (a == "--D")
      D = next();
    else if (a == "--fp32")
      bf16 = false;
  }
  const DeltaDims dims{B, T, H, D};
  CHECK_STATUS(CheckDeviceDims(dims));
  std::mt19937 rng(1);
  std::normal_distribution<float> n(0.f, 1.f);
  const int64_t tok = B * T * H;
  auto unit_rows = [&]() {
    std::vector<float> x(tok * D);
    for (int64_t r = 0; r < tok; ++r) {
      double ss = 0;
      for (int64_t i = 0; i < D; ++i) ss += (x[r * D + i] = n(rng)) * x[r * D + i];
      for (int64_t i = 0; i < D; ++i) x[r * D + i] /= static_cast<float>(std::sqrt(ss));
    }
    return x;
  };
  std::vector<float> v(tok * D), d_o(tok * D), beta(tok), lg(tok);
  for (auto& x : v) x = n(rng);
  for (auto& x : d_o) x = n(rng);
  for (auto& x : beta) x = 1.f / (1.f + std::exp(-n(rng)));
  for (auto& x : lg) x = -std::log1p(std::exp(-(n(rng) + 3.f)));
  DeviceInputs in{bf16 ? DType::kBF16 : DType::kF32,
                  NewDeviceCopy(unit_rows(), bf16),
                  NewDeviceCopy(unit_rows(), bf16),
                  NewDeviceCopy(v, bf16),
                  static_cast<const float*>(NewDeviceCopy(beta, false)),
                  nullptr,
                  nullptr};
  const float* lg_dev = static_cast<const float*>(NewDeviceCopy(lg, false));
  void* o = NewDeviceCopy(std::vector<float>(tok * D, 0.f), bf16);
  void* dov = NewDeviceCopy(d_o, bf16);
  void* dq = NewDeviceCopy(std::vector<float>(tok * D, 0.f), bf16);
  void* dk = NewDeviceCopy(std::vector<float>(tok * D, 0.f), bf16);
  void* dv = NewDeviceCopy(std::vector<float>(tok * D, 0.f), bf16);
  float* dbeta = static_cast<float*>(NewDeviceCopy(std::vector<float>(tok, 0.f), false));
  float* dlg = static_cast<float*>(NewDeviceCopy(std::vector<float>(tok, 0.f), false));
  Workspace ws;
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  for (const bool gated : {false, true}) {
    in.log_gamma = gated ? lg_dev : nullptr;
    DeviceGradients g{dq, dk, dv, dbeta, gated ? dlg : nullptr, nullptr};
    // MESA_BENCH_RECOMPUTE=1: the backward recomputes the forward's chunk quantities (A, P, W, U,
    // X, chunk states) instead of reusing those the forward kept (what the trainer does).
    const bool keep = std::getenv("MESA_BENCH_RECOMPUTE") == nullptr;
    auto fwd = [&] { CHECK_STATUS(ForwardDevice(dims, {}, in, {o, nullptr, keep}, &ws, nullptr)); };
    auto bwd = [&] {
      CHECK_STATUS(BackwardDevice(dims, {}, in, {dov, nullptr, keep}, g, &ws, nullptr));
    };
    const double f_ms = MedianMs(fwd, reps);
    const double b_ms = MedianMs(bwd, reps);
    const double fb_ms = MedianMs(
        [&] {
          fwd();
          bwd();
        },
        reps);
    const double flops = ForwardFlops(dims) + BackwardFlops(dims);
    std::printf(
        "RESULT %s B%ld T%ld H%ld D%ld %s %s | fwd %.3f ms | bwd %.3f ms | fwd+bwd %.3f ms "
        "(%.0f TFLOP/s)\n",
        gated ? "gated_deltanet" : "deltanet", B, T, H, D, bf16 ? "bf16" : "fp32",
        keep ? "reuse" : "recompute", f_ms, b_ms, fb_ms, flops / (fb_ms * 1e-3) / 1e12);
  }
  return 0;
}

}  // namespace
}  // namespace mesa::kernels::deltanet::cuda

int main(int argc, char** argv) { return mesa::kernels::deltanet::cuda::Main(argc, argv); }
