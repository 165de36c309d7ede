// GPU test of the RG-LRU's CUDA kernels (tags gpu/manual): on fresh random inputs, every output and
// gradient against the float64 reference, relative error ||x - ref|| / ||ref|| per tensor: float32
// I/O through the host seam (outputs poisoned with NaN first), bf16 I/O through the device API;
// restarts at document starts and the carried state with the started flag (long rows: many tiles
// and groups of the chained scan; odd widths: one channel per thread); determinism of h, du, dp.
// Every case runs on both scans (the streaming and the chained), whichever kAuto would pick.
// Then a timing table (fwd, bwd) per scan at B8 T2048, B4 T8192 and B1 T32768 (D960, bf16),
// against the bytes that must move.
#include "kernels/rglru/cuda/rglru_cuda.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/cuda/cuda_host_util.h"
#include "kernels/rglru/cuda/rglru_kernels.h"
#include "kernels/rglru/reference.h"
#include "kernels/rglru/rglru_op.h"

namespace mesa::kernels::rglru::cuda {
namespace {

struct Problem {
  RgLruDims dims;
  std::vector<float> u, rho, iota, p, h0, dh, dh_final;
  std::vector<uint8_t> started, reset;
  RgLruInputs Inputs() const { return {dims, u, rho, iota, p, h0, started, reset}; }
};

Problem MakeProblem(int64_t b, int64_t t, int64_t d, bool state, bool resets, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.f, 1.f);
  std::uniform_real_distribution<double> a2(0.81, 0.998);
  Problem p;
  p.dims = {b, t, d};
  for (auto* v : {&p.u, &p.rho, &p.iota, &p.dh}) {
    v->resize(b * t * d);
    for (float& x : *v) x = n(rng);
  }
  p.p.resize(d);
  for (float& x : p.p) x = static_cast<float>(std::log(1.0 / std::sqrt(a2(rng)) - 1.0));
  p.dh_final.resize(b * d);
  for (float& x : p.dh_final) x = n(rng);
  if (state) {
    p.h0.resize(b * d);
    for (float& x : p.h0) x = n(rng);
    for (int64_t r = 0; r < b; ++r) p.started.push_back(r % 2);
  }
  if (resets) {
    std::bernoulli_distribution coin(0.02);
    p.reset.resize(b * t);
    for (uint8_t& r : p.reset) r = coin(rng);
  }
  return p;
}

double RelErr(const std::vector<float>& x, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i])) return INFINITY;
    num += (x[i] - ref[i]) * (x[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

RgLruProblem64 To64(const Problem& p) {
  RgLruProblem64 q;
  q.dims = p.dims;
  q.u.assign(p.u.begin(), p.u.end());
  q.rho.assign(p.rho.begin(), p.rho.end());
  q.iota.assign(p.iota.begin(), p.iota.end());
  q.p.assign(p.p.begin(), p.p.end());
  q.h0.assign(p.h0.begin(), p.h0.end());
  q.started = p.started;
  q.reset = p.reset;
  return q;
}

constexpr RgLruScan kScans[] = {RgLruScan::kStreaming, RgLruScan::kChained};
const char* ScanName(RgLruScan scan) {
  switch (scan) {
    case RgLruScan::kAuto:
      return "auto";
    case RgLruScan::kStreaming:
      return "streaming";
    case RgLruScan::kChained:
      return "chained";
  }
  return "?";
}

// The training shape fills the GPU with rows (streaming); one long row does not (chained).
TEST(RgLruCuda, AutoPicksTheScanThatFillsTheGpu) {
  EXPECT_EQ(ScanFor({.batch = 8, .seq_len = 2048, .width = 960}), RgLruScan::kStreaming);
  EXPECT_EQ(ScanFor({.batch = 1, .seq_len = 32768, .width = 960}), RgLruScan::kChained);
  EXPECT_EQ(ScanFor({.batch = 8, .seq_len = 2048, .width = 960, .scan = RgLruScan::kChained}),
            RgLruScan::kChained);
}

TEST(RgLruCuda, Float32MatchesTheFloat64Reference) {
  for (const auto& [b, t, d, state, resets] :
       {std::tuple{2, 1, 96, false, false}, std::tuple{2, 31, 200, true, false},
        std::tuple{3, 33, 130, true, true}, std::tuple{2, 777, 960, true, true},
        std::tuple{1, 4096, 64, false, true}, std::tuple{2, 200, 33, true, true},
        // many groups of tiles and a partial last tile: the group maps of the chained scan
        std::tuple{1, 20000, 64, true, true}, std::tuple{3, 2112, 98, true, false}}) {
    for (const RgLruScan scan : kScans) {
      SCOPED_TRACE(::testing::Message()
                   << "B=" << b << " T=" << t << " D=" << d << " " << ScanName(scan));
      const Problem p = MakeProblem(b, t, d, state, resets, 100 + t);
      const RgLruForward64 want = ReferenceForward64(To64(p));
      const RgLruGradients64 want_g =
          ReferenceBackward64(To64(p), std::vector<double>(p.dh.begin(), p.dh.end()),
                              std::vector<double>(p.dh_final.begin(), p.dh_final.end()));
      std::vector<float> h(p.u.size(), NAN), h_final(b * d, NAN);
      RgLruForwardOutputs out{h, h_final};
      ASSERT_TRUE(CudaForwardOnScan(p.Inputs(), scan, &out).ok());
      EXPECT_LT(RelErr(h, want.h), 1e-5);
      EXPECT_LT(RelErr(h_final, want.h_final), 1e-5);
      std::vector<float> du(h.size(), NAN), drho(h.size(), NAN), diota(h.size(), NAN), dp(d, NAN),
          dh0(b * d, NAN);
      RgLruGradients g{du, drho, diota, dp, dh0};
      ASSERT_TRUE(CudaBackwardOnScan(p.Inputs(), scan, {p.dh, p.dh_final}, &g).ok());
      EXPECT_LT(RelErr(du, want_g.du), 1e-5);
      EXPECT_LT(RelErr(drho, want_g.drho), 1e-5);
      EXPECT_LT(RelErr(diota, want_g.diota), 1e-5);
      EXPECT_LT(RelErr(dp, want_g.dp), 1e-4);
      EXPECT_LT(RelErr(dh0, want_g.dh0), 1e-5);
      // Deterministic: the same h, du and dp bit for bit.
      std::vector<float> h2(h.size(), NAN), h_final2(b * d, NAN);
      RgLruForwardOutputs out2{h2, h_final2};
      ASSERT_TRUE(CudaForwardOnScan(p.Inputs(), scan, &out2).ok());
      EXPECT_EQ(h, h2);
      std::vector<float> dp2(d, NAN), du2(h.size());
      RgLruGradients g2{du2, drho, diota, dp2, dh0};
      ASSERT_TRUE(CudaBackwardOnScan(p.Inputs(), scan, {p.dh, p.dh_final}, &g2).ok());
      EXPECT_EQ(du, du2);
      EXPECT_EQ(dp, dp2);
    }
  }
}

// The operator's registered CUDA path (impl = kCuda) runs the kernels too.
TEST(RgLruCuda, OperatorDispatchesToTheKernels) {
  const Problem p = MakeProblem(2, 100, 64, true, true, 5);
  const RgLruForward64 want = ReferenceForward64(To64(p));
  std::vector<float> h(p.u.size(), NAN), h_final(2 * 64, NAN);
  RgLruForwardOutputs out{h, h_final};
  ASSERT_TRUE(RgLruForward(p.Inputs(), {.impl = RgLruImpl::kCuda}, &out).ok());
  EXPECT_LT(RelErr(h, want.h), 1e-5);
}

// bf16 activations through the device API (what the model runs), against the float64 reference
// of the bf16-rounded inputs.
TEST(RgLruCuda, Bf16DeviceApiMatchesTheReference) {
  const int64_t b = 4, t = 300, d = 960;
  Problem p = MakeProblem(b, t, d, false, true, 7);
  auto round = [](std::vector<float>& v) {
    for (float& x : v) x = __bfloat162float(__float2bfloat16(x));
  };
  for (auto* v : {&p.u, &p.rho, &p.iota, &p.dh}) round(*v);
  const RgLruForward64 want = ReferenceForward64(To64(p));
  const RgLruGradients64 want_g =
      ReferenceBackward64(To64(p), std::vector<double>(p.dh.begin(), p.dh.end()), {});
  void* u = mesa::kernels::cuda::NewDeviceCopy(p.u, true);
  void* rho = mesa::kernels::cuda::NewDeviceCopy(p.rho, true);
  void* iota = mesa::kernels::cuda::NewDeviceCopy(p.iota, true);
  void* dh = mesa::kernels::cuda::NewDeviceCopy(p.dh, true);
  float* dp_dev =
      static_cast<float*>(mesa::kernels::cuda::NewDeviceCopy(std::vector<float>(d, 0.f), false));
  float* decay = static_cast<float*>(mesa::kernels::cuda::NewDeviceCopy(p.p, false));
  std::vector<int32_t> doc(b * t);
  for (int64_t r = 0; r < b * t; ++r) doc[r] = p.reset[r] ? static_cast<int32_t>(r % t) : -1;
  int32_t* doc_dev = nullptr;
  CHECK_CUDA(cudaMalloc(&doc_dev, doc.size() * 4));
  CHECK_CUDA(cudaMemcpy(doc_dev, doc.data(), doc.size() * 4, cudaMemcpyHostToDevice));
  DeviceProblem dp{.batch = b,
                   .seq_len = t,
                   .width = d,
                   .bf16 = true,
                   .u = u,
                   .rho = rho,
                   .iota = iota,
                   .p = decay,
                   .doc_start = doc_dev};
  void *h = nullptr, *du = nullptr, *drho = nullptr, *diota = nullptr;
  for (void** x : {&h, &du, &drho, &diota}) CHECK_CUDA(cudaMalloc(x, b * t * d * 2));
  auto fetch = [&](void* x) {
    std::vector<__nv_bfloat16> raw(b * t * d);
    CHECK_CUDA(cudaMemcpy(raw.data(), x, raw.size() * 2, cudaMemcpyDeviceToHost));
    std::vector<float> out(raw.size());
    for (size_t i = 0; i < raw.size(); ++i) out[i] = __bfloat162float(raw[i]);
    return out;
  };
  for (const RgLruScan scan : kScans) {
    SCOPED_TRACE(ScanName(scan));
    dp.scan = scan;
    void *ws = nullptr, *partials = nullptr;
    CHECK_CUDA(cudaMalloc(&ws, WorkspaceBytes(dp)));
    CHECK_CUDA(cudaMalloc(&partials, DpPartialBytes(dp)));
    CHECK_CUDA(cudaMemset(dp_dev, 0, d * 4));
    ASSERT_EQ(RgLruForwardDevice(dp, h, nullptr, nullptr, ws, nullptr), 0);
    ASSERT_EQ(RgLruBackwardDevice(dp, dh, nullptr, du, drho, diota, dp_dev, nullptr, ws, true,
                                  static_cast<float*>(partials), nullptr),
              0);
    CHECK_CUDA(cudaDeviceSynchronize());
    std::vector<float> dp_host(d);
    CHECK_CUDA(cudaMemcpy(dp_host.data(), dp_dev, d * 4, cudaMemcpyDeviceToHost));
    EXPECT_LT(RelErr(fetch(h), want.h), 1e-2);
    EXPECT_LT(RelErr(fetch(du), want_g.du), 1e-2);
    EXPECT_LT(RelErr(fetch(drho), want_g.drho), 1e-2);
    EXPECT_LT(RelErr(fetch(diota), want_g.diota), 1e-2);
    EXPECT_LT(RelErr(dp_host, want_g.dp), 1e-3);
    cudaFree(ws);
    cudaFree(partials);
  }
  for (void* x : {u, rho, iota, dh, h, du, drho, diota}) cudaFree(x);
  cudaFree(dp_dev);
  cudaFree(decay);
  cudaFree(doc_dev);
}

// Timing (median of 50, CUDA events), bf16 I/O: fwd and bwd against the floor of the bytes that
// must move (fwd: read u, ρ, ι, write h; bwd: read u, ρ, ι, dh, write du, dρ, dι; 2 bytes each)
// at the H200's 4.8 TB/s. Printed as RGLRU_BENCH lines; not a pass/fail criterion.
TEST(RgLruCuda, Timing) {
  for (const auto& [b, t] : {std::pair{8, 2048}, std::pair{4, 8192}, std::pair{1, 32768}}) {
    for (const RgLruScan scan : {RgLruScan::kAuto, RgLruScan::kStreaming, RgLruScan::kChained}) {
      const int64_t d = 960, n = int64_t{b} * t * d;
      std::vector<float> host(n);
      std::mt19937 rng(3);
      std::normal_distribution<float> g(0.f, 1.f);
      for (float& x : host) x = g(rng);
      void* u = mesa::kernels::cuda::NewDeviceCopy(host, true);
      void* rho = mesa::kernels::cuda::NewDeviceCopy(host, true);
      void* iota = mesa::kernels::cuda::NewDeviceCopy(host, true);
      void* dh = mesa::kernels::cuda::NewDeviceCopy(host, true);
      std::vector<float> pp(d, -2.f);
      float* decay = static_cast<float*>(mesa::kernels::cuda::NewDeviceCopy(pp, false));
      float* dp_dev = static_cast<float*>(mesa::kernels::cuda::NewDeviceCopy(pp, false));
      DeviceProblem dp{.batch = b,
                       .seq_len = t,
                       .width = d,
                       .bf16 = true,
                       .u = u,
                       .rho = rho,
                       .iota = iota,
                       .p = decay,
                       .scan = scan};
      void *h = nullptr, *du = nullptr, *drho = nullptr, *diota = nullptr, *ws = nullptr,
           *partials = nullptr;
      for (void** x : {&h, &du, &drho, &diota}) CHECK_CUDA(cudaMalloc(x, n * 2));
      CHECK_CUDA(cudaMalloc(&ws, WorkspaceBytes(dp)));
      CHECK_CUDA(cudaMalloc(&partials, DpPartialBytes(dp)));
      cudaEvent_t e0, e1;
      cudaEventCreate(&e0);
      cudaEventCreate(&e1);
      auto median = [&](auto&& run) {
        for (int i = 0; i < 5; ++i) run();
        std::vector<float> ms;
        for (int i = 0; i < 50; ++i) {
          cudaEventRecord(e0);
          run();
          cudaEventRecord(e1);
          cudaEventSynchronize(e1);
          float m = 0;
          cudaEventElapsedTime(&m, e0, e1);
          ms.push_back(m);
        }
        std::sort(ms.begin(), ms.end());
        return ms[ms.size() / 2];
      };
      const float fwd = median([&] { RgLruForwardDevice(dp, h, nullptr, nullptr, ws, nullptr); });
      const float bwd = median([&] {
        RgLruBackwardDevice(dp, dh, nullptr, du, drho, diota, dp_dev, nullptr, ws, true,
                            static_cast<float*>(partials), nullptr);
      });
      CHECK_CUDA(cudaGetLastError());
      const double floor_fwd = 4.0 * n * 2 / 4.8e12 * 1e3, floor_bwd = 7.0 * n * 2 / 4.8e12 * 1e3;
      std::printf(
          "RGLRU_BENCH %s (runs %s) B=%d T=%d D=%lld fwd %.3f ms (floor %.3f, %.2fx) bwd %.3f ms "
          "(floor %.3f, "
          "%.2fx) fwd+bwd %.3f ms (floor %.3f, %.2fx) per token %.2f ns\n",
          ScanName(scan), ScanName(ScanFor(dp)), b, t, static_cast<long long>(d), fwd, floor_fwd,
          fwd / floor_fwd, bwd, floor_bwd, bwd / floor_bwd, fwd + bwd, floor_fwd + floor_bwd,
          (fwd + bwd) / (floor_fwd + floor_bwd), (fwd + bwd) * 1e6 / (double(b) * t));
      for (void* x : {u, rho, iota, dh, h, du, drho, diota, ws, partials}) cudaFree(x);
      cudaFree(decay);
      cudaFree(dp_dev);
    }
  }
}

}  // namespace
}  // namespace mesa::kernels::rglru::cuda
