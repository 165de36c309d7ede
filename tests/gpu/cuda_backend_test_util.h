// Shared by the CUDA backend GPU tests (cuda_backend_test.cc, cuda_operators_test.cc,
// cuda_model_test.cc; one binary): seeds, bf16 rounding, errors and OPCHECK lines, tolerances, and
// the CudaVsCpu fixture (a CUDA and a CPU backend, uploads, poisoned outputs, readbacks).
#ifndef MESANET_TESTS_GPU_CUDA_BACKEND_TEST_UTIL_H_
#define MESANET_TESTS_GPU_CUDA_BACKEND_TEST_UTIL_H_

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "model/backend/cpu_backend.h"
#include "model/backend/cuda/cuda_backend.h"

namespace mesa::model::cuda_test {

using Vec = std::vector<float>;

// A new seed per use, printed by every test. MESA_TEST_SEED=<printed seed> with a --gtest_filter
// naming the one test that printed it replays that test exactly.
inline uint32_t FreshSeed() {
  static const uint32_t base = [] {
    if (const char* env = std::getenv("MESA_TEST_SEED"); env != nullptr && *env != '\0') {
      return static_cast<uint32_t>(std::strtoul(env, nullptr, 10));
    }
    return static_cast<uint32_t>(std::random_device{}());
  }();
  static uint32_t counter = 0;
  return base + 7919 * counter++;
}

// float -> bf16 (round to nearest, ties to even) -> float: the host twin of __float2bfloat16_rn.
// NaN stays NaN; finite values past the largest bf16 become infinities, as on the GPU.
inline float RoundBf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u) return x;
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  std::memcpy(&x, &u, sizeof(x));
  return x;
}

// A host buffer as CpuBackend activations (float32 on the CPU).
inline Act HostAct(const Vec& v) { return CpuBackend::AsAct(v.data()); }

inline double RelErr(const Vec& gpu, const Vec& cpu) {
  if (gpu.size() != cpu.size()) return NAN;
  double num = 0, den = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    const double d = static_cast<double>(gpu[i]) - cpu[i];
    if (!std::isfinite(gpu[i])) return NAN;
    num += d * d;
    den += static_cast<double>(cpu[i]) * cpu[i];
  }
  if (den == 0) return std::sqrt(num);  // all-zero reference: absolute error
  return std::sqrt(num / den);
}

inline void Expect(const std::string& name, const char* tensor, double err, double tol) {
  const bool ok = err <= tol;  // NaN fails
  std::printf("OPCHECK %-40s %-14s %.3e %.1e %s\n", name.c_str(), tensor, err, tol,
              ok ? "ok" : "FAIL");
  std::fflush(stdout);
  EXPECT_TRUE(ok) << name << " " << tensor << " rel err " << err << " > " << tol;
}

inline constexpr double kExact = 2e-5;  // fp32 vs fp32 (different summation orders)
// bf16 activations, identical inputs on both sides. bf16 keeps 8 significant bits: rounding an
// output costs at most 2^-9 = 2e-3 relative per element (1.7e-3 rms over these tensors on an
// H200; up to 2.4e-3 where cuBLASLt reduces split-K partials in bf16).
inline constexpr double kBf16Out = 1e-2;   // outputs stored as bf16 activations
inline constexpr double kBf16Gemm = 1e-2;  // bf16 x bf16 GEMMs, fp32 accumulation, bf16 output
// float32 outputs (rstd, gates, parameter gradients, losses) from the same bf16 inputs: only the
// summation order differs (<= 1e-6 measured), so a stray bf16 rounding (~1.7e-3) fails too.
inline constexpr double kBf16F32Out = 1e-4;
inline constexpr double kBf16Mesa = 3e-2;  // the CUDA Mesa op (fp16 states) on bf16 q, k, v, d_o

inline double GemmTol(GemmMath math) {
  switch (math) {
    case GemmMath::kTf32:
      return 2e-3;
    case GemmMath::kBf16:
      return 1.5e-2;
    case GemmMath::kFp32:
      return 1e-5;
  }
  return 0;
}

class CudaVsCpu : public ::testing::TestWithParam<ActivationType> {
 protected:
  void SetUp() override {
    CudaBackendOptions options;
    options.activations = GetParam();
    auto gpu = CreateCudaBackend(options);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    gpu_ = std::move(*gpu);
    ASSERT_EQ(gpu_->activation_type(), GetParam());
    ctl_ = GetCudaControl(gpu_.get());
    ASSERT_NE(ctl_, nullptr);
    CpuBackendOptions cpu_options;
    cpu_options.num_threads = 8;
    cpu_ = std::make_unique<CpuBackend>(cpu_options);
    seed_ = FreshSeed();
    rng_.seed(seed_);
    std::printf("seed %u activations %s\n", seed_, ActivationTypeName(GetParam()));
  }
  void TearDown() override {
    if (gpu_ == nullptr) return;
    for (void* p : owned_) gpu_->Free(p);
    if (ctl_ != nullptr) {
      EXPECT_TRUE(ctl_->Synchronize().ok()) << ctl_->status();
    }
  }

  bool bf16() const { return GetParam() == ActivationType::kBfloat16; }
  // The OPCHECK case name: "<fp32|bf16>/<what>".
  std::string Case(const std::string& what) const {
    return std::string(ActivationTypeName(GetParam())) + "/" + what;
  }
  // The tolerance of a check: `fp32` with float32 activations, `bf16_tol` with bf16 ones.
  double Tol(double fp32, double bf16_tol) const { return bf16() ? bf16_tol : fp32; }

  Vec Random(int64_t n, float scale = 1.f) {
    std::normal_distribution<float> dist(0.f, scale);
    Vec v(n);
    for (float& x : v) x = dist(rng_);
    return v;
  }
  Vec Uniform(int64_t n, float lo, float hi) {
    std::uniform_real_distribution<float> dist(lo, hi);
    Vec v(n);
    for (float& x : v) x = dist(rng_);
    return v;
  }
  // `v` as the activation type holds it: rounded to bf16, or unchanged with float32 activations.
  Vec Representable(Vec v) const {
    if (bf16()) {
      for (float& x : v) x = RoundBf16(x);
    }
    return v;
  }
  Vec RandomAct(int64_t n, float scale = 1.f) { return Representable(Random(n, scale)); }

  // A device copy of host floats.
  float* Up(const Vec& v) {
    float* d = gpu_->AllocateFloats(static_cast<int64_t>(v.size()));
    owned_.push_back(d);
    gpu_->CopyToDevice(d, v.data(), sizeof(float) * v.size());
    return d;
  }
  int32_t* UpInts(const std::vector<int32_t>& v) {
    int32_t* d = gpu_->AllocateInts(static_cast<int64_t>(v.size()));
    owned_.push_back(d);
    gpu_->CopyToDevice(d, v.data(), sizeof(int32_t) * v.size());
    return d;
  }
  // A device float output poisoned with NaN.
  float* Poisoned(int64_t n) {
    float* d = gpu_->AllocateFloats(n);
    owned_.push_back(d);
    ctl_->Fill(d, n, NAN);
    return d;
  }
  Vec Down(const float* d, int64_t n) {
    Vec v(n);
    gpu_->CopyToHost(v.data(), d, sizeof(float) * n);
    EXPECT_TRUE(ctl_->status().ok()) << ctl_->status();
    return v;
  }
  // Uninitialised (zeroed) device activations.
  Act NewAct(int64_t n) {
    Act a = gpu_->AllocateActivations(n);
    owned_.push_back(a.ptr);
    return a;
  }
  // Device activations holding `v`, which must already be representable (NaN allowed), so the
  // upload is exact and the CPU reference sees the very same values.
  Act UpAct(const Vec& v) {
    const int64_t n = static_cast<int64_t>(v.size());
    if (bf16()) {
      int64_t inexact = 0;
      for (float x : v) inexact += !(std::isnan(x) || RoundBf16(x) == x);
      EXPECT_EQ(inexact, 0) << "test bug: activation input not rounded to bf16";
    }
    Act a = NewAct(n);
    gpu_->ActivationsFromHost(a, v.data(), n);
    return a;
  }
  // A device activation output poisoned with NaN.
  Act PoisonedAct(int64_t n) {
    Act a = NewAct(n);
    ctl_->FillActivations(a, n, NAN);
    return a;
  }
  Vec DownAct(Act a, int64_t n) {
    Vec v(n);
    gpu_->ActivationsToHost(v.data(), a, n);
    EXPECT_TRUE(ctl_->status().ok()) << ctl_->status();
    return v;
  }

  std::unique_ptr<Backend> gpu_;
  CudaBackendControl* ctl_ = nullptr;
  std::unique_ptr<CpuBackend> cpu_;
  std::vector<void*> owned_;
  uint32_t seed_ = 0;
  std::mt19937 rng_;
};

// Rows of d elements scaled to unit norm (the model's q and k).
inline Vec L2NormalizedRows(Vec v, int64_t d) {
  for (size_t i = 0; i < v.size(); i += d) {
    double s = 0;
    for (int64_t j = 0; j < d; ++j) s += v[i + j] * v[i + j];
    for (int64_t j = 0; j < d; ++j) v[i + j] /= std::sqrt(s);
  }
  return v;
}

}  // namespace mesa::model::cuda_test

#endif  // MESANET_TESTS_GPU_CUDA_BACKEND_TEST_UTIL_H_
