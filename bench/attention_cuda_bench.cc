// Benchmark (tags gpu, benchmark, manual): times the fused CUDA attention operator (forward,
// backward, forward + backward) with CUDA events (warm-up, median of many repetitions) on random
// N(0, 1) bf16 inputs. Prints RESULT lines with ms and TFLOP/s of the visible (query, key) pairs
// (kernels/attention/README.md counts the FLOPs).
// Usage: attention_cuda_bench [--reps N] [--B 8 --T 2048 --H 16 --D 128] [--window W]... [--fp32]
//          [--engine own|cudnn|auto]... [--deterministic]
//   (windows default to 0 = global causal and 1024; engines to our kernels and cuDNN's, each timed
//   in the same process; an engine that cannot run the problem prints why and is skipped;
//   --deterministic times each engine also with training.deterministic's ordered dQ sums)
//        attention_cuda_bench --decode [--H 6 --D 128] [--reps N]: single-query decoding at B 1 and
//   64 against 1k, 8k and 32k cached tokens, in GB/s of K and V read and against the floor (those
//   bytes at the bandwidth of a large device-to-device copy, measured first). Several cache copies
//   are decoded in turn (at least 256 MB, as the layers of a model are) so that L2 holds none.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention/cuda/attention_cuda.h"
#include "kernels/common/cuda/cuda_host_util.h"

namespace mesa::kernels::attention::cuda {
namespace {

using ::mesa::kernels::cuda::BackToBackMs;
using ::mesa::kernels::cuda::MedianMs;
using ::mesa::kernels::cuda::NewDeviceCopy;

// Bandwidth (GB/s, bytes read + written) of a 1 GiB device-to-device copy.
double CopyGBs() {
  const size_t bytes = size_t{1} << 30;
  void *a = nullptr, *b = nullptr;
  CHECK_CUDA(cudaMalloc(&a, bytes));
  CHECK_CUDA(cudaMalloc(&b, bytes));
  const double ms = MedianMs(
      [&] { CHECK_CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, nullptr)); }, 10);
  CHECK_CUDA(cudaFree(a));
  CHECK_CUDA(cudaFree(b));
  return 2.0 * bytes / (ms * 1e-3) / 1e9;
}

int DecodeBench(int64_t H, int64_t D, bool bf16, int reps) {
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  const double copy_gbs = CopyGBs();
  std::printf("device %s, %d SMs; device-to-device copy %.0f GB/s\n", prop.name,
              prop.multiProcessorCount, copy_gbs);
  const size_t elem = bf16 ? 2 : 4;
  for (const int64_t B : {1, 64}) {
    for (const int64_t C : {1024, 8192, 32768}) {
      const size_t cache_elems = static_cast<size_t>(B * C * H * D);
      const double kv_bytes = 2.0 * cache_elems * elem;
      const int copies = static_cast<int>(std::clamp(256e6 / kv_bytes, 1.0, 64.0) + 0.999);
      std::vector<void*> ks, vs;
      for (int i = 0; i < copies; ++i) {
        void *k = nullptr, *v = nullptr;
        CHECK_CUDA(cudaMalloc(&k, cache_elems * elem));
        CHECK_CUDA(cudaMalloc(&v, cache_elems * elem));
        CHECK_CUDA(cudaMemset(k, 0x3c, cache_elems * elem));  // finite values (~0.01)
        CHECK_CUDA(cudaMemset(v, 0x3c, cache_elems * elem));
        ks.push_back(k);
        vs.push_back(v);
      }
      std::mt19937 rng(1);
      std::normal_distribution<float> n(0.f, 1.f);
      std::vector<float> qh(B * H * D);
      for (float& x : qh) x = n(rng);
      void* q = NewDeviceCopy(qh, bf16);
      void* o = NewDeviceCopy(qh, bf16);
      const double ms = MedianMs(
                            [&] {
                              for (int i = 0; i < copies; ++i) {
                                const DeviceDecode d{.batch = B,
                                                     .heads = H,
                                                     .head_dim = D,
                                                     .capacity = C,
                                                     .dtype = bf16 ? DType::kBF16 : DType::kF32,
                                                     .q = q,
                                                     .k_cache = ks[i],
                                                     .v_cache = vs[i],
                                                     .o = o};
                                CHECK_STATUS(DecodeDevice(d, nullptr));
                              }
                            },
                            reps) /
                        copies;
      const double gbs = kv_bytes / (ms * 1e-3) / 1e9;
      std::printf(
          "RESULT decode B%ld C%ld H%ld D%ld %s | %.1f us (%d cache copies in turn) | %.0f GB/s "
          "| floor %.1f us | %.2fx floor\n",
          B, C, H, D, bf16 ? "bf16" : "fp32", ms * 1e3, copies, gbs,
          kv_bytes / (copy_gbs * 1e9) * 1e6, copy_gbs / gbs);
      for (int i = 0; i < copies; ++i) {
        CHECK_CUDA(cudaFree(ks[i]));
        CHECK_CUDA(cudaFree(vs[i]));
      }
      CHECK_CUDA(cudaFree(q));
      CHECK_CUDA(cudaFree(o));
    }
  }
  return 0;
}

int Main(int argc, char** argv) {
  int reps = 30;
  int64_t B = 8, T = 2048, H = 16, D = 128;
  bool bf16 = true, decode = false, h_given = false, with_deterministic = false;
  std::vector<int64_t> windows;
  std::vector<AttnEngine> engines;
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
      h_given = true;
    } else if (a == "--D") {
      D = next();
    } else if (a == "--window") {
      windows.push_back(next());
    } else if (a == "--decode") {
      decode = true;
    } else if (a == "--fp32") {
      bf16 = false;
    } else if (a == "--deterministic") {
      with_deterministic = true;
    } else if (a == "--engine" && i + 1 < argc) {
      const std::string e = argv[++i];
      if (e == "own") {
        engines.push_back(AttnEngine::kOwn);
      } else if (e == "cudnn") {
        engines.push_back(AttnEngine::kCudnn);
      } else if (e == "auto") {
        engines.push_back(AttnEngine::kAuto);
      } else {
        std::fprintf(stderr, "--engine: own, cudnn or auto, got %s\n", e.c_str());
        return 2;
      }
    } else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  if (decode) return DecodeBench(h_given ? H : 6, D, bf16, reps);
  if (windows.empty()) windows = {0, 1024};
  if (engines.empty()) engines = {AttnEngine::kOwn, AttnEngine::kCudnn};
  // training.deterministic off, and on when asked for.
  const std::vector<bool> modes =
      with_deterministic ? std::vector<bool>{false, true} : std::vector<bool>{false};
  const AttnDims dims{B, T, H, D};
  std::mt19937 rng(1);
  std::normal_distribution<float> n(0.f, 1.f);
  auto random = [&] {
    std::vector<float> x(dims.TokenElems());
    for (float& e : x) e = n(rng);
    return x;
  };
  const DeviceInputs in{NewDeviceCopy(random(), bf16), NewDeviceCopy(random(), bf16),
                        NewDeviceCopy(random(), bf16)};
  void* d_o = NewDeviceCopy(random(), bf16);
  const std::vector<float> zeros(dims.TokenElems(), 0.f);
  void* o = NewDeviceCopy(zeros, bf16);
  void* dq = NewDeviceCopy(zeros, bf16);
  void* dk = NewDeviceCopy(zeros, bf16);
  void* dv = NewDeviceCopy(zeros, bf16);
  float* lse = static_cast<float*>(NewDeviceCopy(std::vector<float>(dims.RowElems(), 0.f), false));
  Workspace ws;
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  for (const AttnEngine engine : engines) {
    const char* engine_name = engine == AttnEngine::kOwn     ? "own"
                              : engine == AttnEngine::kCudnn ? "cudnn"
                                                             : "auto";
    for (const int64_t window : windows) {
      for (const bool deterministic : modes) {
        const DeviceProblem p{.dims = dims,
                              .window = window,
                              .dtype = bf16 ? DType::kBF16 : DType::kF32,
                              .engine = engine,
                              .deterministic = deterministic};
        CHECK_STATUS(CheckDeviceProblem(p));
        // The first calls build cuDNN's plans (and say so when it cannot run the problem).
        if (absl::Status s = ForwardDevice(p, in, o, lse, nullptr); !s.ok()) {
          std::printf("SKIP attention engine %s window %ld: %s\n", engine_name, window,
                      s.ToString().c_str());
          continue;
        }
        if (absl::Status s = BackwardDevice(p, in, o, lse, d_o, dq, dk, dv, &ws, nullptr);
            !s.ok()) {
          std::printf("SKIP attention engine %s window %ld backward: %s\n", engine_name, window,
                      s.ToString().c_str());
          continue;
        }
        auto fwd = [&] { CHECK_STATUS(ForwardDevice(p, in, o, lse, nullptr)); };
        auto bwd = [&] {
          CHECK_STATUS(BackwardDevice(p, in, o, lse, d_o, dq, dk, dv, &ws, nullptr));
        };
        auto step = [&] {
          fwd();
          bwd();
        };
        const double f_ms = MedianMs(fwd, reps);
        const double b_ms = MedianMs(bwd, reps);
        const double fb_ms = MedianMs(step, reps);
        const double pipelined_ms = BackToBackMs(step, reps);
        const double ff = ForwardFlops(dims, window), bf = BackwardFlops(dims, window);
        std::printf(
            "RESULT attention %s%s window %ld B%ld T%ld H%ld D%ld %s | fwd %.3f ms (%.0f TFLOP/s) "
            "| "
            "bwd %.3f ms (%.0f TFLOP/s) | fwd+bwd %.3f ms (%.0f TFLOP/s) | back-to-back fwd+bwd "
            "%.3f ms\n",
            engine_name, deterministic ? " deterministic" : "", window, B, T, H, D,
            bf16 ? "bf16" : "fp32", f_ms, ff / (f_ms * 1e-3) / 1e12, b_ms,
            bf / (b_ms * 1e-3) / 1e12, fb_ms, (ff + bf) / (fb_ms * 1e-3) / 1e12, pipelined_ms);
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace mesa::kernels::attention::cuda

int main(int argc, char** argv) { return mesa::kernels::attention::cuda::Main(argc, argv); }
