// GPU test of the CUDA DeltaNet-family operator (tags gpu/manual): on fresh random inputs, every
// output and gradient against the float64 reference and against the CPU chunked op, relative
// error ||x - ref|| / ||ref|| per tensor (bf16 tensor-core operands: expected between 1e-3 and
// 1e-2). fp32 I/O through the host seam (outputs poisoned with NaN first) and bf16 I/O through
// the device API.
#include "kernels/deltanet/cuda/deltanet_cuda.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/cuda/cuda_host_util.h"
#include "kernels/deltanet/deltanet_op.h"

namespace mesa::kernels::deltanet::cuda {
namespace {

constexpr double kTol = 2e-2;

struct Problem {
  DeltaDims dims;
  bool gated = true;
  bool states = false;
  std::vector<int32_t> cu;
  std::vector<float> q, k, v, beta, lg, s0, d_o, ds_final;

  DeltaInputs Inputs() const {
    DeltaInputs in{.dims = dims, .q = q, .k = k, .v = v, .beta = beta};
    if (gated) in.log_gamma = lg;
    if (states) in.s0 = s0;
    in.cu_seqlens = cu;
    return in;
  }
};

Problem MakeProblem(int64_t b, int64_t t, int64_t h, int64_t d, bool gated, bool states,
                    std::vector<int32_t> cu, uint32_t seed) {
  Problem p;
  p.dims = {b, t, h, d};
  p.gated = gated;
  p.states = states;
  p.cu = std::move(cu);
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.f, 1.f);
  const int64_t tok = b * t * h;
  auto unit_rows = [&](std::vector<float>* x) {
    x->resize(tok * d);
    for (int64_t r = 0; r < tok; ++r) {
      double ss = 0;
      for (int64_t i = 0; i < d; ++i) ss += ((*x)[r * d + i] = n(rng)) * (*x)[r * d + i];
      for (int64_t i = 0; i < d; ++i) (*x)[r * d + i] /= static_cast<float>(std::sqrt(ss));
    }
  };
  unit_rows(&p.q);
  unit_rows(&p.k);
  p.v.resize(tok * d);
  p.d_o.resize(tok * d);
  for (auto& x : p.v) x = n(rng);
  for (auto& x : p.d_o) x = n(rng);
  p.beta.resize(tok);
  p.lg.resize(tok);
  for (auto& x : p.beta) x = 1.f / (1.f + std::exp(-n(rng)));
  for (auto& x : p.lg) x = -std::log1p(std::exp(-(n(rng) + 3.f)));  // logsigmoid, mostly near 0
  const int64_t nseq = p.cu.empty() ? b : static_cast<int64_t>(p.cu.size()) - 1;
  p.s0.resize(nseq * h * d * d);
  p.ds_final.resize(p.s0.size());
  for (auto& x : p.s0) x = 0.3f * n(rng);
  for (auto& x : p.ds_final) x = 0.3f * n(rng);
  return p;
}

double RelErr(const std::vector<float>& x, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i])) return INFINITY;
    num += (x[i] - ref[i]) * (x[i] - static_cast<double>(ref[i]));
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

struct Results {
  std::vector<float> o, s_final, dq, dk, dv, dbeta, dlg, ds0;
};

Results RunOp(const Problem& p, DeltaImpl impl) {
  DeltaOptions opt;
  opt.impl = impl;
  const DeltaInputs in = p.Inputs();
  auto f = DeltaNetForwardAlloc(in, opt, /*want_final_state=*/true);
  EXPECT_TRUE(f.ok()) << f.status();
  auto g = DeltaNetBackwardAlloc(
      in, p.d_o, opt, /*want_state_grad=*/true,
      p.states ? std::span<const float>(p.ds_final) : std::span<const float>());
  EXPECT_TRUE(g.ok()) << g.status();
  return {f->o, f->s_final, g->dq, g->dk, g->dv, g->dbeta, g->dlog_gamma, g->ds0};
}

// Through the op dispatcher (validation, then DeltaImpl::kCuda's host seam: outputs poisoned).
Results RunGpuHost(const Problem& p) { return RunOp(p, DeltaImpl::kCuda); }

void Compare(const std::string& what, const Results& got, const Results& ref, bool gated,
             double tol) {
  const std::pair<const char*, std::pair<const std::vector<float>*, const std::vector<float>*>>
      pairs[] = {{"o", {&got.o, &ref.o}},
                 {"s_final", {&got.s_final, &ref.s_final}},
                 {"dq", {&got.dq, &ref.dq}},
                 {"dk", {&got.dk, &ref.dk}},
                 {"dv", {&got.dv, &ref.dv}},
                 {"dbeta", {&got.dbeta, &ref.dbeta}},
                 {"dlog_gamma", {&got.dlg, &ref.dlg}},
                 {"ds0", {&got.ds0, &ref.ds0}}};
  std::string line = what + ":";
  for (const auto& [name, pr] : pairs) {
    if (!gated && std::string(name) == "dlog_gamma") continue;
    ASSERT_EQ(pr.first->size(), pr.second->size()) << what << " " << name;
    const double e = RelErr(*pr.first, *pr.second);
    char buf[64];
    std::snprintf(buf, sizeof(buf), " %s %.2e", name, e);
    line += buf;
    EXPECT_LE(e, tol) << what << " " << name;
  }
  std::printf("%s\n", line.c_str());
}

struct Case {
  int64_t b, t, h, d;
  bool gated, states;
  std::vector<int32_t> cu;
};

TEST(DeltaNetCuda, MatchesReferenceAndCpuChunked) {
  ASSERT_TRUE(DeviceAvailable().ok());
  const std::vector<int32_t> varlen = {0, 0, 1, 64, 64, 128, 193, 393, 393};
  const Case cases[] = {
      {2, 1, 2, 64, true, true, {}},         {2, 63, 2, 16, true, true, {}},
      {2, 64, 2, 64, false, false, {}},      {2, 65, 3, 128, true, true, {}},
      {1, 1000, 2, 128, true, true, {}},     {1, 1000, 2, 64, false, false, {}},
      {1, 300, 2, 96, true, false, {}},      {1, 393, 2, 64, true, true, varlen},
      {1, 393, 2, 128, false, true, varlen},
  };
  uint32_t seed = std::random_device{}();
  std::printf("seed %u\n", seed);
  for (const Case& c : cases) {
    const Problem p = MakeProblem(c.b, c.t, c.h, c.d, c.gated, c.states, c.cu, seed++);
    char name[128];
    std::snprintf(name, sizeof(name), "B%ld T%ld H%ld D%ld %s%s%s", c.b, c.t, c.h, c.d,
                  c.gated ? "gated" : "deltanet", c.states ? " states" : "",
                  c.cu.empty() ? "" : " varlen");
    const Results gpu = RunGpuHost(p);
    Compare(std::string(name) + " vs f64", gpu, RunOp(p, DeltaImpl::kReference), c.gated, kTol);
    Compare(std::string(name) + " vs cpu", gpu, RunOp(p, DeltaImpl::kChunked), c.gated, kTol);
  }
}

// Packed documents: the model resets the state at a document's first token with log γ = -30
// (model/mixers/qk_features.h, kResetLogGamma), also for ungated DeltaNet (log γ = 0 elsewhere).
// Such gates, within chunks and at their edges, against the float64 reference and the CPU.
TEST(DeltaNetCuda, ResetGatesMatchReferenceAndCpu) {
  ASSERT_TRUE(DeviceAvailable().ok());
  uint32_t seed = std::random_device{}();
  std::printf("seed %u\n", seed);
  for (bool zero_elsewhere : {false, true}) {
    Problem p = MakeProblem(1, 393, 2, 64, true, true, {}, seed++);
    if (zero_elsewhere) std::fill(p.lg.begin(), p.lg.end(), 0.f);
    for (int t : {1, 2, 63, 64, 100, 200, 392}) {
      for (int h = 0; h < 2; ++h) p.lg[t * 2 + h] = -30.f;
    }
    const std::string name = zero_elsewhere ? "resets, log gamma 0 elsewhere" : "resets";
    const Results gpu = RunGpuHost(p);
    Compare(name + " vs f64", gpu, RunOp(p, DeltaImpl::kReference), true, kTol);
    Compare(name + " vs cpu", gpu, RunOp(p, DeltaImpl::kChunked), true, kTol);
  }
}

TEST(DeltaNetCuda, GatedWithZeroGateEqualsDeltaNet) {
  Problem p = MakeProblem(1, 130, 2, 64, true, true, {}, 7);
  for (auto& x : p.lg) x = 0.f;
  const Results gated = RunGpuHost(p);
  p.gated = false;
  const Results plain = RunGpuHost(p);
  EXPECT_EQ(gated.o, plain.o);
  EXPECT_EQ(gated.s_final, plain.s_final);
  EXPECT_EQ(gated.dq, plain.dq);
  EXPECT_EQ(gated.dk, plain.dk);
  EXPECT_EQ(gated.dv, plain.dv);
  EXPECT_EQ(gated.dbeta, plain.dbeta);
  EXPECT_EQ(gated.ds0, plain.ds0);
}

// bf16 I/O through the device API (what the trainer uses), against the float64 reference.
TEST(DeltaNetCuda, Bf16DeviceApi) {
  const Problem p = MakeProblem(2, 300, 4, 128, true, false, {}, std::random_device{}());
  const Results ref = RunOp(p, DeltaImpl::kReference);
  using ::mesa::kernels::cuda::CopyToDevice;
  auto up = [](const std::vector<float>& x, bool bf) {
    void* ptr = nullptr;
    CHECK_CUDA(cudaMalloc(&ptr, x.size() * (bf ? 2 : 4)));
    CopyToDevice(ptr, x, bf);
    return ptr;
  };
  auto down_bf16 = [](const void* ptr, size_t n) {
    std::vector<__nv_bfloat16> h(n);
    CHECK_CUDA(cudaMemcpy(h.data(), ptr, n * 2, cudaMemcpyDeviceToHost));
    std::vector<float> f(n);
    for (size_t i = 0; i < n; ++i) f[i] = __bfloat162float(h[i]);
    return f;
  };
  auto down_f32 = [](const void* ptr, size_t n) {
    std::vector<float> f(n);
    CHECK_CUDA(cudaMemcpy(f.data(), ptr, n * 4, cudaMemcpyDeviceToHost));
    return f;
  };
  const size_t n = p.q.size(), ng = p.beta.size();
  DeviceInputs in{DType::kBF16,
                  up(p.q, true),
                  up(p.k, true),
                  up(p.v, true),
                  static_cast<const float*>(up(p.beta, false)),
                  static_cast<const float*>(up(p.lg, false)),
                  nullptr};
  void* o = up(std::vector<float>(n, NAN), true);
  Workspace ws;
  ASSERT_TRUE(
      ForwardDevice(p.dims, {}, in, {o, nullptr, /*keep_for_backward=*/true}, &ws, nullptr).ok());
  void* d_o = up(p.d_o, true);
  void* dq = up(std::vector<float>(n, NAN), true);
  void* dk = up(std::vector<float>(n, NAN), true);
  void* dv = up(std::vector<float>(n, NAN), true);
  float* dbeta = static_cast<float*>(up(std::vector<float>(ng, NAN), false));
  float* dlg = static_cast<float*>(up(std::vector<float>(ng, NAN), false));
  const DeviceGradients grads{dq, dk, dv, dbeta, dlg, nullptr};
  ASSERT_TRUE(
      BackwardDevice(p.dims, {}, in, {d_o, nullptr, /*reuse_forward=*/true}, grads, &ws, nullptr)
          .ok());
  CHECK_CUDA(cudaDeviceSynchronize());
  // Reusing the forward's quantities gives what recomputing them gives (bit for bit: the same
  // kernels on the same inputs), and a forward of OTHER inputs in between is not reused.
  const std::vector<float> dq_reuse = down_bf16(dq, n), dbeta_reuse = down_f32(dbeta, ng);
  ASSERT_TRUE(BackwardDevice(p.dims, {}, in, {d_o, nullptr, false}, grads, &ws, nullptr).ok());
  EXPECT_EQ(down_bf16(dq, n), dq_reuse);
  EXPECT_EQ(down_f32(dbeta, ng), dbeta_reuse);
  DeviceInputs other = in;
  std::swap(other.q, other.k);
  void* o2 = up(std::vector<float>(n, 0.f), true);
  ASSERT_TRUE(ForwardDevice(p.dims, {}, other, {o2, nullptr, true}, &ws, nullptr).ok());
  ASSERT_TRUE(BackwardDevice(p.dims, {}, in, {d_o, nullptr, true}, grads, &ws, nullptr).ok());
  EXPECT_EQ(down_bf16(dq, n), dq_reuse);
  EXPECT_EQ(down_f32(dbeta, ng), dbeta_reuse);
  Results got{down_bf16(o, n),   {},
              down_bf16(dq, n),  down_bf16(dk, n),
              down_bf16(dv, n),  down_f32(dbeta, ng),
              down_f32(dlg, ng), {}};
  Results r = ref;
  r.s_final.clear();
  r.ds0.clear();
  Compare("bf16 device API B2 T300 H4 D128 gated vs f64", got, r, true, 3e-2);
}

TEST(DeltaNetCuda, RejectsUnsupportedHeadDim) {
  EXPECT_FALSE(CheckDeviceDims({1, 8, 1, 24}).ok());
  EXPECT_FALSE(CheckDeviceDims({1, 8, 1, 144}).ok());
  EXPECT_TRUE(CheckDeviceDims({1, 8, 1, 48}).ok());
}

}  // namespace
}  // namespace mesa::kernels::deltanet::cuda
