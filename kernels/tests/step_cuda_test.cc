// GPU test (tags gpu/manual) of the fused single-token decoding steps: MesaStepDevice,
// DeltaStepDevice and CausalConvAppendDevice against their CPU counterparts
// (kernels/mesa/step.h, kernels/deltanet/step.h, kernels/conv/causal_conv_step.h) on fresh
// random inputs and states, several tokens in a row, fp32 and bf16 token tensors (the CPU gets
// the same bf16-rounded values), outputs poisoned with NaN first; then 10 steps of each kernel
// captured in one CUDA graph and replayed must give the bits of the direct calls.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/cuda/cuda_host_util.h"
#include "kernels/conv/causal_conv_step.h"
#include "kernels/conv/cuda/causal_conv_step_cuda.h"
#include "kernels/deltanet/cuda/step_cuda.h"
#include "kernels/deltanet/step.h"
#include "kernels/mesa/cuda/mesa_step_cuda.h"
#include "kernels/mesa/cuda/mesa_step_kernels.h"
#include "kernels/mesa/step.h"

namespace mesa::kernels::cuda {
namespace {

using deltanet::DeltaStepDims;
using deltanet::DeltaStepInputs;
using deltanet::cuda::DeltaStepDevice;
using deltanet::cuda::DeltaStepDeviceInputs;

// Device memory, freed on destruction. Poison() fills it with 0xFF bytes (NaN as fp32 and bf16).
struct Dev {
  void* p = nullptr;
  size_t bytes = 0;
  explicit Dev(size_t n) : bytes(std::max<size_t>(n, 16)) { CHECK_CUDA(cudaMalloc(&p, bytes)); }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  float* f() const { return static_cast<float*>(p); }
  void Poison() const { CHECK_CUDA(cudaMemset(p, 0xFF, bytes)); }
};

Dev* Upload(const std::vector<float>& x, bool bf16 = false) {
  Dev* d = new Dev(DeviceBytes(x.size(), bf16));
  CopyToDevice(d->p, x, bf16);
  return d;
}

std::vector<float> Download(const void* p, size_t n, bool bf16 = false) {
  std::vector<float> out(n);
  if (bf16) {
    std::vector<__nv_bfloat16> h(n);
    CHECK_CUDA(cudaMemcpy(h.data(), p, n * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; ++i) out[i] = __bfloat162float(h[i]);
  } else {
    CHECK_CUDA(cudaMemcpy(out.data(), p, n * 4, cudaMemcpyDeviceToHost));
  }
  return out;
}

void RoundBf16(std::vector<float>& x) {
  for (auto& v : x) v = __bfloat162float(__float2bfloat16(v));
}

double RelErr(const std::vector<float>& x, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i])) return INFINITY;
    num += (x[i] - double(ref[i])) * (x[i] - double(ref[i]));
    den += double(ref[i]) * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

struct Rng {
  std::mt19937 gen;
  std::normal_distribution<float> n{0.f, 1.f};
  std::uniform_real_distribution<float> u{0.f, 1.f};
  explicit Rng(uint32_t seed) : gen(seed) {}
  std::vector<float> Normal(size_t count, float scale = 1.f) {
    std::vector<float> x(count);
    for (auto& v : x) v = scale * n(gen);
    return x;
  }
  std::vector<float> Uniform(size_t count, float lo, float hi) {
    std::vector<float> x(count);
    for (auto& v : x) v = lo + (hi - lo) * u(gen);
    return x;
  }
  // rows of length d with unit L2 norm (as the model's normalised q and k).
  std::vector<float> UnitRows(size_t rows, int64_t d) {
    std::vector<float> x = Normal(rows * d);
    for (size_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (int64_t i = 0; i < d; ++i) ss += double(x[r * d + i]) * x[r * d + i];
      for (int64_t i = 0; i < d; ++i) x[r * d + i] /= static_cast<float>(std::sqrt(ss));
    }
    return x;
  }
  std::vector<float> LogGamma(size_t count) {  // gamma in [0.8, 1)
    std::vector<float> x = Uniform(count, 0.8f, 0.9999f);
    for (auto& v : x) v = std::log(v);
    return x;
  }
  // A Mesa key state: per (sequence, head), H = sum of 8 beta k k^T (symmetric PSD).
  std::vector<float> KeyState(int64_t rows, int64_t d) {
    std::vector<float> h(rows * d * d, 0.f);
    for (int64_t r = 0; r < rows; ++r) {
      const std::vector<float> ks = UnitRows(8, d);
      for (int m = 0; m < 8; ++m) {
        const float b = u(gen);
        for (int64_t i = 0; i < d; ++i) {
          for (int64_t j = 0; j < d; ++j)
            h[(r * d + i) * d + j] += b * ks[m * d + i] * ks[m * d + j];
        }
      }
    }
    return h;
  }
};

// One token's inputs of a Mesa or DeltaNet step.
struct Token {
  std::vector<float> q, k, v, beta, lg;

  void CopyTo(bool bf16, const Dev& dq, const Dev& dk, const Dev& dv, const Dev& dlg,
              const Dev& dbeta) const {
    CopyToDevice(dq.p, q, bf16);
    CopyToDevice(dk.p, k, bf16);
    CopyToDevice(dv.p, v, bf16);
    CopyToDevice(dlg.p, lg, false);
    CopyToDevice(dbeta.p, beta, false);
  }
};

Token MakeToken(Rng& rng, int64_t rows, int64_t d, bool bf16) {
  Token t{rng.UnitRows(rows, d), rng.UnitRows(rows, d), rng.Normal(rows * d),
          rng.Uniform(rows, 0.05f, 1.f), rng.LogGamma(rows)};
  if (bf16) {
    RoundBf16(t.q);
    RoundBf16(t.k);
    RoundBf16(t.v);
  }
  return t;
}

struct Dims3 {
  int64_t b, h, d;
};
const Dims3 kDims[] = {{1, 2, 16}, {2, 3, 32},  {3, 2, 48},  {2, 4, 64},
                       {1, 2, 80}, {2, 3, 128}, {1, 16, 128}};
constexpr int kTokens = 3;

std::string Name(const Dims3& s, bool bf16) {
  return "B" + std::to_string(s.b) + " H" + std::to_string(s.h) + " D" + std::to_string(s.d) +
         (bf16 ? " bf16" : " fp32");
}

void CheckMesaStepVariant(int variant) {
  struct Mode {
    const char* name;
    CgOptions cg;
    bool with_h;
  };
  const Mode modes[] = {{"fixed30", {30, 0.f}, true},
                        {"tol1e-4", {30, 1e-4f}, true},
                        {"tol1e-3/12", {12, 1e-3f}, true},
                        {"gla", {0, 0.f}, true},
                        {"gla-no-h", {0, 0.f}, false}};
  uint32_t seed = 1 + 100 * variant;  // fresh inputs for each variant
  double worst_o[2] = {0, 0}, worst_qs = 0, worst_state = 0, worst_normed[2] = {0, 0};
  int step_diffs = 0, step_total = 0;
  for (const Dims3& s : kDims) {
    for (bool bf16 : {false, true}) {
      for (const Mode& mode : modes) {
        const std::string what = Name(s, bf16) + " " + mode.name;
        Rng rng(seed++);
        const int64_t rows = s.b * s.h, tok = rows * s.d;
        const MesaStepDims dims{s.b, s.h, s.d};
        const std::vector<float> lambda = rng.Uniform(s.h * s.d, 0.25f, 1.f);
        std::vector<float> h = rng.KeyState(rows, s.d), g = rng.Normal(rows * s.d * s.d, 0.3f);
        // The fused head norm (as the model's o_norm: weight [D], eps 1e-5).
        const std::vector<float> norm_weight = rng.Uniform(s.d, 0.5f, 1.5f);
        constexpr float kEps = 1e-5f;
        std::unique_ptr<Dev> dl(Upload(lambda)), dh(Upload(h)), dg(Upload(g)),
            dnw(Upload(norm_weight));
        Dev dq(tok * 4), dk(tok * 4), dv(tok * 4), dlg(rows * 4), dbeta(rows * 4), dout(tok * 4),
            dqs(tok * 4), dsteps(rows * 4), dnormed(tok * 4);
        for (int t = 0; t < kTokens; ++t) {
          const Token in = MakeToken(rng, rows, s.d, bf16);
          std::vector<float> o(tok), qs(tok);
          std::vector<int32_t> steps(rows);
          ASSERT_TRUE(cpu::MesaStep({dims, in.q, in.k, in.v, in.lg, in.beta, lambda}, mode.cg,
                                    {mode.with_h ? std::span<float>(h) : std::span<float>(), g},
                                    {o, qs, steps})
                          .ok());
          in.CopyTo(bf16, dq, dk, dv, dlg, dbeta);
          dout.Poison();
          dqs.Poison();
          dsteps.Poison();
          dnormed.Poison();
          const absl::Status st = MesaStepDeviceVariant(
              variant, dims, mode.cg,
              {bf16 ? DType::kBF16 : DType::kF32, dq.p, dk.p, dv.p, dlg.f(), dbeta.f(), dl->f()},
              {mode.with_h ? dh->f() : nullptr, dg->f()},
              {dout.p, dqs.f(), static_cast<int32_t*>(dsteps.p), dnormed.p, dnw->f(), kEps},
              nullptr);
          ASSERT_TRUE(st.ok()) << what << ": " << st;
          CHECK_CUDA(cudaDeviceSynchronize());
          const double eo = RelErr(Download(dout.p, tok, bf16), o);
          const double eq = RelErr(Download(dqs.p, tok), qs);
          std::vector<int32_t> got_steps(rows);
          CHECK_CUDA(cudaMemcpy(got_steps.data(), dsteps.p, rows * 4, cudaMemcpyDeviceToHost));
          worst_o[bf16] = std::max(worst_o[bf16], eo);
          worst_qs = std::max(worst_qs, eq);
          // The head norm of the CPU's o (rounded as stored), per (sequence, head) row.
          std::vector<float> normed(tok);
          for (int64_t r = 0; r < rows; ++r) {
            std::vector<float> orow(o.begin() + r * s.d, o.begin() + (r + 1) * s.d);
            if (bf16) RoundBf16(orow);
            double ss = 0;
            for (float x : orow) ss += double(x) * x;
            const float sc = static_cast<float>(1.0 / std::sqrt(ss / s.d + kEps));
            for (int64_t i = 0; i < s.d; ++i) normed[r * s.d + i] = orow[i] * sc * norm_weight[i];
          }
          const double en = RelErr(Download(dnormed.p, tok, bf16), normed);
          worst_normed[bf16] = std::max(worst_normed[bf16], en);
          EXPECT_LE(en, bf16 ? 1e-2 : 5e-4) << what << " token " << t << " o_normed";
          EXPECT_LE(eo, bf16 ? 1e-2 : 5e-4) << what << " token " << t << " o";
          EXPECT_LE(eq, 5e-4) << what << " token " << t << " q_star";
          for (int64_t r = 0; r < rows; ++r) {
            ++step_total;
            step_diffs += got_steps[r] != steps[r];
            if (mode.cg.tolerance > 0) {
              EXPECT_LE(std::abs(got_steps[r] - steps[r]), 1) << what << " row " << r;
            } else {
              EXPECT_EQ(got_steps[r], steps[r]) << what << " row " << r;
            }
          }
        }
        const double eh = mode.with_h ? RelErr(Download(dh->p, h.size()), h) : 0.0;
        const double eg = RelErr(Download(dg->p, g.size()), g);
        worst_state = std::max({worst_state, eh, eg});
        EXPECT_LE(eh, 1e-5) << what << " h";
        EXPECT_LE(eg, 1e-5) << what << " g";
      }
    }
  }
  std::printf(
      "Mesa step variant %d vs CPU: worst rel err o fp32 %.2e, o bf16 %.2e, q_star %.2e, states "
      "%.2e, head-normed o fp32 %.2e, bf16 %.2e; CG steps differ in %d of %d (sequence, head, "
      "token) rows\n",
      variant, worst_o[0], worst_o[1], worst_qs, worst_state, worst_normed[0], worst_normed[1],
      step_diffs, step_total);
}

// Every kernel variant (0 = the default) on every shape, dtype and CG mode.
TEST(MesaStepCuda, MatchesCpuStep) {
  for (int variant = 0; variant < kMesaStepVariants; ++variant) {
    SCOPED_TRACE("variant " + std::to_string(variant));
    CheckMesaStepVariant(variant);
  }
}

TEST(MesaStepCuda, RejectsBadArguments) {
  Dev buf(1 << 16);
  MesaStepDeviceInputs in{DType::kF32, buf.p, buf.p, buf.p, buf.f(), buf.f(), buf.f()};
  EXPECT_FALSE(MesaStepDevice({1, 1, 24}, {}, in, {buf.f(), buf.f()}, {buf.p}, nullptr).ok());
  EXPECT_FALSE(MesaStepDevice({1, 1, 64}, {}, in, {nullptr, buf.f()}, {buf.p}, nullptr).ok());
  EXPECT_FALSE(MesaStepDevice({1, 1, 64}, {}, in, {buf.f() + 1, buf.f()}, {buf.p}, nullptr).ok());
  EXPECT_FALSE(MesaStepDevice({1, 1, 64}, {}, in, {buf.f(), buf.f()}, {nullptr}, nullptr).ok());
  EXPECT_TRUE(MesaStepDevice({1, 1, 64}, {0, 0.f}, in, {nullptr, buf.f()}, {buf.p}, nullptr).ok());
  // The fused head norm: its weight is required, eps finite and >= 0, o_normed not o.
  const float* nw = buf.f();
  for (const MesaStepDeviceOutputs& bad :
       {MesaStepDeviceOutputs{buf.p, nullptr, nullptr, buf.f() + 64, nullptr, 1e-5f},
        MesaStepDeviceOutputs{buf.p, nullptr, nullptr, buf.f() + 64, nw, -1.f},
        MesaStepDeviceOutputs{buf.p, nullptr, nullptr, buf.f() + 64, nw, NAN},
        MesaStepDeviceOutputs{buf.p, nullptr, nullptr, buf.p, nw, 1e-5f}}) {
    EXPECT_EQ(MesaStepDevice({1, 1, 64}, {0, 0.f}, in, {nullptr, buf.f()}, bad, nullptr).code(),
              absl::StatusCode::kInvalidArgument);
  }
  CHECK_CUDA(cudaDeviceSynchronize());
}

TEST(DeltaStepCuda, MatchesCpuStep) {
  uint32_t seed = 1000;
  double worst_o[2] = {0, 0}, worst_s = 0;
  for (const Dims3& s : kDims) {
    for (bool bf16 : {false, true}) {
      for (bool gated : {false, true}) {
        const std::string what = Name(s, bf16) + (gated ? " gated" : " plain");
        Rng rng(seed++);
        const int64_t rows = s.b * s.h, tok = rows * s.d;
        const DeltaStepDims dims{s.b, s.h, s.d};
        std::vector<float> state = rng.Normal(rows * s.d * s.d, 0.3f);
        std::unique_ptr<Dev> ds(Upload(state));
        Dev dq(tok * 4), dk(tok * 4), dv(tok * 4), dlg(rows * 4), dbeta(rows * 4), dout(tok * 4);
        for (int t = 0; t < kTokens; ++t) {
          const Token in = MakeToken(rng, rows, s.d, bf16);
          std::vector<float> o(tok);
          DeltaStepInputs cin{dims, in.q, in.k, in.v, in.beta};
          if (gated) cin.log_gamma = in.lg;
          ASSERT_TRUE(deltanet::DeltaNetStep(cin, state, o).ok());
          in.CopyTo(bf16, dq, dk, dv, dlg, dbeta);
          dout.Poison();
          const absl::Status st = DeltaStepDevice(dims,
                                                  {bf16 ? DType::kBF16 : DType::kF32, dq.p, dk.p,
                                                   dv.p, dbeta.f(), gated ? dlg.f() : nullptr},
                                                  ds->f(), dout.p, nullptr);
          ASSERT_TRUE(st.ok()) << what << ": " << st;
          CHECK_CUDA(cudaDeviceSynchronize());
          const double eo = RelErr(Download(dout.p, tok, bf16), o);
          worst_o[bf16] = std::max(worst_o[bf16], eo);
          EXPECT_LE(eo, bf16 ? 1e-2 : 1e-5) << what << " token " << t << " o";
        }
        const double es = RelErr(Download(ds->p, state.size()), state);
        worst_s = std::max(worst_s, es);
        EXPECT_LE(es, 1e-5) << what << " s";
      }
    }
  }
  std::printf("DeltaNet step vs CPU: worst rel err o fp32 %.2e, o bf16 %.2e, state %.2e\n",
              worst_o[0], worst_o[1], worst_s);
}

TEST(CausalConvStepCuda, MatchesCpu) {
  struct Case {
    int64_t b, t, c, w;
  };
  const Case cases[] = {{1, 1, 64, 4}, {3, 1, 2048, 4}, {2, 5, 96, 3},
                        {2, 1, 33, 1}, {1, 7, 50, 8},   {2, 3, 40, 2}};
  uint32_t seed = 2000;
  int exact = 0, total = 0;
  for (const Case& k : cases) {
    for (bool bf16 : {false, true}) {
      const ConvDims dims{k.b, k.t, k.c, k.w};
      const std::string what = "B" + std::to_string(k.b) + " T" + std::to_string(k.t) + " C" +
                               std::to_string(k.c) + " W" + std::to_string(k.w) +
                               (bf16 ? " bf16" : " fp32");
      Rng rng(seed++);
      const std::vector<float> weight = rng.Normal(dims.WeightElems(), 0.5f);
      std::vector<float> tail = rng.Normal(dims.TailElems());
      if (bf16) RoundBf16(tail);
      std::unique_ptr<Dev> dw(Upload(weight)), dt(Upload(tail));
      Dev dx(dims.InputElems() * 4), dout(dims.InputElems() * 4);
      for (int piece = 0; piece < 2; ++piece) {
        std::vector<float> x = rng.Normal(dims.InputElems()), out(dims.InputElems());
        if (bf16) RoundBf16(x);
        ASSERT_TRUE(cpu::CausalConvAppend(dims, x, weight, tail, out).ok());
        CopyToDevice(dx.p, x, bf16);
        dout.Poison();
        const absl::Status st = CausalConvAppendDevice(dims, bf16 ? DType::kBF16 : DType::kF32,
                                                       dx.p, dw->f(), dt->f(), dout.p, nullptr);
        ASSERT_TRUE(st.ok()) << what << ": " << st;
        CHECK_CUDA(cudaDeviceSynchronize());
        const std::vector<float> got = Download(dout.p, out.size(), bf16);
        EXPECT_LE(RelErr(got, out), bf16 ? 1e-2 : 1e-6) << what;
        if (!bf16) {
          ++total;
          exact += std::memcmp(got.data(), out.data(), out.size() * 4) == 0;
        }
        if (!tail.empty()) {
          const std::vector<float> got_tail = Download(dt->p, tail.size());
          EXPECT_EQ(std::memcmp(got_tail.data(), tail.data(), tail.size() * 4), 0) << what;
        }
      }
    }
  }
  std::printf("Causal conv step vs CPU: fp32 outputs bit-identical in %d of %d calls\n", exact,
              total);
}

// Two convolutions in one launch (a layer's q and k paths): each equals its CPU step bit for bit
// (fp32), outputs and tails, over two appends; bad pairs are refused before any launch.
TEST(CausalConvStepCuda, PairMatchesCpu) {
  for (const ConvDims dims : {ConvDims{1, 1, 768, 4}, ConvDims{3, 5, 96, 3}}) {
    Rng rng(3000 + dims.seq_len);
    std::vector<float> weight[2], tail[2];
    std::unique_ptr<Dev> dw[2], dt[2];
    Dev dx(2 * dims.InputElems() * 4), dout(2 * dims.InputElems() * 4);
    for (int i = 0; i < 2; ++i) {
      weight[i] = rng.Normal(dims.WeightElems(), 0.5f);
      tail[i] = rng.Normal(dims.TailElems());
      dw[i].reset(Upload(weight[i]));
      dt[i].reset(Upload(tail[i]));
    }
    // The two inputs and outputs side by side in one buffer each, as q | k at one token.
    float* x1 = dx.f() + dims.InputElems();
    float* out1 = dout.f() + dims.InputElems();
    const ConvOperands first{dx.p, dw[0]->f(), dt[0]->f(), dout.p};
    const ConvOperands second{x1, dw[1]->f(), dt[1]->f(), out1};
    for (int piece = 0; piece < 2; ++piece) {
      std::vector<float> x = rng.Normal(2 * dims.InputElems()), out[2];
      CopyToDevice(dx.p, x, false);
      dout.Poison();
      ASSERT_TRUE(CausalConvAppendPairDevice(dims, DType::kF32, first, second, nullptr).ok());
      CHECK_CUDA(cudaDeviceSynchronize());
      const std::vector<float> got = Download(dout.p, x.size());
      for (int i = 0; i < 2; ++i) {
        const std::vector<float> xi(x.begin() + i * dims.InputElems(),
                                    x.begin() + (i + 1) * dims.InputElems());
        out[i].resize(xi.size());
        ASSERT_TRUE(cpu::CausalConvAppend(dims, xi, weight[i], tail[i], out[i]).ok());
        EXPECT_EQ(std::memcmp(got.data() + i * dims.InputElems(), out[i].data(), out[i].size() * 4),
                  0)
            << "conv " << i << " piece " << piece;
        const std::vector<float> got_tail = Download(dt[i]->p, tail[i].size());
        EXPECT_EQ(std::memcmp(got_tail.data(), tail[i].data(), tail[i].size() * 4), 0)
            << "tail " << i << " piece " << piece;
      }
    }
    // One output over the other's input; one tail shared; a missing weight (named by index).
    const ConvOperands onto_input{dx.p, dw[0]->f(), dt[0]->f(), x1};
    const ConvOperands same_tail{x1, dw[1]->f(), dt[0]->f(), out1};
    const ConvOperands no_weight{x1, nullptr, dt[1]->f(), out1};
    for (const auto& [a, b, message] :
         {std::tuple{onto_input, second, "overlaps"}, std::tuple{first, same_tail, "overlaps"},
          std::tuple{first, no_weight, "convolution 1: weight"}}) {
      const absl::Status s = CausalConvAppendPairDevice(dims, DType::kF32, a, b, nullptr);
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      EXPECT_NE(std::string(s.message()).find(message), std::string::npos) << s;
    }
  }
}

// 10 steps of each kernel (Mesa tolerance CG, Gated DeltaNet, the conv) called directly, then
// the same 10 steps captured in one graph on a stream and replayed from the same initial states:
// every output and final state must have the same bits.
TEST(StepKernels, CudaGraphReplayEqualsDirectCalls) {
  constexpr int kSteps = 10;
  const int64_t B = 2, H = 4, D = 64, rows = B * H, tok = rows * D;
  const ConvDims conv{B, 1, H * D, 4};
  const CgOptions cg{30, 1e-4f};
  Rng rng(3000);
  const std::vector<float> lambda = rng.Uniform(H * D, 0.25f, 1.f);
  const std::vector<float> h0 = rng.KeyState(rows, D), g0 = rng.Normal(rows * D * D, 0.3f),
                           s0 = rng.Normal(rows * D * D, 0.3f),
                           weight = rng.Normal(conv.WeightElems(), 0.5f),
                           tail0 = rng.Normal(conv.TailElems());
  std::unique_ptr<Dev> dl(Upload(lambda)), dw(Upload(weight));
  Dev dh(h0.size() * 4), dg(g0.size() * 4), ds(s0.size() * 4), dt(tail0.size() * 4);
  std::vector<std::unique_ptr<Dev>> q, k, v, lg, beta;
  for (int i = 0; i < kSteps; ++i) {
    const Token t = MakeToken(rng, rows, D, false);
    q.emplace_back(Upload(t.q));
    k.emplace_back(Upload(t.k));
    v.emplace_back(Upload(t.v));
    lg.emplace_back(Upload(t.lg));
    beta.emplace_back(Upload(t.beta));
  }
  // Per run: outputs of every step, then the final states.
  struct Run {
    std::vector<std::unique_ptr<Dev>> mesa_o, steps, delta_o, conv_o;
    std::vector<float> h, g, s, tail, all_o;
    std::vector<int32_t> all_steps;
  };
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  auto reset = [&] {
    CopyToDevice(dh.p, h0, false);
    CopyToDevice(dg.p, g0, false);
    CopyToDevice(ds.p, s0, false);
    CopyToDevice(dt.p, tail0, false);
    CHECK_CUDA(cudaDeviceSynchronize());  // the steps run on a non-blocking stream
  };
  auto enqueue = [&](Run& run) {
    for (int i = 0; i < kSteps; ++i) {
      ASSERT_TRUE(MesaStepDevice(
                      {B, H, D}, cg,
                      {DType::kF32, q[i]->p, k[i]->p, v[i]->p, lg[i]->f(), beta[i]->f(), dl->f()},
                      {dh.f(), dg.f()},
                      {run.mesa_o[i]->p, nullptr, static_cast<int32_t*>(run.steps[i]->p)}, stream)
                      .ok());
      ASSERT_TRUE(DeltaStepDevice(
                      {B, H, D}, {DType::kF32, q[i]->p, k[i]->p, v[i]->p, beta[i]->f(), lg[i]->f()},
                      ds.f(), run.delta_o[i]->p, stream)
                      .ok());
      ASSERT_TRUE(CausalConvAppendDevice(conv, DType::kF32, v[i]->p, dw->f(), dt.f(),
                                         run.conv_o[i]->p, stream)
                      .ok());
    }
  };
  auto collect = [&](Run& run) {
    CHECK_CUDA(cudaStreamSynchronize(stream));
    run.h = Download(dh.p, h0.size());
    run.g = Download(dg.p, g0.size());
    run.s = Download(ds.p, s0.size());
    run.tail = Download(dt.p, tail0.size());
    for (int i = 0; i < kSteps; ++i) {
      for (const Dev* d : {run.mesa_o[i].get(), run.delta_o[i].get(), run.conv_o[i].get()}) {
        const std::vector<float> o = Download(d->p, tok);
        for (float x : o) EXPECT_TRUE(std::isfinite(x));
        run.all_o.insert(run.all_o.end(), o.begin(), o.end());
      }
      std::vector<int32_t> st(rows);
      CHECK_CUDA(cudaMemcpy(st.data(), run.steps[i]->p, rows * 4, cudaMemcpyDeviceToHost));
      run.all_steps.insert(run.all_steps.end(), st.begin(), st.end());
    }
  };
  Run direct, graph;
  for (Run* run : {&direct, &graph}) {
    for (int i = 0; i < kSteps; ++i) {
      run->mesa_o.emplace_back(new Dev(tok * 4));
      run->steps.emplace_back(new Dev(rows * 4));
      run->delta_o.emplace_back(new Dev(tok * 4));
      run->conv_o.emplace_back(new Dev(tok * 4));
      for (const Dev* d : {run->mesa_o[i].get(), run->steps[i].get(), run->delta_o[i].get(),
                           run->conv_o[i].get()}) {
        d->Poison();
      }
    }
  }
  reset();
  enqueue(direct);
  collect(direct);

  reset();
  CHECK_CUDA(cudaDeviceSynchronize());
  cudaGraph_t g;
  CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  enqueue(graph);
  CHECK_CUDA(cudaStreamEndCapture(stream, &g));
  size_t nodes = 0;
  CHECK_CUDA(cudaGraphGetNodes(g, nullptr, &nodes));
  EXPECT_EQ(nodes, size_t(3 * kSteps));
  cudaGraphExec_t exec;
  CHECK_CUDA(cudaGraphInstantiate(&exec, g, 0));
  CHECK_CUDA(cudaGraphLaunch(exec, stream));
  collect(graph);

  EXPECT_EQ(direct.all_steps, graph.all_steps);
  EXPECT_EQ(std::memcmp(direct.all_o.data(), graph.all_o.data(), direct.all_o.size() * 4), 0);
  for (auto [a, b] : {std::pair{&direct.h, &graph.h},
                      {&direct.g, &graph.g},
                      {&direct.s, &graph.s},
                      {&direct.tail, &graph.tail}}) {
    EXPECT_EQ(std::memcmp(a->data(), b->data(), a->size() * 4), 0);
  }
  // The states moved: the replay did the work.
  EXPECT_GT(RelErr(graph.h, h0), 1e-3);
  double mean_steps = 0;
  for (int32_t x : graph.all_steps) mean_steps += x;
  std::printf(
      "graph of %zu kernel nodes replayed: outputs and states bit-identical to direct "
      "calls; mean CG steps %.2f (tolerance 1e-4, max 30)\n",
      nodes, mean_steps / graph.all_steps.size());
  CHECK_CUDA(cudaGraphExecDestroy(exec));
  CHECK_CUDA(cudaGraphDestroy(g));
  CHECK_CUDA(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace mesa::kernels::cuda
