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
//
// This file: the layer ops; cuda_operators_test.cc: the Mesa and DeltaNet operators;
// cuda_model_test.cc: the whole model. Shared helpers: cuda_backend_test_util.h.
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "model/backend/cpu_backend.h"
#include "model/backend/cuda/cuda_backend.h"
#include "model/net/mesanet.h"
#include "tests/gpu/cuda_backend_test_util.h"

namespace mesa::model::cuda_test {
namespace {

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

// Packed documents of b rows of t tokens: documents of 1 and 2 tokens at the start, then of 7.
std::vector<int32_t> PackedStarts(int64_t b, int64_t t) {
  std::vector<int32_t> starts(b * t);
  for (int64_t r = 0; r < b * t; ++r) {
    const int64_t ti = r % t;
    starts[r] = ti == 0 ? 0 : (ti % 7 == 0 || ti == 1 || ti == 3 ? ti : starts[r - 1]);
  }
  return starts;
}

TEST_P(CudaVsCpu, FillAtDocumentStarts) {
  const int64_t b = 3, t = 77, cols = 4;
  const std::vector<int32_t> starts = PackedStarts(b, t);
  const Vec x = Random(b * t * cols);
  Vec cpu = x;
  cpu_->FillAtDocumentStarts(cpu.data(), starts.data(), b, t, cols, -30.f);
  float* g = Up(x);
  gpu_->FillAtDocumentStarts(g, UpInts(starts), b, t, cols, -30.f);
  EXPECT_EQ(Down(g, b * t * cols), cpu);
  EXPECT_NE(cpu, x);
}

// With packed documents (doc_start, PackedStarts) and without.
TEST_P(CudaVsCpu, CausalConv) {
  for (auto [b, t, ch, w, docs] :
       {std::tuple<int64_t, int64_t, int64_t, int64_t, bool>{3, 133, 200, 4, false},
        {3, 133, 200, 4, true},
        {2, 70, 768, 4, false},
        {2, 70, 768, 4, true},
        {1, 5, 33, 7, false},
        {1, 37, 33, 7, true}}) {
    const std::string name =
        Case("CausalConv/" + std::to_string(b) + "x" + std::to_string(t) + "x" +
             std::to_string(ch) + "w" + std::to_string(w) + (docs ? "/documents" : ""));
    const int64_t n = b * t * ch;
    const Vec x = RandomAct(n), wt = Random(ch * w, 0.5f), dy = RandomAct(n), dx = RandomAct(n),
              dw = Random(ch * w, 5.f);
    const std::vector<int32_t> starts = PackedStarts(b, t);
    const int32_t* cpu_starts = docs ? starts.data() : nullptr;
    const int32_t* gpu_starts = docs ? UpInts(starts) : nullptr;
    Vec out_cpu(n), dx_cpu = dx, dw_cpu = dw;
    cpu_->CausalConvForward(HostAct(x), wt.data(), HostAct(out_cpu), b, t, ch, w, cpu_starts);
    cpu_->CausalConvBackward(HostAct(x), wt.data(), HostAct(dy), HostAct(dx_cpu), dw_cpu.data(), b,
                             t, ch, w, cpu_starts);
    const Act g_x = UpAct(x), g_out = PoisonedAct(n), g_dx = UpAct(dx);
    float *g_w = Up(wt), *g_dw = Up(dw);
    gpu_->CausalConvForward(g_x, g_w, g_out, b, t, ch, w, gpu_starts);
    gpu_->CausalConvBackward(g_x, g_w, UpAct(dy), g_dx, g_dw, b, t, ch, w, gpu_starts);
    Expect(name, "fwd", RelErr(DownAct(g_out, n), out_cpu), Tol(kExact, kBf16Out));
    Expect(name, "d_x", RelErr(DownAct(g_dx, n), dx_cpu), Tol(kExact, kBf16Out));
    Expect(name, "d_weight", RelErr(Down(g_dw, ch * w), dw_cpu), Tol(kExact, kBf16F32Out));
  }
}

// Context parallelism: the tail terms of a slice's convolution backward (with and without the
// tail before it and the next slice's gradient).
TEST_P(CudaVsCpu, CausalConvTailBackward) {
  for (auto [b, t, ch, w, with_tail] :
       {std::tuple<int64_t, int64_t, int64_t, int64_t, bool>{3, 64, 200, 4, true},
        {2, 3, 768, 4, true},
        {1, 9, 33, 7, true},
        {2, 64, 96, 4, false}}) {
    const std::string name =
        Case("CausalConvTailBackward/" + std::to_string(b) + "x" + std::to_string(t) + "x" +
             std::to_string(ch) + "w" + std::to_string(w) + (with_tail ? "" : "/first"));
    const int64_t n = b * t * ch, nt = b * (w - 1) * ch;
    const Vec tail = Random(nt), d_tail_out = Random(nt), wt = Random(ch * w, 0.5f),
              dy = RandomAct(n), dx = RandomAct(n), dw = Random(ch * w, 5.f);
    Vec dx_cpu = dx, dw_cpu = dw, dtail_cpu(nt);
    ASSERT_TRUE(cpu_->CausalConvTailBackward(with_tail ? tail.data() : nullptr, d_tail_out.data(),
                                             wt.data(), HostAct(dy), HostAct(dx_cpu),
                                             with_tail ? dtail_cpu.data() : nullptr, dw_cpu.data(),
                                             b, t, ch, w)
                    .ok());
    const Act g_dx = UpAct(dx);
    float *g_dw = Up(dw), *g_dtail = Poisoned(nt);
    ASSERT_TRUE(gpu_->CausalConvTailBackward(with_tail ? Up(tail) : nullptr, Up(d_tail_out), Up(wt),
                                             UpAct(dy), g_dx, with_tail ? g_dtail : nullptr, g_dw,
                                             b, t, ch, w)
                    .ok());
    Expect(name, "d_x", RelErr(DownAct(g_dx, n), dx_cpu), Tol(kExact, kBf16Out));
    Expect(name, "d_weight", RelErr(Down(g_dw, ch * w), dw_cpu), Tol(kExact, kBf16F32Out));
    if (with_tail) {
      Expect(name, "d_tail", RelErr(Down(g_dtail, nt), dtail_cpu), Tol(kExact, kBf16F32Out));
    }
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

  // The biases and gates in one launch = BiasForward twice, then GatesForward: bit for bit
  // against those three kernels on the GPU, and against the CPU backend (which runs exactly
  // those) within the rounding of the biased pre-activations to the activation type. Also with
  // no forget-gate bias; the biased pre-activations are kept, as BiasForward leaves them.
  const int64_t heads = 6, rows = 2057, nb = rows * heads;
  const Vec a_bias = Random(heads, 2.f), b_bias = Random(heads, 2.f);
  const Vec a6(a.begin(), a.begin() + nb), b6(b.begin(), b.begin() + nb);
  for (const bool with_a_bias : {true, false}) {
    Vec ab_cpu = a6, bb_cpu = b6, beta_b(nb), lg_b(nb);
    cpu_->BiasGatesForward(HostAct(ab_cpu), with_a_bias ? a_bias.data() : nullptr, HostAct(bb_cpu),
                           b_bias.data(), beta_b.data(), lg_b.data(), rows, heads, cap);
    const float* g_a_bias = with_a_bias ? Up(a_bias) : nullptr;
    const float* g_b_bias = Up(b_bias);
    const Act g_ab = UpAct(a6), g_bb = UpAct(b6), s_ab = UpAct(a6), s_bb = UpAct(b6);
    float *g_beta_b = Poisoned(nb), *g_lg_b = Poisoned(nb);
    float *s_beta = Poisoned(nb), *s_lg = Poisoned(nb);
    gpu_->BiasGatesForward(g_ab, g_a_bias, g_bb, g_b_bias, g_beta_b, g_lg_b, rows, heads, cap);
    if (with_a_bias) gpu_->BiasForward(s_ab, g_a_bias, rows, heads);
    gpu_->BiasForward(s_bb, g_b_bias, rows, heads);
    gpu_->GatesForward(s_ab, s_bb, s_beta, s_lg, nb, cap);
    const std::string what = with_a_bias ? "BiasGates" : "BiasGates (no a bias)";
    Expect(Case(what), "beta vs 3 kernels", RelErr(Down(g_beta_b, nb), Down(s_beta, nb)), 0.0);
    Expect(Case(what), "log_gamma vs 3 kernels", RelErr(Down(g_lg_b, nb), Down(s_lg, nb)), 0.0);
    Expect(Case(what), "a_pre vs 3 kernels", RelErr(DownAct(g_ab, nb), DownAct(s_ab, nb)), 0.0);
    Expect(Case(what), "b_pre vs 3 kernels", RelErr(DownAct(g_bb, nb), DownAct(s_bb, nb)), 0.0);
    Expect(Case(what), "beta", RelErr(Down(g_beta_b, nb), beta_b), Tol(kExact, kBf16Out));
    Expect(Case(what), "log_gamma", RelErr(Down(g_lg_b, nb), lg_b), Tol(kExact, kBf16Out));
    Expect(Case(what), "a_pre", RelErr(DownAct(g_ab, nb), ab_cpu), Tol(kExact, kBf16Out));
    Expect(Case(what), "b_pre", RelErr(DownAct(g_bb, nb), bb_cpu), Tol(kExact, kBf16Out));
  }

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

  // Rows of gate | up (one GEMM's output): bit for bit the per-row SwiGluForward on the GPU,
  // and the CPU backend's (which runs exactly that) within the activations' rounding.
  const int64_t gu_rows = 37, f = 2304;
  const Vec gu = RandomAct(gu_rows * 2 * f, 2.f);
  Vec hr_cpu(gu_rows * f);
  cpu_->SwiGluRowsForward(HostAct(gu), HostAct(hr_cpu), gu_rows, f);
  const Act g_gu = UpAct(gu), g_hr = PoisonedAct(gu_rows * f), g_hs = PoisonedAct(gu_rows * f);
  gpu_->SwiGluRowsForward(g_gu, g_hr, gu_rows, f);
  for (int64_t r = 0; r < gu_rows; ++r) {
    gpu_->SwiGluForward(gpu_->ActAt(g_gu, 2 * f * r), gpu_->ActAt(g_gu, 2 * f * r + f),
                        gpu_->ActAt(g_hs, f * r), f);
  }
  Expect(Case("SwiGluRows"), "vs per row",
         RelErr(DownAct(g_hr, gu_rows * f), DownAct(g_hs, gu_rows * f)), 0.0);
  Expect(Case("SwiGluRows"), "fwd", RelErr(DownAct(g_hr, gu_rows * f), hr_cpu),
         Tol(kExact, kBf16Out));
}

// The gates from the normed input (two projections, biases, gates): one kernel up to the fused
// row limit (decoding), two GEMMs and BiasGatesForward past it; both against the CPU backend's
// composite, with and without a forget gate, the weights in the CacheWeights buffer (as in the
// model; the fused kernel reads them there).
// Hawk's ops: the GeLU gate (elementwise) and the block-diagonal gate GEMMs (one GEMM per block
// over column slices: 6 blocks of 160 in Hawk-small).
TEST_P(CudaVsCpu, HawkGeluGateAndBlockDiagonalLinear) {
  const int64_t n = 100003;
  const Vec y = RandomAct(n, 2.f), x = RandomAct(n), d = RandomAct(n);
  Vec out_cpu(n), dy_cpu(n), dx_cpu(n);
  cpu_->GeluGateForward(HostAct(y), HostAct(x), HostAct(out_cpu), n);
  cpu_->GeluGateBackward(HostAct(y), HostAct(x), HostAct(d), HostAct(dy_cpu), HostAct(dx_cpu), n);
  const Act g_y = UpAct(y), g_x = UpAct(x), g_out = PoisonedAct(n), g_dy = PoisonedAct(n),
            g_dx = PoisonedAct(n);
  gpu_->GeluGateForward(g_y, g_x, g_out, n);
  gpu_->GeluGateBackward(g_y, g_x, UpAct(d), g_dy, g_dx, n);
  Expect(Case("GeluGate"), "fwd", RelErr(DownAct(g_out, n), out_cpu), Tol(kExact, kBf16Out));
  Expect(Case("GeluGate"), "d_y", RelErr(DownAct(g_dy, n), dy_cpu), Tol(kExact, kBf16Out));
  Expect(Case("GeluGate"), "d_x", RelErr(DownAct(g_dx, n), dx_cpu), Tol(kExact, kBf16Out));
  // Mamba-2's SiLU (elementwise, like the gate).
  Vec silu_cpu(n), dsilu_cpu(n);
  cpu_->SiluForward(HostAct(y), HostAct(silu_cpu), n);
  cpu_->SiluBackward(HostAct(y), HostAct(d), HostAct(dsilu_cpu), n);
  const Act g_silu = PoisonedAct(n), g_dsilu = PoisonedAct(n);
  gpu_->SiluForward(g_y, g_silu, n);
  gpu_->SiluBackward(g_y, UpAct(d), g_dsilu, n);
  Expect(Case("Silu"), "fwd", RelErr(DownAct(g_silu, n), silu_cpu), Tol(kExact, kBf16Out));
  Expect(Case("Silu"), "d_x", RelErr(DownAct(g_dsilu, n), dsilu_cpu), Tol(kExact, kBf16Out));

  ctl_->SetGemmMath(GemmMath::kFp32);
  const double tol = bf16() ? kBf16Gemm : GemmTol(GemmMath::kFp32);
  for (auto [m, blocks, width] :
       {std::tuple<int64_t, int64_t, int64_t>{1000, 6, 160}, {333, 3, 24}}) {
    const std::string name = Case("BlockDiagonalLinear/" + std::to_string(m) + "x" +
                                  std::to_string(blocks) + "x" + std::to_string(width));
    const int64_t k = blocks * width, wn = blocks * width * width;
    const Vec in = RandomAct(m * k), w = Representable(Random(wn, 0.05f)), acc = RandomAct(m * k);
    Vec out_cpu2 = acc;
    cpu_->BlockDiagonalLinearForward(HostAct(in), w.data(), HostAct(out_cpu2), m, blocks, width,
                                     true);
    const Act g_in = UpAct(in), g_acc = UpAct(acc);
    const float* g_w = Up(w);
    gpu_->BlockDiagonalLinearForward(g_in, g_w, g_acc, m, blocks, width, true);
    Expect(name, "fwd_accum", RelErr(DownAct(g_acc, m * k), out_cpu2), tol);
    const Vec dy = RandomAct(m * k), dw = Random(wn);
    Vec dx_cpu2(m * k), dw_cpu = dw;
    cpu_->BlockDiagonalLinearBackward(HostAct(in), w.data(), HostAct(dy), HostAct(dx_cpu2),
                                      dw_cpu.data(), m, blocks, width, false);
    const Act g_dx2 = PoisonedAct(m * k);
    float* g_dw = Up(dw);
    gpu_->BlockDiagonalLinearBackward(g_in, g_w, UpAct(dy), g_dx2, g_dw, m, blocks, width, false);
    Expect(name, "d_in", RelErr(DownAct(g_dx2, m * k), dx_cpu2), tol);
    Expect(name, "d_weight", RelErr(Down(g_dw, wn), dw_cpu), tol);
  }
}

TEST_P(CudaVsCpu, GateProjections) {
  if (!bf16()) ctl_->SetGemmMath(GemmMath::kFp32);  // the fallback's GEMMs as exact as the CPU's
  const int64_t in = 768, heads = 6, cap_rows = 300;
  const float cap = 0.5f;
  // Parameter buffer: a weight, a bias, b weight, b bias (64-float aligned, as ParamLayout).
  const int64_t wa = 64, ba = wa + heads * in, wb = ba + 64, bb = wb + heads * in;
  Vec params = Representable(Random(bb + 64, 0.05f));
  float* g_params = Up(params);
  gpu_->CacheWeights(g_params, static_cast<int64_t>(params.size()));
  for (const bool forget_gate : {true, false}) {
    for (const int64_t rows : {int64_t{1}, int64_t{37}, cap_rows}) {
      const std::string what =
          Case("GateProjections/" + std::to_string(rows) + (forget_gate ? "" : "/no forget gate"));
      const int64_t n = rows * heads;
      const Vec ln = RandomAct(rows * in);
      Vec a_cpu(n), b_cpu(n), beta_cpu(n), lg_cpu(n);
      cpu_->GateProjectionsForward(HostAct(ln), forget_gate ? params.data() + wa : nullptr,
                                   forget_gate ? params.data() + ba : nullptr, params.data() + wb,
                                   params.data() + bb, HostAct(a_cpu), HostAct(b_cpu),
                                   beta_cpu.data(), lg_cpu.data(), rows, in, heads, cap);
      const Act g_a = PoisonedAct(n), g_b = PoisonedAct(n);
      float *g_beta = Poisoned(n), *g_lg = Poisoned(n);
      gpu_->GateProjectionsForward(UpAct(ln), forget_gate ? g_params + wa : nullptr,
                                   forget_gate ? g_params + ba : nullptr, g_params + wb,
                                   g_params + bb, g_a, g_b, g_beta, g_lg, rows, in, heads, cap);
      Expect(what, "a_pre", RelErr(DownAct(g_a, n), a_cpu), Tol(kExact, kBf16Out));
      Expect(what, "b_pre", RelErr(DownAct(g_b, n), b_cpu), Tol(kExact, kBf16Out));
      Expect(what, "beta", RelErr(Down(g_beta, n), beta_cpu), Tol(kExact, kBf16Out));
      Expect(what, "log_gamma", RelErr(Down(g_lg, n), lg_cpu), Tol(kExact, kBf16Out));
    }
  }
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

// Sampling on the device against the CPU backend's (model::SampleToken on the same representable
// logits): greedy rows agree exactly; sampled rows (temperature, top-k, top-p, ties at the cut)
// agree on all but a few rows, where float sums at a boundary may round differently; the chosen
// tokens' log-probabilities match.
TEST_P(CudaVsCpu, SoftcapSample) {
  const int64_t rows = 64, v = 50257, ld = 50304;
  Vec strided(rows * ld, NAN);
  {
    const Vec logits = RandomAct(rows * v, 6.f);
    for (int64_t r = 0; r < rows; ++r) {
      std::copy(logits.begin() + r * v, logits.begin() + (r + 1) * v, strided.begin() + r * ld);
    }
  }
  // Ties at the top-k cut: row 5's ten best logits are equal.
  for (int j = 0; j < 10; ++j) strided[5 * ld + 100 + 7 * j] = 9.5f;
  strided[6 * ld + 17] = -INFINITY;  // a masked token
  const Act g_logits = UpAct(strided);
  const Vec rep = DownAct(g_logits, rows * ld);
  std::vector<SamplingRow> params(rows);
  for (int64_t r = 0; r < rows; ++r) {
    const int kind = static_cast<int>(r % 6);
    params[r] = {.temperature = kind == 0 ? 0.f : 0.5f + 0.25f * static_cast<float>(kind),
                 .top_k = kind == 2 ? 40 : (kind == 5 ? 4 : 0),
                 .top_p = kind == 3 ? 0.9f : (kind == 4 ? 0.5f : 1.f),
                 .seed = static_cast<uint64_t>(1000 + r),
                 .draw = static_cast<uint64_t>(r * 7)};
  }
  for (const float cap : {30.f, 0.f}) {
    const std::string name = Case("SoftcapSample/cap" + std::to_string(static_cast<int>(cap)));
    std::vector<int32_t> tok_cpu(rows), tok_gpu(rows);
    Vec lp_cpu(rows), lp_gpu(rows);
    cpu_->SoftcapSample(HostAct(rep), rows, v, ld, cap, params.data(), tok_cpu.data(),
                        lp_cpu.data());
    gpu_->SoftcapSample(g_logits, rows, v, ld, cap, params.data(), tok_gpu.data(), lp_gpu.data());
    int64_t greedy_mismatch = 0, mismatch = 0;
    Vec lp_cpu_same, lp_gpu_same;
    for (int64_t r = 0; r < rows; ++r) {
      if (tok_cpu[r] != tok_gpu[r]) {
        (params[r].temperature == 0.f ? greedy_mismatch : mismatch) += 1;
        continue;
      }
      lp_cpu_same.push_back(lp_cpu[r]);
      lp_gpu_same.push_back(lp_gpu[r]);
    }
    Expect(name, "greedy_mismatches", static_cast<double>(greedy_mismatch), 0.0);
    Expect(name, "sampled_mismatches", static_cast<double>(mismatch), 2.0);
    Expect(name, "logprob", RelErr(lp_gpu_same, lp_cpu_same), 1e-4);
  }
  // The draw follows the seed: many draws of one row (top-p 0.9, T 1) against the CPU's.
  {
    const int64_t draws = 256;
    std::vector<SamplingRow> same(
        draws, {.temperature = 1.f, .top_k = 0, .top_p = 0.9f, .seed = 77, .draw = 0});
    for (int64_t d = 0; d < draws; ++d) same[d].draw = static_cast<uint64_t>(d);
    Vec one(draws * ld, NAN);
    for (int64_t d = 0; d < draws; ++d) {
      std::copy(rep.begin() + 9 * ld, rep.begin() + 10 * ld, one.begin() + d * ld);
    }
    const Act g_one = UpAct(one);
    const Vec one_rep = DownAct(g_one, draws * ld);
    std::vector<int32_t> tok_cpu(draws), tok_gpu(draws);
    Vec lp_cpu(draws), lp_gpu(draws);
    cpu_->SoftcapSample(HostAct(one_rep), draws, v, ld, 30.f, same.data(), tok_cpu.data(),
                        lp_cpu.data());
    gpu_->SoftcapSample(g_one, draws, v, ld, 30.f, same.data(), tok_gpu.data(), lp_gpu.data());
    int64_t mismatch = 0;
    for (int64_t d = 0; d < draws; ++d) mismatch += tok_cpu[d] != tok_gpu[d];
    Expect(Case("SoftcapSample/draws"), "mismatches", static_cast<double>(mismatch), 3.0);
  }
}

TEST_P(CudaVsCpu, SoftcapCrossEntropy) {
  // With the soft-cap, and without it (cap 0: FLA's MesaNet, what mesa-export needs).
  for (const float cap : {30.f, 0.f}) {
    const int64_t rows = 67, v = 50257;
    const int32_t bos = 50256;
    const Vec logits = RandomAct(rows * v, 20.f);  // large enough for the soft-cap to bend
    std::vector<int32_t> targets(rows);
    std::uniform_int_distribution<int32_t> tok(0, v - 1);
    for (auto& t : targets) t = tok(rng_);
    targets[3] = bos;
    targets[10] = bos;
    Vec losses_cpu(rows);
    const double sum_cpu = cpu_->SoftcapCrossEntropyForward(
        HostAct(logits), targets.data(), losses_cpu.data(), rows, v, v, cap, bos);
    Vec grad_cpu = logits;
    cpu_->SoftcapCrossEntropyBackward(HostAct(grad_cpu), targets.data(), losses_cpu.data(), rows, v,
                                      v, cap, bos, 0.01f);
    int32_t* g_t = UpInts(targets);
    // Dense rows, then MesaNet's padded rows (ld = 50304) with NaN in the padding: reading it would
    // poison the row's loss; writing it is caught below.
    for (int64_t ld : {v, (v + 63) / 64 * 64}) {
      const std::string name = Case("SoftcapCE/cap" + std::to_string(static_cast<int>(cap)) +
                                    "/ld" + std::to_string(ld));
      Vec strided(rows * ld, NAN);
      for (int64_t r = 0; r < rows; ++r) {
        std::copy(logits.begin() + r * v, logits.begin() + (r + 1) * v, strided.begin() + r * ld);
      }
      const Act g_logits = UpAct(strided);
      // Greedy choice on the device against the CPU's on the same (representable) logits: the same
      // tokens (ties are unlikely in random rows) and log-probabilities.
      {
        const Vec rep = DownAct(g_logits, rows * ld);
        std::vector<int32_t> tok_cpu(rows), tok_gpu(rows);
        Vec lp_cpu(rows), lp_gpu(rows);
        cpu_->SoftcapArgmax(HostAct(rep), rows, v, ld, cap, tok_cpu.data(), lp_cpu.data());
        gpu_->SoftcapArgmax(g_logits, rows, v, ld, cap, tok_gpu.data(), lp_gpu.data());
        Expect(name, "argmax_mismatches",
               static_cast<double>(rows - std::inner_product(tok_cpu.begin(), tok_cpu.end(),
                                                             tok_gpu.begin(), int64_t{0},
                                                             std::plus<>(), std::equal_to<>())),
               0.0);
        Expect(name, "argmax_logprob", RelErr(lp_gpu, lp_cpu), 1e-4);
      }
      float* g_losses = Poisoned(rows);
      const double sum_gpu =
          gpu_->SoftcapCrossEntropyForward(g_logits, g_t, g_losses, rows, v, ld, cap, bos);
      Expect(name, "loss_sum", std::abs(sum_gpu - sum_cpu) / std::abs(sum_cpu),
             Tol(1e-5, kBf16F32Out));
      Expect(name, "losses", RelErr(Down(g_losses, rows), losses_cpu), Tol(1e-5, kBf16F32Out));
      // From the GPU forward's losses, as MesaNet calls it.
      gpu_->SoftcapCrossEntropyBackward(g_logits, g_t, g_losses, rows, v, ld, cap, bos, 0.01f);
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
}

}  // namespace
}  // namespace mesa::model::cuda_test
