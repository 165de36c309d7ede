// Benchmark (tags gpu, benchmark, manual): times the fused CUDA attention operator (forward,
// backward, forward + backward) with CUDA events (warm-up, median of many repetitions) on random
// N(0, 1) bf16 inputs. Prints RESULT lines with ms and TFLOP/s of the visible (query, key) pairs
// (kernels/attention/README.md counts the FLOPs).
// Usage: attention_cuda_bench [--reps N] [--B 8 --T 2048 --H 16 --D 128] [--window W]... [--fp32]
//   (windows default to 0 = global causal and 1024)
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention/cuda/attention_cuda.h"
#include "kernels/cuda/cuda_host_util.h"

namespace mesa::kernels::attention::cuda {
namespace {

using ::mesa::kernels::cuda::MedianMs;

#define CHECK_OK(x)                                                                     \
  do {                                                                                  \
    absl::Status s_ = (x);                                                              \
    if (!s_.ok()) {                                                                     \
      std::fprintf(stderr, "%s at %s:%d\n", s_.ToString().c_str(), __FILE__, __LINE__); \
      std::exit(2);                                                                     \
    }                                                                                   \
  } while (0)

void* Upload(const std::vector<float>& x, bool bf16) {
  void* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, ::mesa::kernels::cuda::DeviceBytes(x.size(), bf16)));
  ::mesa::kernels::cuda::CopyToDevice(p, x, bf16);
  return p;
}

int Main(int argc, char** argv) {
  int reps = 30;
  int64_t B = 8, T = 2048, H = 16, D = 128;
  bool bf16 = true;
  std::vector<int64_t> windows;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() { return i + 1 < argc ? std::atoll(argv[++i]) : 0; };
    if (a == "--reps") {
      reps = static_cast<int>(next());
    } else if (a == "--B") {
      B = next();
    } else if (a == "--T") {
      T = next();
    } else if (a == "--H") {
      H = next();
    } else if (a == "--D") {
      D = next();
    } else if (a == "--window") {
      windows.push_back(next());
    } else if (a == "--fp32") {
      bf16 = false;
    } else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  if (windows.empty()) windows = {0, 1024};
  const AttnDims dims{B, T, H, D};
  std::mt19937 rng(1);
  std::normal_distribution<float> n(0.f, 1.f);
  auto random = [&] {
    std::vector<float> x(dims.TokenElems());
    for (float& e : x) e = n(rng);
    return x;
  };
  const DeviceInputs in{Upload(random(), bf16), Upload(random(), bf16), Upload(random(), bf16)};
  void* d_o = Upload(random(), bf16);
  const std::vector<float> zeros(dims.TokenElems(), 0.f);
  void* o = Upload(zeros, bf16);
  void* dq = Upload(zeros, bf16);
  void* dk = Upload(zeros, bf16);
  void* dv = Upload(zeros, bf16);
  float* lse = static_cast<float*>(Upload(std::vector<float>(dims.RowElems(), 0.f), false));
  Workspace ws;
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  for (const int64_t window : windows) {
    const DeviceProblem p{
        .dims = dims, .window = window, .dtype = bf16 ? DType::kBF16 : DType::kF32};
    CHECK_OK(CheckDeviceProblem(p));
    auto fwd = [&] { CHECK_OK(ForwardDevice(p, in, o, lse, nullptr)); };
    auto bwd = [&] { CHECK_OK(BackwardDevice(p, in, o, lse, d_o, dq, dk, dv, &ws, nullptr)); };
    const double f_ms = MedianMs(fwd, reps);
    const double b_ms = MedianMs(bwd, reps);
    const double fb_ms = MedianMs(
        [&] {
          fwd();
          bwd();
        },
        reps);
    const double ff = ForwardFlops(dims, window), bf = BackwardFlops(dims, window);
    std::printf(
        "RESULT attention window %ld B%ld T%ld H%ld D%ld %s | fwd %.3f ms (%.0f TFLOP/s) | bwd "
        "%.3f ms (%.0f TFLOP/s) | fwd+bwd %.3f ms (%.0f TFLOP/s)\n",
        window, B, T, H, D, bf16 ? "bf16" : "fp32", f_ms, ff / (f_ms * 1e-3) / 1e12, b_ms,
        bf / (b_ms * 1e-3) / 1e12, fb_ms, (ff + bf) / (fb_ms * 1e-3) / 1e12);
  }
  return 0;
}

}  // namespace
}  // namespace mesa::kernels::attention::cuda

int main(int argc, char** argv) { return mesa::kernels::attention::cuda::Main(argc, argv); }
