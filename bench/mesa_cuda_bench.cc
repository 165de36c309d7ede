// Benchmark (tags gpu, benchmark, manual): times the CUDA Mesa operator with CUDA events
// (warm-up, median of many repetitions) on random inputs and prints ms, TFLOP/s against the
// 989 TFLOP/s dense bf16 peak, and the floor (FLOPs at peak, bytes at HBM bandwidth).
// Usage: mesa_cuda_bench [--reps N] [--hbm_tbs 4.8] [--B b --T t [--H h] [--steps s]]  (--T: only
// B x T, D128, bf16, H16 and 30 CG steps unless given (--steps 0: the GLA readout); for the
// long-context comparison with attention and the other mixers' ops, docs/PERFORMANCE.md)
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
#include "kernels/mesa/cuda/mesa_cuda.h"

namespace mesa::kernels::cuda {
namespace {

constexpr double kPeakTflops = 989.0;

struct Shape {
  int64_t B, T, H, D;
  int steps;
  bool bf16;
};

void Bench(const Shape& sh, int reps, double hbm_tbs) {
  std::mt19937 rng(1234);
  std::normal_distribution<float> n01(0.f, 1.f);
  const int64_t toks = sh.B * sh.T * sh.H, n = toks * sh.D;
  std::vector<float> q(n), k(n), v(n), d_o(n), lg(toks), beta(toks), lam(sh.H * sh.D);
  for (auto* x : {&q, &k}) {
    for (int64_t t = 0; t < toks; ++t) {
      double s = 0;
      for (int64_t d = 0; d < sh.D; ++d) {
        (*x)[t * sh.D + d] = n01(rng);
        s += (*x)[t * sh.D + d] * (*x)[t * sh.D + d];
      }
      for (int64_t d = 0; d < sh.D; ++d)
        (*x)[t * sh.D + d] = static_cast<float>((*x)[t * sh.D + d] / std::sqrt(s));
    }
  }
  for (auto& x : v) x = n01(rng);
  for (auto& x : d_o) x = 1e-3f * n01(rng);
  for (int64_t t = 0; t < toks; ++t) {
    beta[t] = 1.f / (1.f + std::exp(-n01(rng)));
    lg[t] = -std::log1p(std::exp(-(3.f + n01(rng))));
  }
  for (auto& x : lam) x = 1.f;
  const bool bf = sh.bf16;
  const size_t es = bf ? 2 : 4;
  DeviceInputs in{bf ? DType::kBF16 : DType::kF32,
                  NewDeviceCopy(q, bf),
                  NewDeviceCopy(k, bf),
                  NewDeviceCopy(v, bf),
                  static_cast<float*>(NewDeviceCopy(lg, false)),
                  static_cast<float*>(NewDeviceCopy(beta, false)),
                  static_cast<float*>(NewDeviceCopy(lam, false)),
                  nullptr,
                  nullptr};
  void* dov = NewDeviceCopy(d_o, bf);
  void *o, *dq, *dk, *dv;
  float *qs, *dlg, *dbeta, *dlam;
  CHECK_CUDA(cudaMalloc(&o, n * es));
  CHECK_CUDA(cudaMalloc(&dq, n * es));
  CHECK_CUDA(cudaMalloc(&dk, n * es));
  CHECK_CUDA(cudaMalloc(&dv, n * es));
  CHECK_CUDA(cudaMalloc(&qs, n * 4));
  CHECK_CUDA(cudaMalloc(&dlg, toks * 4));
  CHECK_CUDA(cudaMalloc(&dbeta, toks * 4));
  CHECK_CUDA(cudaMalloc(&dlam, sh.H * sh.D * 4));
  MesaDims dims{sh.B, sh.T, sh.H, sh.D};
  CgOptions cg{sh.steps, 0.f};
  Workspace ws;
  DeviceForwardOutputs out{o, qs, nullptr, nullptr, nullptr};
  DeviceBackwardInputs bi{qs, dov, nullptr, nullptr,
                          /*reuse_forward_states=*/std::getenv("MESA_BENCH_RECOMPUTE") == nullptr};
  DeviceGradients gr{dq, dk, dv, dlg, dbeta, dlam, nullptr, nullptr, nullptr};
  auto fwd = [&] { CHECK_STATUS(ForwardDevice(dims, {}, cg, in, out, &ws, nullptr)); };
  auto bwd = [&] { CHECK_STATUS(BackwardDevice(dims, {}, cg, in, bi, gr, &ws, nullptr)); };
  const double fwd_ms = MedianMs(fwd, reps);
  const double bwd_ms = MedianMs(bwd, reps);
  const double both_ms = MedianMs(
      [&] {
        fwd();
        bwd();
      },
      reps);
  CHECK_CUDA(cudaDeviceSynchronize());
  const double ff = ForwardFlops(dims, sh.steps), bf_ = BackwardFlops(dims, sh.steps);
  // Fewest bytes: q,k,v,o (+ do, dq, dk, dv) in the I/O dtype, q* fp32 written and read back.
  const double fwd_bytes = n * (4.0 * es + 4.0), bwd_bytes = n * (7.0 * es + 4.0);
  const double floor_fwd = std::max(ff / (kPeakTflops * 1e9), fwd_bytes / (hbm_tbs * 1e9));
  const double floor_both =
      std::max((ff + bf_) / (kPeakTflops * 1e9), (fwd_bytes + bwd_bytes) / (hbm_tbs * 1e9));
  std::printf(
      "RESULT B=%lld T=%lld H=%lld D=%lld steps=%d %s | fwd %.3f ms (%.0f TFLOP/s, %.1f%% peak, "
      "floor %.3f) | "
      "bwd %.3f ms | fwd+bwd %.3f ms (%.0f TFLOP/s, %.1f%% peak, floor %.3f) | GFLOP fwd %.1f bwd "
      "%.1f\n",
      static_cast<long long>(sh.B), static_cast<long long>(sh.T), static_cast<long long>(sh.H),
      static_cast<long long>(sh.D), sh.steps, bf ? "bf16" : "fp32", fwd_ms, ff / fwd_ms / 1e9,
      100.0 * ff / fwd_ms / 1e9 / kPeakTflops, floor_fwd, bwd_ms, both_ms,
      (ff + bf_) / both_ms / 1e9, 100.0 * (ff + bf_) / both_ms / 1e9 / kPeakTflops, floor_both,
      ff / 1e9, bf_ / 1e9);
  std::fflush(stdout);
  for (void* p :
       {const_cast<void*>(in.q), const_cast<void*>(in.k), const_cast<void*>(in.v), dov, o, dq, dk,
        dv, static_cast<void*>(qs), static_cast<void*>(dlg), static_cast<void*>(dbeta),
        static_cast<void*>(dlam), static_cast<void*>(const_cast<float*>(in.log_gamma)),
        static_cast<void*>(const_cast<float*>(in.beta)),
        static_cast<void*>(const_cast<float*>(in.lambda))}) {
    CHECK_CUDA(cudaFree(p));
  }
}

}  // namespace
}  // namespace mesa::kernels::cuda

int main(int argc, char** argv) {
  int reps = 20;
  double hbm = 4.8;
  int64_t batch = 1, seq_len = 0, heads = 16;
  int steps = 30;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0)
      reps = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--hbm_tbs") == 0)
      hbm = std::atof(argv[++i]);
    else if (std::strcmp(argv[i], "--B") == 0)
      batch = std::atoll(argv[++i]);
    else if (std::strcmp(argv[i], "--T") == 0)
      seq_len = std::atoll(argv[++i]);
    else if (std::strcmp(argv[i], "--H") == 0)
      heads = std::atoll(argv[++i]);
    else if (std::strcmp(argv[i], "--steps") == 0)
      steps = std::atoi(argv[++i]);
  }
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    std::printf("no CUDA device\n");
    return 1;
  }
  std::printf("device %s, %d SMs, reps %d\n", prop.name, prop.multiProcessorCount, reps);
  using mesa::kernels::cuda::Shape;
  if (seq_len > 0) {
    mesa::kernels::cuda::Bench(Shape{batch, seq_len, heads, 128, steps, true}, reps, hbm);
    return 0;
  }
  for (const Shape& s : {Shape{8, 2048, 16, 128, 30, true}, Shape{8, 2048, 16, 128, 10, true},
                         Shape{16, 2048, 6, 128, 30, true}, Shape{16, 2048, 6, 128, 10, true},
                         Shape{8, 2048, 16, 128, 30, false}, Shape{8, 2048, 16, 64, 30, true}}) {
    mesa::kernels::cuda::Bench(s, reps, hbm);
  }
  return 0;
}
