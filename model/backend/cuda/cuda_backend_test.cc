// GPU test: every Backend op of CudaBackend against CpuBackend on fresh random inputs, once with
// float32 activations (every GEMM math mode) and once with bf16 activations; then the whole MesaNet
// (logits, loss, per-position losses, every gradient tensor) on identical weights and batch, with
// float32 and with bf16 activations, and a short bf16 training run whose loss must drop.
//
// Outputs are poisoned with NaN before overwrite ops (an unwritten element fails); accumulate ops
// start from the same random, nonzero contents on both sides. With bf16 activations every
// activation input (and every Linear weight) is generated on the host and rounded to bf16 (round to
// nearest even) before either backend sees it, so the CPU reference runs on exactly the GPU's
// inputs: the only differences left are the GPU's rounding of bf16 outputs and its fp32 summation
// order. Errors are ||gpu - cpu|| / ||cpu|| over the tensor; NaN never passes. Each check prints
// one "OPCHECK <case> <tensor> <err> <tol> ok|FAIL" line that scripts/gpu/run_device.sh
// tabulates; op cases start with the activation type ("fp32/..." or "bf16/...").
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
#include "model/net/mesanet.h"

namespace mesa::model {
namespace {

using Vec = std::vector<float>;

// A new seed per use, printed by every test. MESA_TEST_SEED=<printed seed> with a --gtest_filter
// naming the one test that printed it replays that test exactly.
uint32_t FreshSeed() {
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
float RoundBf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u) return x;
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  std::memcpy(&x, &u, sizeof(x));
  return x;
}

// A host buffer as CpuBackend activations (float32 on the CPU).
Act HostAct(const Vec& v) { return CpuBackend::AsAct(v.data()); }

double RelErr(const Vec& gpu, const Vec& cpu) {
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

void Expect(const std::string& name, const char* tensor, double err, double tol) {
  const bool ok = err <= tol;  // NaN fails
  std::printf("OPCHECK %-40s %-14s %.3e %.1e %s\n", name.c_str(), tensor, err, tol,
              ok ? "ok" : "FAIL");
  std::fflush(stdout);
  EXPECT_TRUE(ok) << name << " " << tensor << " rel err " << err << " > " << tol;
}

constexpr double kExact = 2e-5;  // fp32 vs fp32 (different summation orders)
// bf16 activations, identical inputs on both sides. bf16 keeps 8 significant bits: rounding an
// output costs at most 2^-9 = 2e-3 relative per element (1.7e-3 rms over these tensors on an
// H200; up to 2.4e-3 where cuBLASLt reduces split-K partials in bf16).
constexpr double kBf16Out = 1e-2;   // outputs stored as bf16 activations
constexpr double kBf16Gemm = 1e-2;  // bf16 x bf16 GEMMs, fp32 accumulation, bf16 output
// float32 outputs (rstd, gates, parameter gradients, losses) from the same bf16 inputs: only the
// summation order differs (<= 1e-6 measured), so a stray bf16 rounding (~1.7e-3) fails too.
constexpr double kBf16F32Out = 1e-4;
constexpr double kBf16Mesa = 3e-2;  // the CUDA Mesa op (fp16 states) on bf16 q, k, v, d_o

double GemmTol(GemmMath math) {
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

INSTANTIATE_TEST_SUITE_P(Activations, CudaVsCpu,
                         ::testing::Values(ActivationType::kFloat32, ActivationType::kBfloat16),
                         [](const ::testing::TestParamInfo<ActivationType>& info) {
                           return std::string(ActivationTypeName(info.param));
                         });

// Conversions and the activation buffer calls (FillActivations, ZeroActivations, CopyActivations,
// ActAt), all exact.
TEST_P(CudaVsCpu, ActivationBuffers) {
  // The host rounding itself (hand-computed): ties go to the even neighbour, just above a tie goes
  // up, and a carry moves into the exponent.
  const float one = 1.f, ulp = std::ldexp(1.f, -7);  // bf16 spacing in [1, 2)
  EXPECT_EQ(RoundBf16(one + ulp / 2), one);
  EXPECT_EQ(RoundBf16(one + 3 * ulp / 2), one + 2 * ulp);
  EXPECT_EQ(RoundBf16(-(one + 3 * ulp / 2)), -(one + 2 * ulp));
  EXPECT_EQ(RoundBf16(one + ulp / 2 + std::ldexp(1.f, -20)), one + ulp);
  EXPECT_EQ(RoundBf16(2.f - ulp / 4), 2.f);
  EXPECT_EQ(RoundBf16(one + ulp), one + ulp);

  const int64_t n = 1000003;
  // Unrounded floats over 40 binades, led by the cases above: ActivationsFromHost rounds them
  // exactly as the host does (bf16) or keeps them (fp32); ActivationsToHost widens exactly.
  Vec raw = Random(n);
  std::uniform_real_distribution<float> binade(-20.f, 20.f);
  for (float& x : raw) x *= std::exp2(binade(rng_));
  const Vec special = {one + ulp / 2,
                       one + 3 * ulp / 2,
                       -(one + ulp / 2),
                       -(one + 3 * ulp / 2),
                       one + ulp / 2 + std::ldexp(1.f, -20),
                       2.f - ulp / 4,
                       0.f,
                       -0.f,
                       3.f};
  std::copy(special.begin(), special.end(), raw.begin());
  const Vec want = Representable(raw);
  Act g = NewAct(n);
  gpu_->ActivationsFromHost(g, raw.data(), n);
  Vec got = DownAct(g, n);
  int64_t mismatches = 0;
  for (int64_t i = 0; i < n; ++i) {
    mismatches += std::memcmp(&got[i], &want[i], sizeof(float)) != 0;
  }
  Expect(Case("Activations"), "round_trip", static_cast<double>(mismatches), 0.0);

  // Fill, then zero a window through ActAt, then copy a window at odd offsets.
  ctl_->FillActivations(g, n, 1.5f);
  gpu_->ZeroActivations(gpu_->ActAt(g, 1001), 5003);
  Vec expect_g(n, 1.5f);
  std::fill(expect_g.begin() + 1001, expect_g.begin() + 1001 + 5003, 0.f);
  Expect(Case("FillActivations+Zero"), "out", RelErr(DownAct(g, n), expect_g), 0.0);
  const Vec src = RandomAct(n);
  Act h = UpAct(src);
  gpu_->CopyActivations(gpu_->ActAt(g, 7), gpu_->ActAt(h, 3), 100001);
  std::copy(src.begin() + 3, src.begin() + 3 + 100001, expect_g.begin() + 7);
  Expect(Case("CopyActivations"), "out", RelErr(DownAct(g, n), expect_g), 0.0);
  Expect(Case("CopyActivations"), "source", RelErr(DownAct(h, n), src), 0.0);

  // AddInPlace: the float32 sum, rounded once to bf16.
  const Vec x = RandomAct(n), y = RandomAct(n);
  Vec sum_cpu = x;
  cpu_->AddInPlace(HostAct(sum_cpu), HostAct(y), n);
  Act g_x = UpAct(x);
  gpu_->AddInPlace(g_x, UpAct(y), n);
  Expect(Case("AddInPlace"), "out", RelErr(DownAct(g_x, n), sum_cpu), Tol(kExact, kBf16Out));
}

// One Linear configuration: the GEMM math (float32 activations), or whether the weights come from
// the CacheWeights buffer (bf16 activations; otherwise they are converted per call).
struct LinearVariant {
  std::string tag;
  GemmMath math;
  bool cached;
  double tol;     // activation outputs (out, d_in)
  double dw_tol;  // float32 d_weight
};

TEST_P(CudaVsCpu, Linear) {
  std::vector<LinearVariant> variants;
  if (bf16()) {
    variants = {{"uncached", GemmMath::kTf32, false, kBf16Gemm, kBf16F32Out},
                {"cached", GemmMath::kTf32, true, kBf16Gemm, kBf16F32Out}};
  } else {
    for (GemmMath math : {GemmMath::kTf32, GemmMath::kFp32, GemmMath::kBf16}) {
      variants.push_back({GemmMathName(math), math, false, GemmTol(math), GemmTol(math)});
    }
  }
  for (const LinearVariant& variant : variants) {
    ctl_->SetGemmMath(variant.math);  // no effect on bf16 activations
    const std::string tag = Case("Linear/" + variant.tag);
    // The weights as the GPU gets them: their own buffer, or 64 floats into a larger parameter
    // buffer handed to CacheWeights (like a MesaNet tensor after the first: ParamLayout starts
    // every tensor 64 floats aligned).
    auto gpu_weight = [&](const Vec& w) -> const float* {
      if (!variant.cached) return Up(w);
      constexpr int64_t kOffset = 64;
      Vec params = Representable(Random(static_cast<int64_t>(w.size()) + kOffset + 5, 0.05f));
      std::copy(w.begin(), w.end(), params.begin() + kOffset);
      float* d = Up(params);
      gpu_->CacheWeights(d, static_cast<int64_t>(params.size()));
      return d + kOffset;
    };
    // Odd sizes (not multiples of 4 or 16) to exercise alignment handling.
    // Includes the gates' shape (16384 x 768 x 6 in MesaNet-small) with fewer rows.
    for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{1000, 768, 300},
                           {333, 130, 6},
                           {4099, 768, 6},
                           {517, 2304, 768}}) {
      const std::string name =
          tag + "/" + std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n);
      // Accumulators about as large as what is added to them, so both parts are checked.
      const float dx_scale = 0.05f * std::sqrt(static_cast<float>(n));
      const Vec in = RandomAct(m * k), w = Representable(Random(n * k, 0.05f)),
                acc = RandomAct(m * n);
      const float* g_w = gpu_weight(w);
      const Act g_in = UpAct(in);
      // Overwrite.
      Vec out_cpu(m * n);
      cpu_->LinearForward(HostAct(in), w.data(), HostAct(out_cpu), m, k, n, false);
      const Act d_out = PoisonedAct(m * n);
      gpu_->LinearForward(g_in, g_w, d_out, m, k, n, false);
      Expect(name, "fwd", RelErr(DownAct(d_out, m * n), out_cpu), variant.tol);
      // Accumulate.
      Vec acc_cpu = acc;
      cpu_->LinearForward(HostAct(in), w.data(), HostAct(acc_cpu), m, k, n, true);
      const Act d_acc = UpAct(acc);
      gpu_->LinearForward(g_in, g_w, d_acc, m, k, n, true);
      Expect(name, "fwd_accum", RelErr(DownAct(d_acc, m * n), acc_cpu), variant.tol);
      // Backward accumulates into both.
      const Vec dy = RandomAct(m * n), dx = RandomAct(m * k, dx_scale), dw = Random(n * k);
      Vec dx_cpu = dx, dw_cpu = dw;
      cpu_->LinearBackward(HostAct(in), w.data(), HostAct(dy), HostAct(dx_cpu), dw_cpu.data(), m, k,
                           n);
      const Act g_dy = UpAct(dy), g_dx = UpAct(dx);
      float* g_dw = Up(dw);
      gpu_->LinearBackward(g_in, g_w, g_dy, g_dx, g_dw, m, k, n);
      Expect(name, "d_in", RelErr(DownAct(g_dx, m * k), dx_cpu), variant.tol);
      Expect(name, "d_weight", RelErr(Down(g_dw, n * k), dw_cpu), variant.dw_tol);
      // d_in may be null.
      Vec dw2_cpu = dw;
      cpu_->LinearBackward(HostAct(in), w.data(), HostAct(dy), Act{}, dw2_cpu.data(), m, k, n);
      float* g_dw2 = Up(dw);
      gpu_->LinearBackward(g_in, g_w, g_dy, Act{}, g_dw2, m, k, n);
      Expect(name, "d_weight_only", RelErr(Down(g_dw2, n * k), dw2_cpu), variant.dw_tol);
      // Overwriting d_in ignores what it held (NaN here).
      Vec dx0_cpu(m * k, 0.f), dw3_cpu = dw;
      cpu_->LinearBackward(HostAct(in), w.data(), HostAct(dy), HostAct(dx0_cpu), dw3_cpu.data(), m,
                           k, n);
      const Act g_dx0 = PoisonedAct(m * k);
      float* g_dw3 = Up(dw);
      gpu_->LinearBackward(g_in, g_w, g_dy, g_dx0, g_dw3, m, k, n, /*accumulate_d_in=*/false);
      Expect(name, "d_in_overwrite", RelErr(DownAct(g_dx0, m * k), dx0_cpu), variant.tol);
      Expect(name, "d_weight_overwrite", RelErr(Down(g_dw3, n * k), dw3_cpu), variant.dw_tol);
    }
    // Padded row stride of out / d_out (MesaNet's logits, ld = round_up(n, 64)) against the dense
    // CPU result; the padding columns hold a sentinel that must survive every call.
    for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{1000, 768, 1001},
                           {517, 256, 50257},
                           {1000, 768, 6}}) {
      const int64_t ld = (n + 63) / 64 * 64;
      const std::string name = tag + "/strided/" + std::to_string(m) + "x" + std::to_string(k) +
                               "x" + std::to_string(n) + "ld" + std::to_string(ld);
      const float kPad = 7.25f;  // exact in bf16
      auto strided = [&](const Vec& dense, float pad) {
        Vec s(m * ld, pad);
        for (int64_t r = 0; r < m; ++r) {
          std::copy(dense.begin() + r * n, dense.begin() + (r + 1) * n, s.begin() + r * ld);
        }
        return s;
      };
      // Splits a downloaded strided buffer into its dense part and a count of damaged pads.
      auto dense_of = [&](const Vec& s, int64_t* bad_pads) {
        Vec d(m * n);
        for (int64_t r = 0; r < m; ++r) {
          std::copy(s.begin() + r * ld, s.begin() + r * ld + n, d.begin() + r * n);
          for (int64_t j = n; j < ld; ++j) *bad_pads += s[r * ld + j] != kPad;
        }
        return d;
      };
      const float dx_scale = 0.05f * std::sqrt(static_cast<float>(n));
      const Vec in = RandomAct(m * k), w = Representable(Random(n * k, 0.05f)),
                acc = RandomAct(m * n);
      const float* g_w = gpu_weight(w);
      const Act g_in = UpAct(in);
      int64_t bad = 0;
      Vec out_cpu(m * n);
      cpu_->LinearForward(HostAct(in), w.data(), HostAct(out_cpu), m, k, n, false);
      const Act d_out = UpAct(strided(Vec(m * n, NAN), kPad));
      gpu_->LinearForwardStrided(g_in, g_w, d_out, ld, m, k, n, false);
      Expect(name, "fwd", RelErr(dense_of(DownAct(d_out, m * ld), &bad), out_cpu), variant.tol);
      Vec acc_cpu = acc;
      cpu_->LinearForward(HostAct(in), w.data(), HostAct(acc_cpu), m, k, n, true);
      const Act d_acc = UpAct(strided(acc, kPad));
      gpu_->LinearForwardStrided(g_in, g_w, d_acc, ld, m, k, n, true);
      Expect(name, "fwd_accum", RelErr(dense_of(DownAct(d_acc, m * ld), &bad), acc_cpu),
             variant.tol);
      const Vec dy = RandomAct(m * n), dx = RandomAct(m * k, dx_scale), dw = Random(n * k);
      Vec dx_cpu = dx, dw_cpu = dw;
      cpu_->LinearBackward(HostAct(in), w.data(), HostAct(dy), HostAct(dx_cpu), dw_cpu.data(), m, k,
                           n);
      // NaN in the padding of d_out: reading it would poison d_in / d_weight.
      const Act g_dy = UpAct(strided(dy, NAN)), g_dx = UpAct(dx);
      float* g_dw = Up(dw);
      gpu_->LinearBackwardStrided(g_in, g_w, g_dy, ld, g_dx, g_dw, m, k, n, true);
      Expect(name, "d_in", RelErr(DownAct(g_dx, m * k), dx_cpu), variant.tol);
      Expect(name, "d_weight", RelErr(Down(g_dw, n * k), dw_cpu), variant.dw_tol);
      Expect(name, "pads_untouched", static_cast<double>(bad), 0.0);
    }
  }
}

TEST_P(CudaVsCpu, Bias) {
  const int64_t rows = 4099, n = 6;
  // d_bias starts near the size of the column sums (~64) it accumulates.
  const Vec out = RandomAct(rows * n), bias = Random(n), dy = RandomAct(rows * n),
            db = Random(n, 30.f);
  Vec out_cpu = out, db_cpu = db;
  cpu_->BiasForward(HostAct(out_cpu), bias.data(), rows, n);
  cpu_->BiasBackward(HostAct(dy), db_cpu.data(), rows, n);
  const Act g_out = UpAct(out);
  float* g_db = Up(db);
  gpu_->BiasForward(g_out, Up(bias), rows, n);
  gpu_->BiasBackward(UpAct(dy), g_db, rows, n);
  Expect(Case("Bias"), "fwd", RelErr(DownAct(g_out, rows * n), out_cpu), Tol(kExact, kBf16Out));
  Expect(Case("Bias"), "d_bias", RelErr(Down(g_db, n), db_cpu), Tol(kExact, kBf16F32Out));
}

TEST_P(CudaVsCpu, Embedding) {
  const int64_t n = 3000, c = 96, vocab = 257;
  std::vector<int32_t> tokens(n);
  std::uniform_int_distribution<int32_t> tok(0, vocab - 1);
  for (auto& t : tokens) t = tok(rng_) % 40;  // many repeats: exercises the grouped scatter-add
  tokens[5] = vocab - 1;
  const Vec table = Random(vocab * c), dy = RandomAct(n * c), dtable = Random(vocab * c, 30.f);
  const float scale = std::sqrt(static_cast<float>(c));
  Vec out_cpu(n * c), dtable_cpu = dtable;
  cpu_->EmbeddingForward(tokens.data(), table.data(), HostAct(out_cpu), n, c, scale);
  cpu_->EmbeddingBackward(tokens.data(), HostAct(dy), dtable_cpu.data(), n, c, scale);
  int32_t* g_tok = UpInts(tokens);
  const Act g_out = PoisonedAct(n * c), g_dy = UpAct(dy);
  float* g_dt = Up(dtable);
  gpu_->EmbeddingForward(g_tok, Up(table), g_out, n, c, scale);
  gpu_->EmbeddingBackward(g_tok, g_dy, g_dt, n, c, scale);
  Expect(Case("Embedding"), "fwd", RelErr(DownAct(g_out, n * c), out_cpu), Tol(kExact, kBf16Out));
  const Vec first = Down(g_dt, vocab * c);
  Expect(Case("Embedding"), "d_table", RelErr(first, dtable_cpu), Tol(kExact, kBf16F32Out));
  // Determinism: the same scatter-add again from the same start gives the same bits.
  float* g_dt2 = Up(dtable);
  gpu_->EmbeddingBackward(g_tok, g_dy, g_dt2, n, c, scale);
  EXPECT_EQ(std::memcmp(Down(g_dt2, vocab * c).data(), first.data(), sizeof(float) * vocab * c), 0);
}

TEST_P(CudaVsCpu, RmsNorm) {
  for (auto [rows, c, eps] : {std::tuple<int64_t, int64_t, float>{2051, 768, 1e-6f},
                              {6000, 128, 1e-5f},
                              {37, 1536, 1e-6f}}) {
    const std::string name = Case("RmsNorm/" + std::to_string(rows) + "x" + std::to_string(c));
    const Vec x = RandomAct(rows * c, 2.f), w = Uniform(c, 0.5f, 1.5f), dy = RandomAct(rows * c);
    const Vec dx = RandomAct(rows * c, 0.5f), dw = Random(c, 30.f);
    Vec out_cpu(rows * c), rstd_cpu(rows), dx_cpu = dx, dw_cpu = dw;
    cpu_->RmsNormForward(HostAct(x), w.data(), HostAct(out_cpu), rstd_cpu.data(), rows, c, eps);
    cpu_->RmsNormBackward(HostAct(x), w.data(), rstd_cpu.data(), HostAct(dy), HostAct(dx_cpu),
                          dw_cpu.data(), rows, c);
    const Act g_x = UpAct(x), g_out = PoisonedAct(rows * c);
    float *g_w = Up(w), *g_rstd = Poisoned(rows);
    gpu_->RmsNormForward(g_x, g_w, g_out, g_rstd, rows, c, eps);
    const Act g_dx = UpAct(dx);
    float* g_dw = Up(dw);
    gpu_->RmsNormBackward(g_x, g_w, g_rstd, UpAct(dy), g_dx, g_dw, rows, c);
    Expect(name, "fwd", RelErr(DownAct(g_out, rows * c), out_cpu), Tol(kExact, kBf16Out));
    Expect(name, "rstd", RelErr(Down(g_rstd, rows), rstd_cpu), Tol(kExact, kBf16F32Out));
    Expect(name, "d_x", RelErr(DownAct(g_dx, rows * c), dx_cpu), Tol(kExact, kBf16Out));
    Expect(name, "d_weight", RelErr(Down(g_dw, c), dw_cpu), Tol(kExact, kBf16F32Out));
  }
}

TEST_P(CudaVsCpu, CausalConv) {
  for (auto [b, t, ch, w] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{3, 133, 200, 4},
                             {2, 70, 768, 4},
                             {1, 5, 33, 7}}) {
    const std::string name = Case("CausalConv/" + std::to_string(b) + "x" + std::to_string(t) +
                                  "x" + std::to_string(ch) + "w" + std::to_string(w));
    const int64_t n = b * t * ch;
    const Vec x = RandomAct(n), wt = Random(ch * w, 0.5f), dy = RandomAct(n), dx = RandomAct(n),
              dw = Random(ch * w, 5.f);
    Vec out_cpu(n), dx_cpu = dx, dw_cpu = dw;
    cpu_->CausalConvForward(HostAct(x), wt.data(), HostAct(out_cpu), b, t, ch, w);
    cpu_->CausalConvBackward(HostAct(x), wt.data(), HostAct(dy), HostAct(dx_cpu), dw_cpu.data(), b,
                             t, ch, w);
    const Act g_x = UpAct(x), g_out = PoisonedAct(n), g_dx = UpAct(dx);
    float *g_w = Up(wt), *g_dw = Up(dw);
    gpu_->CausalConvForward(g_x, g_w, g_out, b, t, ch, w);
    gpu_->CausalConvBackward(g_x, g_w, UpAct(dy), g_dx, g_dw, b, t, ch, w);
    Expect(name, "fwd", RelErr(DownAct(g_out, n), out_cpu), Tol(kExact, kBf16Out));
    Expect(name, "d_x", RelErr(DownAct(g_dx, n), dx_cpu), Tol(kExact, kBf16Out));
    Expect(name, "d_weight", RelErr(Down(g_dw, ch * w), dw_cpu), Tol(kExact, kBf16F32Out));
  }
}

TEST_P(CudaVsCpu, SiluL2Norm) {
  for (auto [groups, d] : {std::pair<int64_t, int64_t>{3001, 128}, {100, 48}}) {
    const std::string name = Case("SiluL2Norm/" + std::to_string(groups) + "x" + std::to_string(d));
    // d_x starts at about the size of the gradient added to it (~1/|SiLU(x)| ~ 0.1).
    const Vec x = RandomAct(groups * d, 2.f), dy = RandomAct(groups * d),
              dx = RandomAct(groups * d, 0.1f);
    Vec y_cpu(groups * d), dx_cpu = dx;
    cpu_->SiluL2NormForward(HostAct(x), HostAct(y_cpu), groups, d);
    cpu_->SiluL2NormBackward(HostAct(x), HostAct(dy), HostAct(dx_cpu), groups, d);
    const Act g_x = UpAct(x), g_y = PoisonedAct(groups * d), g_dx = UpAct(dx);
    gpu_->SiluL2NormForward(g_x, g_y, groups, d);
    gpu_->SiluL2NormBackward(g_x, UpAct(dy), g_dx, groups, d);
    Expect(name, "fwd", RelErr(DownAct(g_y, groups * d), y_cpu), Tol(kExact, kBf16Out));
    Expect(name, "d_x", RelErr(DownAct(g_dx, groups * d), dx_cpu), Tol(kExact, kBf16Out));
  }
}

TEST_P(CudaVsCpu, GatesLambdaSwiGlu) {
  const int64_t n = 12345;
  const float cap = 0.0025f;
  const Vec a = RandomAct(n, 3.f), b = RandomAct(n, 3.f), dbeta = Random(n), dlg = Random(n);
  Vec beta_cpu(n), lg_cpu(n), da_cpu(n), db_cpu(n);
  cpu_->GatesForward(HostAct(a), HostAct(b), beta_cpu.data(), lg_cpu.data(), n, cap);
  cpu_->GatesBackward(HostAct(a), HostAct(b), dbeta.data(), dlg.data(), HostAct(da_cpu),
                      HostAct(db_cpu), n, cap);
  const Act g_a = UpAct(a), g_b = UpAct(b), g_da = PoisonedAct(n), g_db = PoisonedAct(n);
  float *g_beta = Poisoned(n), *g_lg = Poisoned(n);
  gpu_->GatesForward(g_a, g_b, g_beta, g_lg, n, cap);
  gpu_->GatesBackward(g_a, g_b, Up(dbeta), Up(dlg), g_da, g_db, n, cap);
  Expect(Case("Gates"), "beta", RelErr(Down(g_beta, n), beta_cpu), Tol(kExact, kBf16F32Out));
  Expect(Case("Gates"), "log_gamma", RelErr(Down(g_lg, n), lg_cpu), Tol(kExact, kBf16F32Out));
  Expect(Case("Gates"), "d_a_pre", RelErr(DownAct(g_da, n), da_cpu), Tol(kExact, kBf16Out));
  Expect(Case("Gates"), "d_b_pre", RelErr(DownAct(g_db, n), db_cpu), Tol(kExact, kBf16Out));

  // Lambda is float32 on every backend.
  const int64_t hd = 768;
  const Vec p = Random(hd, 2.f), dl = Random(hd), dp = Random(hd);
  Vec lam_cpu(hd), dp_cpu = dp;
  cpu_->LambdaForward(p.data(), lam_cpu.data(), hd, 0.25f);
  cpu_->LambdaBackward(p.data(), dl.data(), dp_cpu.data(), hd);
  float *g_p = Up(p), *g_lam = Poisoned(hd), *g_dp = Up(dp);
  gpu_->LambdaForward(g_p, g_lam, hd, 0.25f);
  gpu_->LambdaBackward(g_p, Up(dl), g_dp, hd);
  Expect(Case("Lambda"), "fwd", RelErr(Down(g_lam, hd), lam_cpu), kExact);
  Expect(Case("Lambda"), "d_p", RelErr(Down(g_dp, hd), dp_cpu), kExact);

  const int64_t m = 100003;
  const Vec gate = RandomAct(m, 2.f), up = RandomAct(m), dh = RandomAct(m);
  Vec h_cpu(m), dg_cpu(m), du_cpu(m);
  cpu_->SwiGluForward(HostAct(gate), HostAct(up), HostAct(h_cpu), m);
  cpu_->SwiGluBackward(HostAct(gate), HostAct(up), HostAct(dh), HostAct(dg_cpu), HostAct(du_cpu),
                       m);
  const Act g_gate = UpAct(gate), g_up = UpAct(up), g_h = PoisonedAct(m), g_dg = PoisonedAct(m),
            g_du = PoisonedAct(m);
  gpu_->SwiGluForward(g_gate, g_up, g_h, m);
  gpu_->SwiGluBackward(g_gate, g_up, UpAct(dh), g_dg, g_du, m);
  Expect(Case("SwiGlu"), "fwd", RelErr(DownAct(g_h, m), h_cpu), Tol(kExact, kBf16Out));
  Expect(Case("SwiGlu"), "d_gate", RelErr(DownAct(g_dg, m), dg_cpu), Tol(kExact, kBf16Out));
  Expect(Case("SwiGlu"), "d_up", RelErr(DownAct(g_du, m), du_cpu), Tol(kExact, kBf16Out));
}

// The float32 buffer calls (parameters, gradients, optimiser state): the same on either
// activation type.
TEST_P(CudaVsCpu, CopyScaleSumAdamW) {
  const int64_t n = 1000003;
  const Vec x = Random(n);
  Vec scaled_cpu = x;
  cpu_->Scale(scaled_cpu.data(), n, 0.37f);
  float *g_x = Up(x), *g_copy = Poisoned(n);
  gpu_->Copy(g_copy, g_x, n);
  Expect(Case("Copy"), "out", RelErr(Down(g_copy, n), x), 0.0);
  gpu_->Scale(g_x, n, 0.37f);
  Expect(Case("Scale"), "out", RelErr(Down(g_x, n), scaled_cpu), kExact);
  const double ss_cpu = cpu_->SumOfSquares(scaled_cpu.data(), n);
  const double ss_gpu = gpu_->SumOfSquares(g_x, n);
  Expect(Case("SumOfSquares"), "value", std::abs(ss_gpu - ss_cpu) / ss_cpu, 1e-6);
  EXPECT_EQ(ss_gpu, gpu_->SumOfSquares(g_x, n));  // deterministic
  gpu_->Zero(g_copy, n);
  Expect(Case("Zero"), "out", RelErr(Down(g_copy, n), Vec(n, 0.f)), 0.0);

  const Vec p = Random(n), g = Random(n, 0.1f), m = Random(n, 0.01f), v = Uniform(n, 0.f, 1e-3f);
  Vec p_cpu = p, m_cpu = m, v_cpu = v;
  cpu_->AdamWUpdate(p_cpu.data(), g.data(), m_cpu.data(), v_cpu.data(), n, 1e-3f, 0.9f, 0.98f,
                    1e-8f, 0.1f, 0.19f, 0.0396f);
  float *g_p = Up(p), *g_m = Up(m), *g_v = Up(v);
  gpu_->AdamWUpdate(g_p, Up(g), g_m, g_v, n, 1e-3f, 0.9f, 0.98f, 1e-8f, 0.1f, 0.19f, 0.0396f);
  Expect(Case("AdamW"), "params", RelErr(Down(g_p, n), p_cpu), kExact);
  Expect(Case("AdamW"), "m", RelErr(Down(g_m, n), m_cpu), kExact);
  Expect(Case("AdamW"), "v", RelErr(Down(g_v, n), v_cpu), kExact);
}

TEST_P(CudaVsCpu, SoftcapCrossEntropy) {
  const int64_t rows = 67, v = 50257;
  const int32_t bos = 50256;
  const Vec logits = RandomAct(rows * v, 20.f);  // large enough for the soft-cap to bend
  std::vector<int32_t> targets(rows);
  std::uniform_int_distribution<int32_t> tok(0, v - 1);
  for (auto& t : targets) t = tok(rng_);
  targets[3] = bos;
  targets[10] = bos;
  Vec losses_cpu(rows);
  const double sum_cpu = cpu_->SoftcapCrossEntropyForward(HostAct(logits), targets.data(),
                                                          losses_cpu.data(), rows, v, v, 30.f, bos);
  Vec grad_cpu = logits;
  cpu_->SoftcapCrossEntropyBackward(HostAct(grad_cpu), targets.data(), losses_cpu.data(), rows, v,
                                    v, 30.f, bos, 0.01f);
  int32_t* g_t = UpInts(targets);
  // Dense rows, then MesaNet's padded rows (ld = 50304) with NaN in the padding: reading it would
  // poison the row's loss; writing it is caught below.
  for (int64_t ld : {v, (v + 63) / 64 * 64}) {
    const std::string name = Case("SoftcapCE/ld" + std::to_string(ld));
    Vec strided(rows * ld, NAN);
    for (int64_t r = 0; r < rows; ++r) {
      std::copy(logits.begin() + r * v, logits.begin() + (r + 1) * v, strided.begin() + r * ld);
    }
    const Act g_logits = UpAct(strided);
    float* g_losses = Poisoned(rows);
    const double sum_gpu =
        gpu_->SoftcapCrossEntropyForward(g_logits, g_t, g_losses, rows, v, ld, 30.f, bos);
    Expect(name, "loss_sum", std::abs(sum_gpu - sum_cpu) / std::abs(sum_cpu),
           Tol(1e-5, kBf16F32Out));
    Expect(name, "losses", RelErr(Down(g_losses, rows), losses_cpu), Tol(1e-5, kBf16F32Out));
    // From the GPU forward's losses, as MesaNet calls it.
    gpu_->SoftcapCrossEntropyBackward(g_logits, g_t, g_losses, rows, v, ld, 30.f, bos, 0.01f);
    const Vec got = DownAct(g_logits, rows * ld);
    Vec dense(rows * v);
    int64_t bad_pads = 0;
    for (int64_t r = 0; r < rows; ++r) {
      std::copy(got.begin() + r * ld, got.begin() + r * ld + v, dense.begin() + r * v);
      for (int64_t j = v; j < ld; ++j) bad_pads += !std::isnan(got[r * ld + j]);
    }
    Expect(name, "d_logits", RelErr(dense, grad_cpu), Tol(1e-5, kBf16Out));
    Expect(name, "pads_untouched", static_cast<double>(bad_pads), 0.0);
  }
}

// Rows of d elements scaled to unit norm (the model's q and k).
Vec L2NormalizedRows(Vec v, int64_t d) {
  for (size_t i = 0; i < v.size(); i += d) {
    double s = 0;
    for (int64_t j = 0; j < d; ++j) s += v[i + j] * v[i + j];
    for (int64_t j = 0; j < d; ++j) v[i + j] /= std::sqrt(s);
  }
  return v;
}

TEST_P(CudaVsCpu, MesaOperator) {
  // The kernels/cuda op (fp16 chunk states and CG matvec operands) against the CPU chunked op.
  const int64_t b = 2, t = 256, h = 3, d = 128;
  const int64_t tok = b * t * h * d, gates = b * t * h;
  auto l2rows = [&](Vec v) { return L2NormalizedRows(std::move(v), d); };
  const Vec q = Representable(l2rows(Random(tok))), k = Representable(l2rows(Random(tok))),
            v = RandomAct(tok);
  const Vec lg = Uniform(gates, -0.1f, -0.001f), beta = Uniform(gates, 0.1f, 0.9f),
            lambda = Uniform(h * d, 0.5f, 1.5f), d_o = RandomAct(tok, 1e-3f);
  const kernels::MesaDims dims{b, t, h, d};
  auto acts = [&](Act q_, Act k_, Act v_, const float* lg_, const float* beta_, const float* lam_) {
    return MesaActs{
        .dims = dims, .q = q_, .k = k_, .v = v_, .log_gamma = lg_, .beta = beta_, .lambda = lam_};
  };
  MesaSolve solve;  // 30 fixed steps
  // CPU.
  Vec o_cpu(tok), qs_cpu(tok), dq_cpu(tok), dk_cpu(tok), dv_cpu(tok), dlg_cpu(gates), db_cpu(gates),
      dl_cpu(h * d);
  const MesaActs in_cpu =
      acts(HostAct(q), HostAct(k), HostAct(v), lg.data(), beta.data(), lambda.data());
  auto cpu_fwd = cpu_->MesaForward(in_cpu, solve, HostAct(o_cpu), qs_cpu.data());
  ASSERT_TRUE(cpu_fwd.ok()) << cpu_fwd.status();
  const MesaActGrads gr_cpu{.dq = HostAct(dq_cpu),
                            .dk = HostAct(dk_cpu),
                            .dv = HostAct(dv_cpu),
                            .dlog_gamma = dlg_cpu.data(),
                            .dbeta = db_cpu.data(),
                            .dlambda = dl_cpu.data()};
  auto cpu_bwd = cpu_->MesaBackward(in_cpu, qs_cpu.data(), HostAct(d_o), solve, gr_cpu);
  ASSERT_TRUE(cpu_bwd.ok()) << cpu_bwd.status();
  // GPU.
  const MesaActs in_gpu = acts(UpAct(q), UpAct(k), UpAct(v), Up(lg), Up(beta), Up(lambda));
  const Act g_o = PoisonedAct(tok);
  float* g_qs = Poisoned(tok);
  auto steps = gpu_->MesaForward(in_gpu, solve, g_o, g_qs);
  ASSERT_TRUE(steps.ok()) << steps.status();
  std::printf("Mesa forward cg_steps_mean %.2f (%s activations)\n", *steps,
              ActivationTypeName(GetParam()));
  const MesaActGrads gr{.dq = PoisonedAct(tok),
                        .dk = PoisonedAct(tok),
                        .dv = PoisonedAct(tok),
                        .dlog_gamma = Poisoned(gates),
                        .dbeta = Poisoned(gates),
                        .dlambda = Poisoned(h * d)};
  auto bsteps = gpu_->MesaBackward(in_gpu, g_qs, UpAct(d_o), solve, gr);
  ASSERT_TRUE(bsteps.ok()) << bsteps.status();
  // fp16 states / matvecs vs the fp32 CPU op, plus the bf16 rounding of o, dq, dk, dv.
  const double tol = Tol(2e-2, kBf16Mesa);
  const std::string name = Case("Mesa");
  Expect(name, "o", RelErr(DownAct(g_o, tok), o_cpu), tol);
  Expect(name, "q_star", RelErr(Down(g_qs, tok), qs_cpu), tol);
  Expect(name, "dq", RelErr(DownAct(gr.dq, tok), dq_cpu), tol);
  Expect(name, "dk", RelErr(DownAct(gr.dk, tok), dk_cpu), tol);
  Expect(name, "dv", RelErr(DownAct(gr.dv, tok), dv_cpu), tol);
  Expect(name, "dlog_gamma", RelErr(Down(gr.dlog_gamma, gates), dlg_cpu), tol);
  Expect(name, "dbeta", RelErr(Down(gr.dbeta, gates), db_cpu), tol);
  Expect(name, "dlambda", RelErr(Down(gr.dlambda, h * d), dl_cpu), tol);
}

TEST_P(CudaVsCpu, DeltaNetOperator) {
  // The kernels/deltanet/cuda op (bf16 tensor-core operands) against the CPU chunked op, gated and
  // plain, through the Backend interface the model uses.
  const int64_t b = 2, t = 200, h = 3, d = 64;
  const int64_t tok = b * t * h * d, gates = b * t * h;
  auto l2rows = [&](Vec v) { return L2NormalizedRows(std::move(v), d); };
  const Vec q = Representable(l2rows(Random(tok))), k = Representable(l2rows(Random(tok))),
            v = RandomAct(tok), d_o = RandomAct(tok, 1e-3f);
  const Vec lg = Uniform(gates, -0.1f, -0.001f), beta = Uniform(gates, 0.1f, 0.9f);
  const kernels::MesaDims dims{b, t, h, d};
  for (const bool gated : {false, true}) {
    const std::string name = Case(gated ? "GatedDeltaNet" : "DeltaNet");
    Vec o_cpu(tok), dq_cpu(tok), dk_cpu(tok), dv_cpu(tok), db_cpu(gates), dlg_cpu(gates);
    const DeltaActs in_cpu{.dims = dims,
                           .q = HostAct(q),
                           .k = HostAct(k),
                           .v = HostAct(v),
                           .beta = beta.data(),
                           .log_gamma = gated ? lg.data() : nullptr};
    ASSERT_TRUE(cpu_->DeltaNetForward(in_cpu, HostAct(o_cpu)).ok());
    const DeltaActGrads gr_cpu{.dq = HostAct(dq_cpu),
                               .dk = HostAct(dk_cpu),
                               .dv = HostAct(dv_cpu),
                               .dbeta = db_cpu.data(),
                               .dlog_gamma = gated ? dlg_cpu.data() : nullptr};
    ASSERT_TRUE(cpu_->DeltaNetBackward(in_cpu, HostAct(d_o), gr_cpu).ok());
    const DeltaActs in_gpu{.dims = dims,
                           .q = UpAct(q),
                           .k = UpAct(k),
                           .v = UpAct(v),
                           .beta = Up(beta),
                           .log_gamma = gated ? Up(lg) : nullptr};
    const Act g_o = PoisonedAct(tok);
    absl::Status s = gpu_->DeltaNetForward(in_gpu, g_o);
    ASSERT_TRUE(s.ok()) << s;
    const DeltaActGrads gr{.dq = PoisonedAct(tok),
                           .dk = PoisonedAct(tok),
                           .dv = PoisonedAct(tok),
                           .dbeta = Poisoned(gates),
                           .dlog_gamma = gated ? Poisoned(gates) : nullptr};
    s = gpu_->DeltaNetBackward(in_gpu, UpAct(d_o), gr);
    ASSERT_TRUE(s.ok()) << s;
    const double tol = 2e-2;  // bf16 operands (and bf16 outputs with bf16 activations)
    Expect(name, "o", RelErr(DownAct(g_o, tok), o_cpu), tol);
    Expect(name, "dq", RelErr(DownAct(gr.dq, tok), dq_cpu), tol);
    Expect(name, "dk", RelErr(DownAct(gr.dk, tok), dk_cpu), tol);
    Expect(name, "dv", RelErr(DownAct(gr.dv, tok), dv_cpu), tol);
    Expect(name, "dbeta", RelErr(Down(gr.dbeta, gates), db_cpu), tol);
    if (gated) Expect(name, "dlog_gamma", RelErr(Down(gr.dlog_gamma, gates), dlg_cpu), tol);
  }
}

// ------------------------------------------------------------------------------------------------
// Whole model: same weights and batch on both backends.
//
// Bounds come from 210 seeds per variant measured on an H200 when the bf16 path went in. Gradient
// errors are heavy-tailed across seeds: in a few percent of instances the layer-0 q/k path
// (q_proj, k_proj, the convolutions, lambda and, upstream, the embedding) amplifies any input
// perturbation, be it TF32 rounding or bf16 storage. A float32 CPU model whose activations are
// rounded to bf16 deviates from the plain one exactly as much in those instances, so this is the
// model's conditioning (the Mesa solves), not the GPU. The median over tensors stays tight and
// carries the tight bound; single tensors and the whole buffer get bounds above the tail.

// Forward (logits, loss, per-position losses) and backward (every gradient) of one model.
struct ModelRun {
  ForwardStats stats;
  Vec losses, logits, grads;
};

void RunModel(MesaNet& net, const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets,
              int batch, ModelRun* run) {
  MesaSolve solve;
  solve.max_steps = net.config().cg_steps;
  auto f = net.Forward(tokens.data(), targets.data(), batch, solve);
  ASSERT_TRUE(f.ok()) << net.backend()->Name() << ": " << f.status();
  EXPECT_TRUE(f->finite) << net.backend()->Name();
  run->stats = *f;
  net.CopyLossesToHost(&run->losses);
  net.CopyLogitsToHost(&run->logits);
  net.ZeroGrads();
  auto bw = net.Backward(1.0f / f->loss_tokens);
  ASSERT_TRUE(bw.ok()) << net.backend()->Name() << ": " << bw.status();
  run->grads.assign(net.num_params(), 0.f);
  net.GetGradsToHost(run->grads.data());
}

constexpr double kNoBound = INFINITY;  // printed only (NaN still fails)

struct ModelTols {
  double loss;          // relative error of the loss sum
  double token_losses;  // per-position losses
  double logits;        // all logits
  double all_grads;     // the whole gradient buffer
  double median_grad;   // the median over gradient tensors of their relative errors
  double grad_tensor;   // every gradient tensor on its own, except the gates'
};

// The Mesa gates' parameters: their gradients sum d log_gamma / d beta terms over every token,
// terms that largely cancel (a_proj.bias has one element per head), so their relative error is
// unbounded in principle (0.29 seen with fp32 activations); printed, not bounded.
bool IsGateTensor(const std::string& name) {
  return name.find("attn.a_proj.") != std::string::npos ||
         name.find("attn.b_proj.") != std::string::npos;
}

// The median over gradient tensors of their relative errors (NaN counts as infinite).
double MedianTensorError(const ModelRun& run, const ModelRun& ref, const ParamLayout& layout) {
  std::vector<double> errors;
  for (const ParamTensor& pt : layout.tensors()) {
    const Vec a(run.grads.begin() + pt.offset, run.grads.begin() + pt.offset + pt.size);
    const Vec r(ref.grads.begin() + pt.offset, ref.grads.begin() + pt.offset + pt.size);
    const double e = RelErr(a, r);
    errors.push_back(std::isnan(e) ? INFINITY : e);
  }
  if (errors.empty()) return NAN;
  std::sort(errors.begin(), errors.end());
  return errors[(errors.size() - 1) / 2];
}

void CompareRuns(const std::string& name, const ModelRun& gpu, const ModelRun& ref,
                 const ParamLayout& layout, const ModelTols& tol) {
  std::printf("%s loss cpu %.6f gpu %.6f (tokens %lld), cg steps gpu %.2f cpu %.2f\n", name.c_str(),
              ref.stats.loss_sum / ref.stats.loss_tokens,
              gpu.stats.loss_sum / gpu.stats.loss_tokens,
              static_cast<long long>(gpu.stats.loss_tokens), gpu.stats.cg_steps_mean,
              ref.stats.cg_steps_mean);
  EXPECT_EQ(gpu.stats.loss_tokens, ref.stats.loss_tokens);
  Expect(name, "loss",
         std::abs(gpu.stats.loss_sum - ref.stats.loss_sum) / std::abs(ref.stats.loss_sum),
         tol.loss);
  Expect(name, "token_losses", RelErr(gpu.losses, ref.losses), tol.token_losses);
  Expect(name, "logits", RelErr(gpu.logits, ref.logits), tol.logits);
  Expect(name, "all_grads", RelErr(gpu.grads, ref.grads), tol.all_grads);
  double worst = 0, worst_gate = 0;
  std::string worst_name, worst_gate_name;
  for (const ParamTensor& pt : layout.tensors()) {
    const Vec a(gpu.grads.begin() + pt.offset, gpu.grads.begin() + pt.offset + pt.size);
    const Vec r(ref.grads.begin() + pt.offset, ref.grads.begin() + pt.offset + pt.size);
    const double e = RelErr(a, r);
    std::printf("  %-40s grad rel err %.3e\n", pt.name.c_str(), e);
    const bool gate = IsGateTensor(pt.name);
    double& w = gate ? worst_gate : worst;
    if (!(e <= w)) {  // NaN sticks
      w = e;
      (gate ? worst_gate_name : worst_name) = pt.name;
    }
  }
  const double median = MedianTensorError(gpu, ref, layout);
  std::printf("%s worst gradient tensor %s (%.3e), worst gate tensor %s (%.3e)\n", name.c_str(),
              worst_name.c_str(), worst, worst_gate_name.c_str(), worst_gate);
  Expect(name, "median_grad", median, tol.median_grad);
  Expect(name, "worst_grad", worst, tol.grad_tensor);
  Expect(name, "worst_gate_grad", worst_gate, kNoBound);
}

// The float32 CPU backend with every activation it writes rounded to bf16, and bf16-rounded
// Linear weights: what storing activations and GEMM weights in bf16 does to a given instance,
// without the GPU. Used to tell an ill-conditioned instance (this model's gradients move as much)
// from a GPU error (they do not).
class Bf16RoundingCpuBackend : public CpuBackend {
 public:
  using CpuBackend::CpuBackend;
  void ActivationsFromHost(Act dst, const float* src, int64_t n) override {
    CpuBackend::ActivationsFromHost(dst, src, n);
    Round(dst, n);
  }
  void LinearForwardStrided(Act in, const float* weight, Act out, int64_t ld, int64_t m, int64_t k,
                            int64_t n, bool accumulate) override {
    const Vec w = RoundedWeight(weight, n * k);
    CpuBackend::LinearForwardStrided(in, w.data(), out, ld, m, k, n, accumulate);
    RoundRows(out, m, n, ld);
  }
  void LinearBackwardStrided(Act in, const float* weight, Act d_out, int64_t ld, Act d_in,
                             float* d_weight, int64_t m, int64_t k, int64_t n,
                             bool accumulate_d_in) override {
    const Vec w = RoundedWeight(weight, n * k);
    CpuBackend::LinearBackwardStrided(in, w.data(), d_out, ld, d_in, d_weight, m, k, n,
                                      accumulate_d_in);
    if (d_in) Round(d_in, m * k);
  }
  void BiasForward(Act out, const float* bias, int64_t rows, int64_t n) override {
    CpuBackend::BiasForward(out, bias, rows, n);
    Round(out, rows * n);
  }
  void EmbeddingForward(const int32_t* tokens, const float* table, Act out, int64_t n, int64_t c,
                        float scale) override {
    CpuBackend::EmbeddingForward(tokens, table, out, n, c, scale);
    Round(out, n * c);
  }
  void RmsNormForward(Act x, const float* weight, Act out, float* rstd, int64_t rows, int64_t c,
                      float eps) override {
    CpuBackend::RmsNormForward(x, weight, out, rstd, rows, c, eps);
    Round(out, rows * c);
  }
  void RmsNormBackward(Act x, const float* weight, const float* rstd, Act d_out, Act d_x,
                       float* d_weight, int64_t rows, int64_t c) override {
    CpuBackend::RmsNormBackward(x, weight, rstd, d_out, d_x, d_weight, rows, c);
    Round(d_x, rows * c);
  }
  void CausalConvForward(Act x, const float* weight, Act out, int64_t b, int64_t t, int64_t ch,
                         int64_t w) override {
    CpuBackend::CausalConvForward(x, weight, out, b, t, ch, w);
    Round(out, b * t * ch);
  }
  void CausalConvBackward(Act x, const float* weight, Act d_out, Act d_x, float* d_weight,
                          int64_t b, int64_t t, int64_t ch, int64_t w) override {
    CpuBackend::CausalConvBackward(x, weight, d_out, d_x, d_weight, b, t, ch, w);
    Round(d_x, b * t * ch);
  }
  void SiluL2NormForward(Act x, Act y, int64_t groups, int64_t d) override {
    CpuBackend::SiluL2NormForward(x, y, groups, d);
    Round(y, groups * d);
  }
  void SiluL2NormBackward(Act x, Act d_y, Act d_x, int64_t groups, int64_t d) override {
    CpuBackend::SiluL2NormBackward(x, d_y, d_x, groups, d);
    Round(d_x, groups * d);
  }
  void GatesBackward(Act a_pre, Act b_pre, const float* d_beta, const float* d_log_gamma,
                     Act d_a_pre, Act d_b_pre, int64_t n, float cap) override {
    CpuBackend::GatesBackward(a_pre, b_pre, d_beta, d_log_gamma, d_a_pre, d_b_pre, n, cap);
    Round(d_a_pre, n);
    Round(d_b_pre, n);
  }
  void SwiGluForward(Act gate, Act up, Act h, int64_t n) override {
    CpuBackend::SwiGluForward(gate, up, h, n);
    Round(h, n);
  }
  void SwiGluBackward(Act gate, Act up, Act d_h, Act d_gate, Act d_up, int64_t n) override {
    CpuBackend::SwiGluBackward(gate, up, d_h, d_gate, d_up, n);
    Round(d_gate, n);
    Round(d_up, n);
  }
  void AddInPlace(Act out, Act in, int64_t n) override {
    CpuBackend::AddInPlace(out, in, n);
    Round(out, n);
  }
  void SoftcapCrossEntropyBackward(Act logits, const int32_t* targets, const float* losses,
                                   int64_t rows, int64_t v, int64_t ld, float cap,
                                   int32_t ignore_token, float loss_scale) override {
    CpuBackend::SoftcapCrossEntropyBackward(logits, targets, losses, rows, v, ld, cap, ignore_token,
                                            loss_scale);
    RoundRows(logits, rows, v, ld);
  }
  absl::StatusOr<double> MesaForward(const MesaActs& in, const MesaSolve& solve, Act o,
                                     float* q_star) override {
    absl::StatusOr<double> steps = CpuBackend::MesaForward(in, solve, o, q_star);
    Round(o, in.dims.TokenElems());
    return steps;
  }
  absl::StatusOr<double> MesaBackward(const MesaActs& in, const float* q_star, Act d_o,
                                      const MesaSolve& solve, const MesaActGrads& grads) override {
    absl::StatusOr<double> steps = CpuBackend::MesaBackward(in, q_star, d_o, solve, grads);
    for (Act a : {grads.dq, grads.dk, grads.dv}) Round(a, in.dims.TokenElems());
    return steps;
  }
  absl::Status DeltaNetForward(const DeltaActs& in, Act o) override {
    absl::Status s = CpuBackend::DeltaNetForward(in, o);
    Round(o, in.dims.TokenElems());
    return s;
  }
  absl::Status DeltaNetBackward(const DeltaActs& in, Act d_o, const DeltaActGrads& grads) override {
    absl::Status s = CpuBackend::DeltaNetBackward(in, d_o, grads);
    for (Act a : {grads.dq, grads.dk, grads.dv}) Round(a, in.dims.TokenElems());
    return s;
  }

 private:
  static void Round(Act a, int64_t n) {
    float* p = static_cast<float*>(a.ptr);
    for (int64_t i = 0; i < n; ++i) p[i] = RoundBf16(p[i]);
  }
  static void RoundRows(Act a, int64_t rows, int64_t n, int64_t ld) {
    float* p = static_cast<float*>(a.ptr);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < n; ++j) p[r * ld + j] = RoundBf16(p[r * ld + j]);
    }
  }
  static Vec RoundedWeight(const float* w, int64_t n) {
    Vec out(w, w + n);
    for (float& x : out) x = RoundBf16(x);
    return out;
  }
};

// The CUDA model against the float32 CPU model on the same random weights and batch.
void CompareModels(ActivationType activations, GemmMath math, const ModelTols& tol,
                   std::vector<MixerKind> layer_mixers = {}) {
  ModelConfig config;
  config.layer_mixers = std::move(layer_mixers);
  config.vocab_size = 1001;  // padded to 1008 unembedding rows: the padding path runs on the GPU
  config.d_model = 256;
  config.n_layers = 2;
  config.n_heads = 2;
  config.head_dim = 128;
  config.mlp_hidden = 768;
  config.cg_steps = 30;
  config.bos_token = 1000;
  const int b = 2, t = 256;

  CudaBackendOptions gopt;
  gopt.activations = activations;
  gopt.gemm_math = math;
  auto gpu_or = CreateCudaBackend(gopt);
  ASSERT_TRUE(gpu_or.ok()) << gpu_or.status();
  std::unique_ptr<Backend> gpu = std::move(*gpu_or);
  ASSERT_EQ(gpu->activation_type(), activations);
  CpuBackendOptions copt;
  copt.num_threads = 8;
  CpuBackend cpu(copt);
  auto net_cpu_or = MesaNet::Create(config, &cpu, b, t);
  auto net_gpu_or = MesaNet::Create(config, gpu.get(), b, t);
  ASSERT_TRUE(net_cpu_or.ok()) << net_cpu_or.status();
  ASSERT_TRUE(net_gpu_or.ok()) << net_gpu_or.status();
  MesaNet& net_cpu = **net_cpu_or;
  MesaNet& net_gpu = **net_gpu_or;

  const uint32_t seed = FreshSeed();
  std::mt19937 rng(seed);
  net_cpu.InitializeParams(seed);
  std::vector<float> params(net_cpu.num_params());
  net_cpu.GetParamsToHost(params.data());
  std::normal_distribution<float> noise(0.f, 0.05f);
  for (float& p : params) p += noise(rng);  // no trivially structured tensors (norms all 1)
  net_cpu.SetParamsFromHost(params.data());
  net_gpu.SetParamsFromHost(params.data());

  std::vector<int32_t> tokens(b * t), targets(b * t);
  std::uniform_int_distribution<int32_t> tok(0, config.vocab_size - 1);
  for (auto& x : tokens) x = tok(rng);
  for (auto& x : targets) x = tok(rng);
  targets[7] = config.bos_token;

  // "Model/<activations>[/<GEMM math>]"; the math only matters for float32 activations.
  std::string name = std::string("Model/") + ActivationTypeName(activations);
  for (MixerKind m : config.layer_mixers) name += std::string("/") + MixerName(m);
  if (activations == ActivationType::kFloat32) name += std::string("/") + GemmMathName(math);
  std::printf("%s seed %u\n", name.c_str(), seed);
  ModelRun run_cpu, run_gpu;
  ASSERT_NO_FATAL_FAILURE(RunModel(net_cpu, tokens, targets, b, &run_cpu));
  ASSERT_NO_FATAL_FAILURE(RunModel(net_gpu, tokens, targets, b, &run_gpu));
  ModelTols bounds = tol;
  if (activations == ActivationType::kBfloat16) {
    // How far bf16 storage alone moves this instance's gradients: in the ill-conditioned tail a
    // fixed bound would flag the instance, not the GPU. The gradient bounds become the larger of
    // the fixed ones and kConditioning times this host model's deviation.
    constexpr double kConditioning = 3.0;
    Bf16RoundingCpuBackend rounding(copt);
    auto net_rounding_or = MesaNet::Create(config, &rounding, b, t);
    ASSERT_TRUE(net_rounding_or.ok()) << net_rounding_or.status();
    (*net_rounding_or)->SetParamsFromHost(params.data());
    ModelRun run_rounding;
    ASSERT_NO_FATAL_FAILURE(RunModel(**net_rounding_or, tokens, targets, b, &run_rounding));
    const double ref_all = RelErr(run_rounding.grads, run_cpu.grads);
    const double ref_median = MedianTensorError(run_rounding, run_cpu, net_cpu.layout());
    std::printf(
        "%s bf16-rounding CPU model vs float32 CPU model: all grads %.3e, median tensor "
        "%.3e\n",
        name.c_str(), ref_all, ref_median);
    bounds.all_grads = std::max(tol.all_grads, kConditioning * ref_all);
    bounds.median_grad = std::max(tol.median_grad, kConditioning * ref_median);
  }
  CompareRuns(name, run_gpu, run_cpu, net_cpu.layout(), bounds);
  CudaBackendControl* ctl = GetCudaControl(gpu.get());
  ASSERT_NE(ctl, nullptr);
  EXPECT_TRUE(ctl->Synchronize().ok()) << ctl->status();
}

// Measured maxima over 210 seeds in the comments (loss / token losses / logits / all grads /
// median tensor / worst non-gate tensor).
TEST(CudaModel, MatchesCpuFp32Gemms) {
  // 1.1e-5 / 1.1e-4 / 6.2e-4 / 1.3e-2 / 4.5e-3 / 3.6e-2
  CompareModels(ActivationType::kFloat32, GemmMath::kFp32, {2e-3, 2e-3, 1e-2, 5e-2, 2e-2, 1e-1});
}
TEST(CudaModel, MatchesCpuTf32Gemms) {
  // 2.2e-5 / 2.6e-4 / 1.3e-3 / 4.9e-2 / 6.9e-3 / 6.4e-2
  CompareModels(ActivationType::kFloat32, GemmMath::kTf32, {3e-3, 3e-3, 1e-2, 1.5e-1, 3e-2, 2e-1});
}
// bf16 activations and bf16 weight copies against the float32 CPU model: the difference is that
// of a bf16 forward and backward (every activation rounded to 8 significant bits). Medians over
// seeds: loss 5.7e-5, token losses 2.1e-3, logits 1.1e-2, all grads 1.7e-2, median tensor 1.7e-2;
// single tensors reach 0.55 in the ill-conditioned instances (printed, not bounded). Rarer
// instances go further (seed 944301639: all grads 1.35, median 0.38), and a host model rounding to
// bf16 (Bf16RoundingCpuBackend) moves just as far there (1.20 / 0.33), so the gradient bounds
// below are raised to 3x that host model's deviation on each instance (CompareModels).
TEST(CudaModel, MatchesCpuBf16Activations) {
  // 2.5e-4 / 2.7e-3 / 2.0e-2 / 3.3e-1 / 8.0e-2 / 5.9e-1
  CompareModels(ActivationType::kBfloat16, GemmMath::kTf32,
                {2e-2, 5e-2, 1e-1, 7.5e-1, 2.5e-1, kNoBound});
}

// A [gated_deltanet, mesa] hybrid: the DeltaNet layer's CUDA op (bf16 tensor-core operands even
// with fp32 activations) inside the whole model; bounds of the bf16 model above.
TEST(CudaModel, DeltaNetHybridMatchesCpu) {
  CompareModels(ActivationType::kFloat32, GemmMath::kFp32,
                {2e-2, 5e-2, 1e-1, 7.5e-1, 2.5e-1, kNoBound},
                {MixerKind::kGatedDeltaNet, MixerKind::kMesa});
  CompareModels(ActivationType::kBfloat16, GemmMath::kTf32,
                {2e-2, 5e-2, 1e-1, 7.5e-1, 2.5e-1, kNoBound},
                {MixerKind::kDeltaNet, MixerKind::kMesa});
}

// A few AdamW steps of a tiny MesaNet with bf16 activations on one repeated, learnable batch
// (each sequence walks x -> (37 x + 11) mod 500; the target is the next token): the loss must drop.
TEST(CudaModel, Bf16TrainingLossDrops) {
  ModelConfig config;
  config.vocab_size = 512;
  config.d_model = 128;
  config.n_layers = 2;
  config.n_heads = 2;
  config.head_dim = 64;
  config.mlp_hidden = 384;
  config.cg_steps = 10;
  config.bos_token = 511;
  const int b = 4, t = 128;
  // The float32 CPU model goes from ~7.2 to ~0.03 in these 20 steps (0.005 of the first loss).
  const int kSteps = 20;
  const float kLr = 3e-3f;

  CudaBackendOptions gopt;
  gopt.activations = ActivationType::kBfloat16;
  gopt.exact_cg_steps = false;
  auto gpu_or = CreateCudaBackend(gopt);
  ASSERT_TRUE(gpu_or.ok()) << gpu_or.status();
  std::unique_ptr<Backend> gpu = std::move(*gpu_or);
  auto net_or = MesaNet::Create(config, gpu.get(), b, t);
  ASSERT_TRUE(net_or.ok()) << net_or.status();
  MesaNet& net = **net_or;
  const uint32_t seed = FreshSeed();
  net.InitializeParams(seed);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> start(0, 499);
  std::vector<int32_t> tokens(b * t), targets(b * t);
  for (int s = 0; s < b; ++s) {
    int32_t x = start(rng);
    for (int i = 0; i < t; ++i) {
      tokens[s * t + i] = x;
      x = (37 * x + 11) % 500;
      targets[s * t + i] = x;
    }
  }
  const int64_t n = net.num_params();
  float* m = gpu->AllocateFloats(n);
  float* v = gpu->AllocateFloats(n);
  ASSERT_NE(m, nullptr);
  ASSERT_NE(v, nullptr);
  MesaSolve solve;
  solve.max_steps = config.cg_steps;
  double first = NAN, last = NAN;
  const auto t0 = std::chrono::steady_clock::now();
  for (int step = 1; step <= kSteps; ++step) {
    auto f = net.Forward(tokens.data(), targets.data(), b, solve);
    ASSERT_TRUE(f.ok()) << f.status();
    ASSERT_TRUE(f->finite) << "step " << step;
    const double loss = f->loss_sum / f->loss_tokens;
    if (step == 1) first = loss;
    last = loss;
    if (step == 1 || step % 10 == 0) std::printf("Train/bf16 step %d loss %.4f\n", step, loss);
    net.ZeroGrads();
    auto bw = net.Backward(1.0f / f->loss_tokens);
    ASSERT_TRUE(bw.ok()) << bw.status();
    gpu->AdamWUpdate(net.params(), net.grads(), m, v, n, kLr, 0.9f, 0.98f, 1e-8f, 0.0f,
                     1.0f - std::pow(0.9f, static_cast<float>(step)),
                     1.0f - std::pow(0.98f, static_cast<float>(step)));
  }
  CudaBackendControl* ctl = GetCudaControl(gpu.get());
  ASSERT_NE(ctl, nullptr);
  EXPECT_TRUE(ctl->Synchronize().ok()) << ctl->status();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("Train/bf16 loss %.4f -> %.4f in %d AdamW steps (%.2f s)\n", first, last, kSteps,
              seconds);
  Expect("Train/bf16", "loss_ratio", last / first, 0.2);
  gpu->Free(m);
  gpu->Free(v);
}

}  // namespace
}  // namespace mesa::model
