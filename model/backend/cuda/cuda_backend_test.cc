// GPU test: every Backend op of CudaBackend against CpuBackend on fresh random inputs, then the whole
// MesaNet (loss, per-position losses, every gradient tensor) on identical weights and batch.
//
// Outputs are poisoned with NaN before overwrite ops (an unwritten element fails); accumulate ops
// start from the same random contents on both sides. Errors are ||gpu - cpu|| / ||cpu|| over the
// tensor; NaN never passes. Each check prints one "OPCHECK <case> <tensor> <err> <tol> ok|FAIL"
// line that model/backend/cuda/run_device.sh tabulates.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/backend/cpu_backend.h"
#include "model/backend/cuda/cuda_backend.h"
#include "model/model/mesanet.h"

namespace mesa::model {
namespace {

using Vec = std::vector<float>;

uint32_t FreshSeed() {
  static const uint32_t base = std::random_device{}();
  static uint32_t counter = 0;
  return base + 7919 * counter++;
}

double RelErr(const Vec& gpu, const Vec& cpu) {
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
  std::printf("OPCHECK %-40s %-14s %.3e %.0e %s\n", name.c_str(), tensor, err, tol,
              ok ? "ok" : "FAIL");
  EXPECT_TRUE(ok) << name << " " << tensor << " rel err " << err << " > " << tol;
}

class CudaVsCpu : public ::testing::Test {
 protected:
  void SetUp() override {
    auto gpu = CreateCudaBackend(0);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    gpu_ = std::move(*gpu);
    ctl_ = GetCudaControl(gpu_.get());
    ASSERT_NE(ctl_, nullptr);
    CpuBackendOptions options;
    options.num_threads = 8;
    cpu_ = std::make_unique<CpuBackend>(options);
    seed_ = FreshSeed();
    rng_.seed(seed_);
    std::printf("seed %u\n", seed_);
  }
  void TearDown() override {
    for (void* p : owned_) gpu_->Free(p);
    if (ctl_ != nullptr) EXPECT_TRUE(ctl_->Synchronize().ok()) << ctl_->status();
  }

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
  // A device copy of host data.
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
  // A device output poisoned with NaN.
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

  std::unique_ptr<Backend> gpu_;
  CudaBackendControl* ctl_ = nullptr;
  std::unique_ptr<CpuBackend> cpu_;
  std::vector<void*> owned_;
  uint32_t seed_ = 0;
  std::mt19937 rng_;
};

constexpr double kExact = 2e-5;  // fp32 vs fp32 (different summation orders)

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

TEST_F(CudaVsCpu, Linear) {
  for (GemmMath math : {GemmMath::kTf32, GemmMath::kFp32, GemmMath::kBf16}) {
    ctl_->SetGemmMath(math);
    const std::string tag = std::string("Linear/") + GemmMathName(math);
    const double tol = GemmTol(math);
    // Odd sizes (not multiples of 4 or 16) to exercise alignment handling.
    for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{1000, 768, 300},
                           {333, 130, 6}, {517, 2304, 768}}) {
      const std::string name = tag + "/" + std::to_string(m) + "x" + std::to_string(k) + "x" +
                               std::to_string(n);
      Vec in = Random(m * k), w = Random(n * k, 0.05f), acc = Random(m * n);
      // Overwrite.
      Vec out_cpu(m * n);
      cpu_->LinearForward(in.data(), w.data(), out_cpu.data(), m, k, n, false);
      float* d_out = Poisoned(m * n);
      gpu_->LinearForward(Up(in), Up(w), d_out, m, k, n, false);
      Expect(name, "fwd", RelErr(Down(d_out, m * n), out_cpu), tol);
      // Accumulate.
      Vec acc_cpu = acc;
      cpu_->LinearForward(in.data(), w.data(), acc_cpu.data(), m, k, n, true);
      float* d_acc = Up(acc);
      gpu_->LinearForward(Up(in), Up(w), d_acc, m, k, n, true);
      Expect(name, "fwd_accum", RelErr(Down(d_acc, m * n), acc_cpu), tol);
      // Backward accumulates into both.
      Vec dy = Random(m * n), dx = Random(m * k), dw = Random(n * k);
      Vec dx_cpu = dx, dw_cpu = dw;
      cpu_->LinearBackward(in.data(), w.data(), dy.data(), dx_cpu.data(), dw_cpu.data(), m, k, n);
      float *g_dx = Up(dx), *g_dw = Up(dw);
      gpu_->LinearBackward(Up(in), Up(w), Up(dy), g_dx, g_dw, m, k, n);
      Expect(name, "d_in", RelErr(Down(g_dx, m * k), dx_cpu), tol);
      Expect(name, "d_weight", RelErr(Down(g_dw, n * k), dw_cpu), tol);
      // d_in may be null.
      Vec dw2_cpu = dw;
      cpu_->LinearBackward(in.data(), w.data(), dy.data(), nullptr, dw2_cpu.data(), m, k, n);
      float* g_dw2 = Up(dw);
      gpu_->LinearBackward(Up(in), Up(w), Up(dy), nullptr, g_dw2, m, k, n);
      Expect(name, "d_weight_only", RelErr(Down(g_dw2, n * k), dw2_cpu), tol);
    }
    // Padded row stride of out / d_out (MesaNet's logits, ld = round_up(n, 64)) against the dense
    // CPU result; the padding columns hold a sentinel that must survive every call.
    for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{1000, 768, 1001},
                           {517, 256, 50257}}) {
      const int64_t ld = (n + 63) / 64 * 64;
      const std::string name = tag + "/strided/" + std::to_string(m) + "x" + std::to_string(k) +
                               "x" + std::to_string(n) + "ld" + std::to_string(ld);
      const float kPad = 7.25f;
      auto strided = [&](const Vec& dense) {
        Vec s(m * ld, kPad);
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
      Vec in = Random(m * k), w = Random(n * k, 0.05f), acc = Random(m * n);
      int64_t bad = 0;
      Vec out_cpu(m * n);
      cpu_->LinearForward(in.data(), w.data(), out_cpu.data(), m, k, n, false);
      Vec poisoned(m * n, NAN);
      float* d_out = Up(strided(poisoned));
      gpu_->LinearForwardStrided(Up(in), Up(w), d_out, ld, m, k, n, false);
      Expect(name, "fwd", RelErr(dense_of(Down(d_out, m * ld), &bad), out_cpu), tol);
      Vec acc_cpu = acc;
      cpu_->LinearForward(in.data(), w.data(), acc_cpu.data(), m, k, n, true);
      float* d_acc = Up(strided(acc));
      gpu_->LinearForwardStrided(Up(in), Up(w), d_acc, ld, m, k, n, true);
      Expect(name, "fwd_accum", RelErr(dense_of(Down(d_acc, m * ld), &bad), acc_cpu), tol);
      Vec dy = Random(m * n), dx = Random(m * k), dw = Random(n * k);
      Vec dx_cpu = dx, dw_cpu = dw;
      cpu_->LinearBackward(in.data(), w.data(), dy.data(), dx_cpu.data(), dw_cpu.data(), m, k, n);
      // NaN in the padding of d_out: reading it would poison d_in / d_weight.
      Vec dy_s(m * ld, NAN);
      for (int64_t r = 0; r < m; ++r) {
        std::copy(dy.begin() + r * n, dy.begin() + (r + 1) * n, dy_s.begin() + r * ld);
      }
      float *g_dx = Up(dx), *g_dw = Up(dw);
      gpu_->LinearBackwardStrided(Up(in), Up(w), Up(dy_s), ld, g_dx, g_dw, m, k, n);
      Expect(name, "d_in", RelErr(Down(g_dx, m * k), dx_cpu), tol);
      Expect(name, "d_weight", RelErr(Down(g_dw, n * k), dw_cpu), tol);
      Expect(name, "pads_untouched", static_cast<double>(bad), 0.0);
    }
  }
}

TEST_F(CudaVsCpu, Bias) {
  const int64_t rows = 4099, n = 6;
  Vec out = Random(rows * n), bias = Random(n), dy = Random(rows * n), db = Random(n);
  Vec out_cpu = out, db_cpu = db;
  cpu_->BiasForward(out_cpu.data(), bias.data(), rows, n);
  cpu_->BiasBackward(dy.data(), db_cpu.data(), rows, n);
  float *g_out = Up(out), *g_db = Up(db);
  gpu_->BiasForward(g_out, Up(bias), rows, n);
  gpu_->BiasBackward(Up(dy), g_db, rows, n);
  Expect("Bias", "fwd", RelErr(Down(g_out, rows * n), out_cpu), kExact);
  Expect("Bias", "d_bias", RelErr(Down(g_db, n), db_cpu), kExact);
}

TEST_F(CudaVsCpu, Embedding) {
  const int64_t n = 3000, c = 96, vocab = 257;
  std::vector<int32_t> tokens(n);
  std::uniform_int_distribution<int32_t> tok(0, vocab - 1);
  for (auto& t : tokens) t = tok(rng_) % 40;  // many repeats: exercises the grouped scatter-add
  tokens[5] = vocab - 1;
  Vec table = Random(vocab * c), dy = Random(n * c), dtable = Random(vocab * c);
  const float scale = std::sqrt(static_cast<float>(c));
  Vec out_cpu(n * c), dtable_cpu = dtable;
  cpu_->EmbeddingForward(tokens.data(), table.data(), out_cpu.data(), n, c, scale);
  cpu_->EmbeddingBackward(tokens.data(), dy.data(), dtable_cpu.data(), n, c, scale);
  int32_t* g_tok = UpInts(tokens);
  float *g_out = Poisoned(n * c), *g_dt = Up(dtable), *g_dy = Up(dy);
  gpu_->EmbeddingForward(g_tok, Up(table), g_out, n, c, scale);
  gpu_->EmbeddingBackward(g_tok, g_dy, g_dt, n, c, scale);
  Expect("Embedding", "fwd", RelErr(Down(g_out, n * c), out_cpu), kExact);
  const Vec first = Down(g_dt, vocab * c);
  Expect("Embedding", "d_table", RelErr(first, dtable_cpu), kExact);
  // Determinism: the same scatter-add again from the same start gives the same bits.
  float* g_dt2 = Up(dtable);
  gpu_->EmbeddingBackward(g_tok, g_dy, g_dt2, n, c, scale);
  EXPECT_EQ(std::memcmp(Down(g_dt2, vocab * c).data(), first.data(), sizeof(float) * vocab * c), 0);
}

TEST_F(CudaVsCpu, RmsNorm) {
  for (auto [rows, c, eps] : {std::tuple<int64_t, int64_t, float>{2051, 768, 1e-6f},
                              {6000, 128, 1e-5f}, {37, 1536, 1e-6f}}) {
    const std::string name = "RmsNorm/" + std::to_string(rows) + "x" + std::to_string(c);
    Vec x = Random(rows * c, 2.f), w = Uniform(c, 0.5f, 1.5f), dy = Random(rows * c);
    Vec dx = Random(rows * c), dw = Random(c);
    Vec out_cpu(rows * c), rstd_cpu(rows), dx_cpu = dx, dw_cpu = dw;
    cpu_->RmsNormForward(x.data(), w.data(), out_cpu.data(), rstd_cpu.data(), rows, c, eps);
    cpu_->RmsNormBackward(x.data(), w.data(), rstd_cpu.data(), dy.data(), dx_cpu.data(),
                          dw_cpu.data(), rows, c);
    float *g_x = Up(x), *g_w = Up(w), *g_out = Poisoned(rows * c), *g_rstd = Poisoned(rows);
    gpu_->RmsNormForward(g_x, g_w, g_out, g_rstd, rows, c, eps);
    float *g_dx = Up(dx), *g_dw = Up(dw);
    gpu_->RmsNormBackward(g_x, g_w, g_rstd, Up(dy), g_dx, g_dw, rows, c);
    Expect(name, "fwd", RelErr(Down(g_out, rows * c), out_cpu), kExact);
    Expect(name, "rstd", RelErr(Down(g_rstd, rows), rstd_cpu), kExact);
    Expect(name, "d_x", RelErr(Down(g_dx, rows * c), dx_cpu), kExact);
    Expect(name, "d_weight", RelErr(Down(g_dw, c), dw_cpu), kExact);
  }
}

TEST_F(CudaVsCpu, CausalConv) {
  for (auto [b, t, ch, w] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{3, 133, 200, 4},
                             {2, 70, 768, 4}, {1, 5, 33, 7}}) {
    const std::string name = "CausalConv/" + std::to_string(b) + "x" + std::to_string(t) + "x" +
                             std::to_string(ch) + "w" + std::to_string(w);
    const int64_t n = b * t * ch;
    Vec x = Random(n), wt = Random(ch * w, 0.5f), dy = Random(n), dx = Random(n),
        dw = Random(ch * w);
    Vec out_cpu(n), dx_cpu = dx, dw_cpu = dw;
    cpu_->CausalConvForward(x.data(), wt.data(), out_cpu.data(), b, t, ch, w);
    cpu_->CausalConvBackward(x.data(), wt.data(), dy.data(), dx_cpu.data(), dw_cpu.data(), b, t,
                             ch, w);
    float *g_x = Up(x), *g_w = Up(wt), *g_out = Poisoned(n), *g_dx = Up(dx), *g_dw = Up(dw);
    gpu_->CausalConvForward(g_x, g_w, g_out, b, t, ch, w);
    gpu_->CausalConvBackward(g_x, g_w, Up(dy), g_dx, g_dw, b, t, ch, w);
    Expect(name, "fwd", RelErr(Down(g_out, n), out_cpu), kExact);
    Expect(name, "d_x", RelErr(Down(g_dx, n), dx_cpu), kExact);
    Expect(name, "d_weight", RelErr(Down(g_dw, ch * w), dw_cpu), kExact);
  }
}

TEST_F(CudaVsCpu, SiluL2Norm) {
  for (auto [groups, d] : {std::pair<int64_t, int64_t>{3001, 128}, {100, 48}}) {
    const std::string name = "SiluL2Norm/" + std::to_string(groups) + "x" + std::to_string(d);
    Vec x = Random(groups * d, 2.f), dy = Random(groups * d), dx = Random(groups * d);
    Vec y_cpu(groups * d), dx_cpu = dx;
    cpu_->SiluL2NormForward(x.data(), y_cpu.data(), groups, d);
    cpu_->SiluL2NormBackward(x.data(), dy.data(), dx_cpu.data(), groups, d);
    float *g_x = Up(x), *g_y = Poisoned(groups * d), *g_dx = Up(dx);
    gpu_->SiluL2NormForward(g_x, g_y, groups, d);
    gpu_->SiluL2NormBackward(g_x, Up(dy), g_dx, groups, d);
    Expect(name, "fwd", RelErr(Down(g_y, groups * d), y_cpu), kExact);
    Expect(name, "d_x", RelErr(Down(g_dx, groups * d), dx_cpu), kExact);
  }
}

TEST_F(CudaVsCpu, GatesLambdaSwiGlu) {
  const int64_t n = 12345;
  const float cap = 0.0025f;
  Vec a = Random(n, 3.f), b = Random(n, 3.f), dbeta = Random(n), dlg = Random(n);
  Vec beta_cpu(n), lg_cpu(n), da_cpu(n), db_cpu(n);
  cpu_->GatesForward(a.data(), b.data(), beta_cpu.data(), lg_cpu.data(), n, cap);
  cpu_->GatesBackward(a.data(), b.data(), dbeta.data(), dlg.data(), da_cpu.data(), db_cpu.data(),
                      n, cap);
  float *g_a = Up(a), *g_b = Up(b), *g_beta = Poisoned(n), *g_lg = Poisoned(n),
        *g_da = Poisoned(n), *g_db = Poisoned(n);
  gpu_->GatesForward(g_a, g_b, g_beta, g_lg, n, cap);
  gpu_->GatesBackward(g_a, g_b, Up(dbeta), Up(dlg), g_da, g_db, n, cap);
  Expect("Gates", "beta", RelErr(Down(g_beta, n), beta_cpu), kExact);
  Expect("Gates", "log_gamma", RelErr(Down(g_lg, n), lg_cpu), kExact);
  Expect("Gates", "d_a_pre", RelErr(Down(g_da, n), da_cpu), kExact);
  Expect("Gates", "d_b_pre", RelErr(Down(g_db, n), db_cpu), kExact);

  const int64_t hd = 768;
  Vec p = Random(hd, 2.f), dl = Random(hd), dp = Random(hd);
  Vec lam_cpu(hd), dp_cpu = dp;
  cpu_->LambdaForward(p.data(), lam_cpu.data(), hd, 0.25f);
  cpu_->LambdaBackward(p.data(), dl.data(), dp_cpu.data(), hd);
  float *g_p = Up(p), *g_lam = Poisoned(hd), *g_dp = Up(dp);
  gpu_->LambdaForward(g_p, g_lam, hd, 0.25f);
  gpu_->LambdaBackward(g_p, Up(dl), g_dp, hd);
  Expect("Lambda", "fwd", RelErr(Down(g_lam, hd), lam_cpu), kExact);
  Expect("Lambda", "d_p", RelErr(Down(g_dp, hd), dp_cpu), kExact);

  const int64_t m = 100003;
  Vec gate = Random(m, 2.f), up = Random(m), dh = Random(m);
  Vec h_cpu(m), dg_cpu(m), du_cpu(m);
  cpu_->SwiGluForward(gate.data(), up.data(), h_cpu.data(), m);
  cpu_->SwiGluBackward(gate.data(), up.data(), dh.data(), dg_cpu.data(), du_cpu.data(), m);
  float *g_gate = Up(gate), *g_up = Up(up), *g_h = Poisoned(m), *g_dg = Poisoned(m),
        *g_du = Poisoned(m);
  gpu_->SwiGluForward(g_gate, g_up, g_h, m);
  gpu_->SwiGluBackward(g_gate, g_up, Up(dh), g_dg, g_du, m);
  Expect("SwiGlu", "fwd", RelErr(Down(g_h, m), h_cpu), kExact);
  Expect("SwiGlu", "d_gate", RelErr(Down(g_dg, m), dg_cpu), kExact);
  Expect("SwiGlu", "d_up", RelErr(Down(g_du, m), du_cpu), kExact);
}

TEST_F(CudaVsCpu, CopyAddScaleSumAdamW) {
  const int64_t n = 1000003;
  Vec x = Random(n), y = Random(n);
  Vec sum_cpu = x;
  cpu_->AddInPlace(sum_cpu.data(), y.data(), n);
  cpu_->Scale(sum_cpu.data(), n, 0.37f);
  float *g_x = Up(x), *g_copy = Poisoned(n);
  gpu_->Copy(g_copy, g_x, n);
  Expect("Copy", "out", RelErr(Down(g_copy, n), x), 0.0);
  gpu_->AddInPlace(g_x, Up(y), n);
  gpu_->Scale(g_x, n, 0.37f);
  Expect("AddInPlace+Scale", "out", RelErr(Down(g_x, n), sum_cpu), kExact);
  const double ss_cpu = cpu_->SumOfSquares(sum_cpu.data(), n);
  const double ss_gpu = gpu_->SumOfSquares(g_x, n);
  Expect("SumOfSquares", "value", std::abs(ss_gpu - ss_cpu) / ss_cpu, 1e-6);
  EXPECT_EQ(ss_gpu, gpu_->SumOfSquares(g_x, n));  // deterministic
  gpu_->Zero(g_copy, n);
  Expect("Zero", "out", RelErr(Down(g_copy, n), Vec(n, 0.f)), 0.0);

  Vec p = Random(n), g = Random(n, 0.1f), m = Random(n, 0.01f), v = Uniform(n, 0.f, 1e-3f);
  Vec p_cpu = p, m_cpu = m, v_cpu = v;
  cpu_->AdamWUpdate(p_cpu.data(), g.data(), m_cpu.data(), v_cpu.data(), n, 1e-3f, 0.9f, 0.98f,
                    1e-8f, 0.1f, 0.19f, 0.0396f);
  float *g_p = Up(p), *g_m = Up(m), *g_v = Up(v);
  gpu_->AdamWUpdate(g_p, Up(g), g_m, g_v, n, 1e-3f, 0.9f, 0.98f, 1e-8f, 0.1f, 0.19f, 0.0396f);
  Expect("AdamW", "params", RelErr(Down(g_p, n), p_cpu), kExact);
  Expect("AdamW", "m", RelErr(Down(g_m, n), m_cpu), kExact);
  Expect("AdamW", "v", RelErr(Down(g_v, n), v_cpu), kExact);
}

TEST_F(CudaVsCpu, SoftcapCrossEntropy) {
  const int64_t rows = 67, v = 50257;
  const int32_t bos = 50256;
  Vec logits = Random(rows * v, 20.f);  // large enough for the soft-cap to bend
  std::vector<int32_t> targets(rows);
  std::uniform_int_distribution<int32_t> tok(0, v - 1);
  for (auto& t : targets) t = tok(rng_);
  targets[3] = bos;
  targets[10] = bos;
  Vec losses_cpu(rows);
  const double sum_cpu = cpu_->SoftcapCrossEntropyForward(logits.data(), targets.data(),
                                                          losses_cpu.data(), rows, v, v, 30.f, bos);
  Vec grad_cpu = logits;
  cpu_->SoftcapCrossEntropyBackward(grad_cpu.data(), targets.data(), rows, v, v, 30.f, bos, 0.01f);
  int32_t* g_t = UpInts(targets);
  // Dense rows, then MesaNet's padded rows (ld = 50304) with NaN in the padding: reading it would
  // poison the row's loss; writing it is caught below.
  for (int64_t ld : {v, (v + 63) / 64 * 64}) {
    const std::string name = "SoftcapCE/ld" + std::to_string(ld);
    Vec strided(rows * ld, NAN);
    for (int64_t r = 0; r < rows; ++r) {
      std::copy(logits.begin() + r * v, logits.begin() + (r + 1) * v, strided.begin() + r * ld);
    }
    float *g_logits = Up(strided), *g_losses = Poisoned(rows);
    const double sum_gpu = gpu_->SoftcapCrossEntropyForward(g_logits, g_t, g_losses, rows, v, ld,
                                                            30.f, bos);
    Expect(name, "loss_sum", std::abs(sum_gpu - sum_cpu) / std::abs(sum_cpu), 1e-5);
    Expect(name, "losses", RelErr(Down(g_losses, rows), losses_cpu), 1e-5);
    gpu_->SoftcapCrossEntropyBackward(g_logits, g_t, rows, v, ld, 30.f, bos, 0.01f);
    const Vec got = Down(g_logits, rows * ld);
    Vec dense(rows * v);
    int64_t bad_pads = 0;
    for (int64_t r = 0; r < rows; ++r) {
      std::copy(got.begin() + r * ld, got.begin() + r * ld + v, dense.begin() + r * v);
      for (int64_t j = v; j < ld; ++j) bad_pads += !std::isnan(got[r * ld + j]);
    }
    Expect(name, "d_logits", RelErr(dense, grad_cpu), 1e-5);
    Expect(name, "pads_untouched", static_cast<double>(bad_pads), 0.0);
  }
}

TEST_F(CudaVsCpu, MesaOperator) {
  // The kernels/cuda op (fp16 chunk states and CG matvec operands) against the CPU chunked op.
  const int64_t b = 2, t = 256, h = 3, d = 128;
  const int64_t tok = b * t * h * d, gates = b * t * h;
  auto l2rows = [&](Vec v) {
    for (int64_t i = 0; i < tok; i += d) {
      double s = 0;
      for (int64_t j = 0; j < d; ++j) s += v[i + j] * v[i + j];
      for (int64_t j = 0; j < d; ++j) v[i + j] /= std::sqrt(s);
    }
    return v;
  };
  Vec q = l2rows(Random(tok)), k = l2rows(Random(tok)), v = Random(tok);
  Vec lg = Uniform(gates, -0.1f, -0.001f), beta = Uniform(gates, 0.1f, 0.9f),
      lambda = Uniform(h * d, 0.5f, 1.5f), d_o = Random(tok, 1e-3f);
  kernels::MesaDims dims{b, t, h, d};
  auto inputs = [&](const float* q_, const float* k_, const float* v_, const float* lg_,
                    const float* beta_, const float* lam_) {
    kernels::MesaInputs in;
    in.dims = dims;
    in.q = {q_, static_cast<size_t>(tok)};
    in.k = {k_, static_cast<size_t>(tok)};
    in.v = {v_, static_cast<size_t>(tok)};
    in.log_gamma = {lg_, static_cast<size_t>(gates)};
    in.beta = {beta_, static_cast<size_t>(gates)};
    in.lambda = {lam_, static_cast<size_t>(h * d)};
    return in;
  };
  MesaSolve solve;  // 30 fixed steps
  // CPU.
  Vec o_cpu(tok), qs_cpu(tok), dq_cpu(tok), dk_cpu(tok), dv_cpu(tok), dlg_cpu(gates),
      db_cpu(gates), dl_cpu(h * d);
  const auto in_cpu = inputs(q.data(), k.data(), v.data(), lg.data(), beta.data(), lambda.data());
  kernels::MesaForwardOutputs fo_cpu;
  fo_cpu.o = {o_cpu.data(), o_cpu.size()};
  fo_cpu.q_star = {qs_cpu.data(), qs_cpu.size()};
  ASSERT_TRUE(cpu_->MesaForward(in_cpu, solve, fo_cpu).ok());
  kernels::MesaBackwardInputs bi_cpu;
  bi_cpu.q_star = {qs_cpu.data(), qs_cpu.size()};
  bi_cpu.d_o = {d_o.data(), d_o.size()};
  kernels::MesaGradients gr_cpu;
  gr_cpu.dq = {dq_cpu.data(), dq_cpu.size()};
  gr_cpu.dk = {dk_cpu.data(), dk_cpu.size()};
  gr_cpu.dv = {dv_cpu.data(), dv_cpu.size()};
  gr_cpu.dlog_gamma = {dlg_cpu.data(), dlg_cpu.size()};
  gr_cpu.dbeta = {db_cpu.data(), db_cpu.size()};
  gr_cpu.dlambda = {dl_cpu.data(), dl_cpu.size()};
  ASSERT_TRUE(cpu_->MesaBackward(in_cpu, bi_cpu, solve, gr_cpu).ok());
  // GPU.
  const auto in_gpu = inputs(Up(q), Up(k), Up(v), Up(lg), Up(beta), Up(lambda));
  float *g_o = Poisoned(tok), *g_qs = Poisoned(tok), *g_dq = Poisoned(tok), *g_dk = Poisoned(tok),
        *g_dv = Poisoned(tok), *g_dlg = Poisoned(gates), *g_db = Poisoned(gates),
        *g_dl = Poisoned(h * d);
  kernels::MesaForwardOutputs fo;
  fo.o = {g_o, static_cast<size_t>(tok)};
  fo.q_star = {g_qs, static_cast<size_t>(tok)};
  auto steps = gpu_->MesaForward(in_gpu, solve, fo);
  ASSERT_TRUE(steps.ok()) << steps.status();
  std::printf("Mesa forward cg_steps_mean %.2f\n", *steps);
  kernels::MesaBackwardInputs bi;
  bi.q_star = {g_qs, static_cast<size_t>(tok)};
  bi.d_o = {Up(d_o), static_cast<size_t>(tok)};
  kernels::MesaGradients gr;
  gr.dq = {g_dq, static_cast<size_t>(tok)};
  gr.dk = {g_dk, static_cast<size_t>(tok)};
  gr.dv = {g_dv, static_cast<size_t>(tok)};
  gr.dlog_gamma = {g_dlg, static_cast<size_t>(gates)};
  gr.dbeta = {g_db, static_cast<size_t>(gates)};
  gr.dlambda = {g_dl, static_cast<size_t>(h * d)};
  auto bsteps = gpu_->MesaBackward(in_gpu, bi, solve, gr);
  ASSERT_TRUE(bsteps.ok()) << bsteps.status();
  const double tol = 2e-2;  // fp16 states / matvecs vs the fp32 CPU op
  Expect("Mesa", "o", RelErr(Down(g_o, tok), o_cpu), tol);
  Expect("Mesa", "q_star", RelErr(Down(g_qs, tok), qs_cpu), tol);
  Expect("Mesa", "dq", RelErr(Down(g_dq, tok), dq_cpu), tol);
  Expect("Mesa", "dk", RelErr(Down(g_dk, tok), dk_cpu), tol);
  Expect("Mesa", "dv", RelErr(Down(g_dv, tok), dv_cpu), tol);
  Expect("Mesa", "dlog_gamma", RelErr(Down(g_dlg, gates), dlg_cpu), tol);
  Expect("Mesa", "dbeta", RelErr(Down(g_db, gates), db_cpu), tol);
  Expect("Mesa", "dlambda", RelErr(Down(g_dl, h * d), dl_cpu), tol);
}

// ------------------------------------------------------------------------------------------------
// Whole model: same weights and batch on both backends.
void CompareModels(GemmMath math, double loss_tol, double grad_tol) {
  ModelConfig config;
  config.vocab_size = 1000;
  config.d_model = 256;
  config.n_layers = 2;
  config.n_heads = 2;
  config.head_dim = 128;
  config.mlp_hidden = 768;
  config.cg_steps = 30;
  config.bos_token = 999;
  const int b = 2, t = 256;

  CudaBackendOptions gopt;
  gopt.gemm_math = math;
  auto gpu_or = CreateCudaBackend(gopt);
  ASSERT_TRUE(gpu_or.ok()) << gpu_or.status();
  std::unique_ptr<Backend> gpu = std::move(*gpu_or);
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

  const std::string name = std::string("Model/") + GemmMathName(math);
  MesaSolve solve;
  solve.max_steps = config.cg_steps;
  auto f_cpu = net_cpu.Forward(tokens.data(), targets.data(), b, solve);
  auto f_gpu = net_gpu.Forward(tokens.data(), targets.data(), b, solve);
  ASSERT_TRUE(f_cpu.ok()) << f_cpu.status();
  ASSERT_TRUE(f_gpu.ok()) << f_gpu.status();
  std::printf("%s loss cpu %.6f gpu %.6f (tokens %lld), cg steps gpu %.2f cpu %.2f\n",
              name.c_str(), f_cpu->loss_sum / f_cpu->loss_tokens,
              f_gpu->loss_sum / f_gpu->loss_tokens, static_cast<long long>(f_gpu->loss_tokens),
              f_gpu->cg_steps_mean, f_cpu->cg_steps_mean);
  Expect(name, "loss", std::abs(f_gpu->loss_sum - f_cpu->loss_sum) / std::abs(f_cpu->loss_sum),
         loss_tol);
  std::vector<float> l_cpu, l_gpu;
  net_cpu.CopyLossesToHost(&l_cpu);
  net_gpu.CopyLossesToHost(&l_gpu);
  Expect(name, "token_losses", RelErr(l_gpu, l_cpu), loss_tol);

  const float scale = 1.0f / f_cpu->loss_tokens;
  net_cpu.ZeroGrads();
  net_gpu.ZeroGrads();
  ASSERT_TRUE(net_cpu.Backward(scale).ok());
  auto bg = net_gpu.Backward(scale);
  ASSERT_TRUE(bg.ok()) << bg.status();
  std::vector<float> g_cpu(net_cpu.num_params()), g_gpu(net_gpu.num_params());
  net_cpu.GetGradsToHost(g_cpu.data());
  net_gpu.GetGradsToHost(g_gpu.data());
  Expect(name, "all_grads", RelErr(g_gpu, g_cpu), grad_tol);
  double worst = 0;
  std::string worst_name;
  for (const ParamTensor& pt : net_cpu.layout().tensors()) {
    Vec a(g_gpu.begin() + pt.offset, g_gpu.begin() + pt.offset + pt.size);
    Vec r(g_cpu.begin() + pt.offset, g_cpu.begin() + pt.offset + pt.size);
    const double e = RelErr(a, r);
    std::printf("  %-40s grad rel err %.3e\n", pt.name.c_str(), e);
    if (!(e <= worst)) {
      worst = e;
      worst_name = pt.name;
    }
    EXPECT_LE(e, grad_tol) << pt.name;
  }
  std::printf("%s worst gradient tensor %s\n", name.c_str(), worst_name.c_str());
  Expect(name, "worst_grad", worst, grad_tol);
  ASSERT_TRUE(GetCudaControl(gpu.get())->Synchronize().ok());
}

TEST(CudaModel, MatchesCpuFp32Gemms) { CompareModels(GemmMath::kFp32, 2e-3, 3e-2); }
TEST(CudaModel, MatchesCpuTf32Gemms) { CompareModels(GemmMath::kTf32, 3e-3, 5e-2); }

}  // namespace
}  // namespace mesa::model
