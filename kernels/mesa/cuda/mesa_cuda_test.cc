// GPU test (tags gpu, manual): the CUDA operator against the float64 oracle in
// reference_f64.cc on fresh random inputs, forward and every gradient, fp32 and bf16 inputs,
// with outputs poisoned (NaN) before each run. Also checks the fp32 backend seam
// (MesaForward/MesaBackward with impl = kCuda) against the team's CPU reference when that is
// implemented. Prints one line per (case, tensor): ||out - ref|| / ||ref||; exits 1 on failure.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/common/cuda/cuda_host_util.h"
#include "kernels/mesa/cuda/mesa_cuda.h"
#include "kernels/mesa/cuda/reference_f64.h"
#include "kernels/mesa/mesa_op.h"

namespace mesa::kernels::cuda {
namespace {

using testing::RefProblem;
using testing::RefResult;

int g_failures = 0;

float RoundBf16(float x) { return __bfloat162float(__float2bfloat16(x)); }

double RelErr(const std::vector<float>& out, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = static_cast<double>(out[i]) - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  if (std::isnan(num)) return NAN;
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

void Report(const std::string& name, const char* tensor, double err, double tol) {
  const bool ok = err <= tol;  // NaN fails
  if (!ok) ++g_failures;
  std::printf("%-34s %-11s rel_err %.3e  (tol %.0e) %s\n", name.c_str(), tensor, err, tol,
              ok ? "ok" : "FAIL");
}

struct Case {
  std::string name;
  int64_t B, T, H, D;
  bool bf16 = false;
  std::vector<int32_t> cu;
  bool init_state = false;
  int steps = 30;
  float tol = 0.f;
  float gamma_mean = 3.f;  // logit of gamma
};

RefProblem MakeProblem(const Case& c, std::mt19937& rng) {
  RefProblem p;
  p.B = c.B;
  p.T = c.T;
  p.H = c.H;
  p.D = c.D;
  p.cu_seqlens = c.cu;
  p.gla = c.steps == 0;
  std::normal_distribution<float> n01(0.f, 1.f);
  const int64_t toks = c.B * c.T * c.H;
  auto unit_rows = [&](std::vector<float>& x) {
    x.resize(toks * c.D);
    for (int64_t t = 0; t < toks; ++t) {
      double s = 0;
      for (int64_t d = 0; d < c.D; ++d) {
        x[t * c.D + d] = n01(rng);
        s += x[t * c.D + d] * x[t * c.D + d];
      }
      for (int64_t d = 0; d < c.D; ++d)
        x[t * c.D + d] = static_cast<float>(x[t * c.D + d] / std::sqrt(s));
    }
  };
  unit_rows(p.q);
  unit_rows(p.k);
  p.v.resize(toks * c.D);
  p.d_o.resize(toks * c.D);
  for (auto& x : p.v) x = n01(rng);
  for (auto& x : p.d_o) x = n01(rng) * 1e-3f;  // small upstream gradients, like training
  p.beta.resize(toks);
  p.log_gamma.resize(toks);
  for (int64_t t = 0; t < toks; ++t) {
    p.beta[t] = 1.f / (1.f + std::exp(-n01(rng)));
    const float z = c.gamma_mean + n01(rng);
    p.log_gamma[t] = -std::log1p(std::exp(-z));  // log sigmoid
  }
  p.lambda.resize(c.H * c.D);
  for (auto& x : p.lambda) x = 0.25f + std::log1p(std::exp(0.1f + 0.5f * n01(rng)));
  const int64_t S = c.cu.empty() ? c.B : static_cast<int64_t>(c.cu.size()) - 1;
  if (c.init_state) {
    p.h0.assign(S * c.H * c.D * c.D, 0.f);
    p.g0.resize(S * c.H * c.D * c.D);
    for (int64_t s = 0; s < S * c.H; ++s) {
      // A small PSD h0 = sum of 4 rank-one terms; g0 random.
      for (int r = 0; r < 4; ++r) {
        std::vector<float> u(c.D);
        for (auto& x : u) x = n01(rng) / std::sqrt(static_cast<float>(c.D));
        for (int64_t a = 0; a < c.D; ++a)
          for (int64_t b = 0; b < c.D; ++b) p.h0[(s * c.D + a) * c.D + b] += u[a] * u[b];
      }
    }
    for (auto& x : p.g0) x = 0.1f * n01(rng);
  }
  if (c.bf16) {
    for (auto* x : {&p.q, &p.k, &p.v, &p.d_o})
      for (auto& y : *x) y = RoundBf16(y);
  }
  return p;
}

struct DevBuf {
  void* p = nullptr;
  size_t bytes = 0;
  explicit DevBuf(size_t n) : bytes(n) { CHECK_CUDA(cudaMalloc(&p, std::max<size_t>(n, 16))); }
  ~DevBuf() { cudaFree(p); }
  void Poison() { CHECK_CUDA(cudaMemset(p, 0xFF, bytes)); }  // NaN for f32 and bf16
};

// Uploads fp32 host data as fp32 or bf16.
std::unique_ptr<DevBuf> UploadAs(const std::vector<float>& x, bool bf16) {
  auto b = std::make_unique<DevBuf>(DeviceBytes(x.size(), bf16));
  CopyToDevice(b->p, x, bf16);
  return b;
}

std::vector<float> Download(const DevBuf& b, size_t n, bool bf16) {
  std::vector<float> out(n);
  if (bf16) {
    std::vector<__nv_bfloat16> h(n);
    CHECK_CUDA(cudaMemcpy(h.data(), b.p, n * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; ++i) out[i] = __bfloat162float(h[i]);
  } else {
    CHECK_CUDA(cudaMemcpy(out.data(), b.p, n * 4, cudaMemcpyDeviceToHost));
  }
  return out;
}

void RunCase(const Case& c, std::mt19937& rng) {
  const RefProblem p = MakeProblem(c, rng);
  const RefResult ref = testing::RunReference(p);
  const int64_t S = c.cu.empty() ? c.B : static_cast<int64_t>(c.cu.size()) - 1;
  const size_t tok = p.q.size(), gate = p.beta.size(), st = S * c.H * c.D * c.D;
  auto q = UploadAs(p.q, c.bf16), k = UploadAs(p.k, c.bf16), v = UploadAs(p.v, c.bf16);
  auto d_o = UploadAs(p.d_o, c.bf16);
  auto lg = UploadAs(p.log_gamma, false), beta = UploadAs(p.beta, false),
       lam = UploadAs(p.lambda, false);
  std::unique_ptr<DevBuf> h0, g0;
  if (c.init_state) {
    h0 = UploadAs(p.h0, false);
    g0 = UploadAs(p.g0, false);
  }
  const size_t es = c.bf16 ? 2 : 4;
  DevBuf o(tok * es), qs(tok * 4), hf(st * 4), gf(st * 4);
  DevBuf dq(tok * es), dk(tok * es), dv(tok * es), dlg(gate * 4), dbeta(gate * 4),
      dlam(c.H * c.D * 4), dh0(st * 4), dg0(st * 4);
  for (DevBuf* b : {&o, &qs, &hf, &gf, &dq, &dk, &dv, &dlg, &dbeta, &dlam, &dh0, &dg0}) b->Poison();

  MesaDims dims{c.B, c.T, c.H, c.D};
  CgOptions cg{c.steps, c.tol};
  DeviceInputs in{c.bf16 ? DType::kBF16 : DType::kF32,
                  q->p,
                  k->p,
                  v->p,
                  static_cast<const float*>(lg->p),
                  static_cast<const float*>(beta->p),
                  static_cast<const float*>(lam->p),
                  h0 ? static_cast<const float*>(h0->p) : nullptr,
                  g0 ? static_cast<const float*>(g0->p) : nullptr};
  Workspace ws;
  double fwd_steps = 0, bwd_steps = 0;
  DeviceForwardOutputs out{o.p, static_cast<float*>(qs.p), static_cast<float*>(hf.p),
                           static_cast<float*>(gf.p), &fwd_steps};
  absl::Status s = ForwardDevice(dims, c.cu, cg, in, out, &ws, nullptr);
  if (!s.ok()) {
    std::printf("%s forward failed: %s\n", c.name.c_str(), s.ToString().c_str());
    ++g_failures;
    return;
  }
  // Reuses the forward's chunk states (the seam case below exercises the recompute path).
  DeviceBackwardInputs bi{static_cast<const float*>(qs.p), d_o->p, nullptr, nullptr,
                          /*reuse_forward_states=*/true};
  DeviceGradients gr{dq.p,
                     dk.p,
                     dv.p,
                     static_cast<float*>(dlg.p),
                     static_cast<float*>(dbeta.p),
                     static_cast<float*>(dlam.p),
                     static_cast<float*>(dh0.p),
                     static_cast<float*>(dg0.p),
                     &bwd_steps};
  s = BackwardDevice(dims, c.cu, cg, in, bi, gr, &ws, nullptr);
  if (!s.ok()) {
    std::printf("%s backward failed: %s\n", c.name.c_str(), s.ToString().c_str());
    ++g_failures;
    return;
  }
  CHECK_CUDA(cudaDeviceSynchronize());

  const double tf = c.bf16 ? 3e-2 : 1e-2;  // fp16 matvecs: ~1e-3 (fp32 in), ~1e-2 (bf16 in)
  const double tg = c.bf16 ? 5e-2 : 2e-2;
  Report(c.name, "o", RelErr(Download(o, tok, c.bf16), ref.o), tf);
  Report(c.name, "q_star", RelErr(Download(qs, tok, false), ref.q_star), tf);
  Report(c.name, "h_final", RelErr(Download(hf, st, false), ref.h_final), 5e-3);
  Report(c.name, "g_final", RelErr(Download(gf, st, false), ref.g_final), 5e-3);
  Report(c.name, "dq", RelErr(Download(dq, tok, c.bf16), ref.dq), tg);
  Report(c.name, "dk", RelErr(Download(dk, tok, c.bf16), ref.dk), tg);
  Report(c.name, "dv", RelErr(Download(dv, tok, c.bf16), ref.dv), tg);
  Report(c.name, "dlog_gamma", RelErr(Download(dlg, gate, false), ref.dlog_gamma), tg);
  Report(c.name, "dbeta", RelErr(Download(dbeta, gate, false), ref.dbeta), tg);
  Report(c.name, "dlambda", RelErr(Download(dlam, c.H * c.D, false), ref.dlambda), tg);
  if (c.steps > 0) Report(c.name, "dh0", RelErr(Download(dh0, st, false), ref.dh0), tg);
  Report(c.name, "dg0", RelErr(Download(dg0, st, false), ref.dg0), tg);
  std::printf("%-34s cg_steps_mean fwd %.2f bwd %.2f (max %d, tol %g)\n", c.name.c_str(), fwd_steps,
              bwd_steps, c.steps, c.tol);
  if (c.tol > 0 && !(fwd_steps < c.steps)) {
    ++g_failures;
    std::printf("%-34s FAIL: tolerance mode did not stop early\n", c.name.c_str());
  }
}

// The public API's view of a case's host tensors (fp32).
MesaInputs SeamInputs(const Case& c, const RefProblem& p) {
  return {.dims = {c.B, c.T, c.H, c.D},
          .q = p.q,
          .k = p.k,
          .v = p.v,
          .log_gamma = p.log_gamma,
          .beta = p.beta,
          .lambda = p.lambda,
          .h0 = p.h0,
          .g0 = p.g0,
          .cu_seqlens = c.cu};
}

// The fp32 backend seam through the public API, against the team's CPU implementations.
void RunSeamCase(std::mt19937& rng) {
  Case c{"seam_f32_B2_T100_H2_D32", 2, 100, 2, 32};
  const RefProblem p = MakeProblem(c, rng);
  const RefResult ref = testing::RunReference(p);
  const MesaInputs in = SeamInputs(c, p);
  for (MesaImpl impl : {MesaImpl::kCuda, MesaImpl::kReference, MesaImpl::kChunked}) {
    MesaOptions opt;
    opt.impl = impl;
    const std::string name = "seam_" + std::string(MesaImplName(impl));
    auto fwd = MesaForwardAlloc(in, opt);
    if (!fwd.ok()) {
      std::printf("%-34s skipped: %s\n", name.c_str(), fwd.status().ToString().c_str());
      if (impl == MesaImpl::kCuda) ++g_failures;
      continue;
    }
    std::vector<float> d_o(p.d_o);
    auto g = MesaBackwardAlloc(in, fwd->q_star, d_o, opt);
    Report(name, "o", RelErr(fwd->o, ref.o), 1e-2);
    if (!g.ok()) {
      std::printf("%-34s backward skipped: %s\n", name.c_str(), g.status().ToString().c_str());
      if (impl == MesaImpl::kCuda) ++g_failures;
      continue;
    }
    Report(name, "dq", RelErr(g->dq, ref.dq), 2e-2);
    Report(name, "dk", RelErr(g->dk, ref.dk), 2e-2);
    Report(name, "dv", RelErr(g->dv, ref.dv), 2e-2);
    Report(name, "dlog_gamma", RelErr(g->dlog_gamma, ref.dlog_gamma), 2e-2);
    Report(name, "dbeta", RelErr(g->dbeta, ref.dbeta), 2e-2);
    Report(name, "dlambda", RelErr(g->dlambda, ref.dlambda), 2e-2);
  }
}

// Run to run: two forward and backward passes of the same inputs give the same bits. dlambda is
// the sum over every chunk and warp (128 chunks here), summed in a fixed order (no float atomics).
void RunRepeatCase(std::mt19937& rng) {
  Case c{"repeat_f32_B2_T4096_H2_D128", 2, 4096, 2, 128};
  const RefProblem p = MakeProblem(c, rng);
  const MesaInputs in = SeamInputs(c, p);
  MesaOptions opt;
  opt.impl = MesaImpl::kCuda;
  std::vector<std::vector<float>> first;
  const char* names[] = {"o", "dq", "dk", "dv", "dlog_gamma", "dbeta", "dlambda"};
  for (int run = 0; run < 2; ++run) {
    auto fwd = MesaForwardAlloc(in, opt);
    std::vector<float> d_o(p.d_o);
    auto g = fwd.ok() ? MesaBackwardAlloc(in, fwd->q_star, d_o, opt)
                      : absl::StatusOr<MesaGradientsResult>(fwd.status());
    if (!g.ok()) {
      std::printf("%-34s FAIL: %s\n", c.name.c_str(), g.status().ToString().c_str());
      ++g_failures;
      return;
    }
    std::vector<std::vector<float>> now = {fwd->o,        g->dq,    g->dk,     g->dv,
                                           g->dlog_gamma, g->dbeta, g->dlambda};
    if (run == 0) {
      first = std::move(now);
      continue;
    }
    for (size_t i = 0; i < now.size(); ++i) {
      const bool same = now[i].size() == first[i].size() &&
                        std::memcmp(now[i].data(), first[i].data(), now[i].size() * 4) == 0;
      std::printf("%-34s %-12s %s\n", c.name.c_str(), names[i],
                  same ? "repeats bit for bit" : "FAIL: differs between runs");
      if (!same) ++g_failures;
    }
  }
}

// Per-token CG steps (MesaForwardOutputs::token_cg_steps) on the GPU against the CPU chunked
// operator's on the same inputs, through the seam: fixed steps exactly, tolerance counts within a
// step on average (the GPU solves with fp16 states, so a token may cross the tolerance a step
// apart), and each call's counts sum to its cg_steps_mean.
void RunTokenStepsCase(const Case& c, std::mt19937& rng) {
  const RefProblem p = MakeProblem(c, rng);
  const MesaInputs in = SeamInputs(c, p);
  MesaOptions gpu{.impl = MesaImpl::kCuda, .cg = {c.steps, c.tol}};
  MesaOptions cpu{.impl = MesaImpl::kChunked, .cg = {c.steps, c.tol}};
  auto a = MesaForwardAlloc(in, gpu, /*want_final_states=*/false, /*want_token_cg_steps=*/true);
  auto b = MesaForwardAlloc(in, cpu, /*want_final_states=*/false, /*want_token_cg_steps=*/true);
  const std::string name = "token_steps_" + c.name;
  if (!a.ok() || !b.ok()) {
    std::printf("%-34s FAIL: %s\n", name.c_str(),
                (!a.ok() ? a.status() : b.status()).ToString().c_str());
    ++g_failures;
    return;
  }
  const size_t n = a->token_cg_steps.size();
  double diff = 0, sum_a = 0, same = 0;
  int max_diff = 0;
  for (size_t i = 0; i < n; ++i) {
    const int d = std::abs(a->token_cg_steps[i] - b->token_cg_steps[i]);
    diff += d;
    max_diff = std::max(max_diff, d);
    same += d == 0;
    sum_a += a->token_cg_steps[i];
  }
  const double mean_diff = diff / n;
  const bool sums = std::abs(sum_a / n - a->cg_steps_mean) < 1e-9;
  const bool ok = sums && (c.tol > 0 ? mean_diff <= 1.0 : max_diff == 0);
  std::printf(
      "%-34s gpu mean %.3f cpu mean %.3f, |gpu-cpu| mean %.3f max %d, %.1f%% equal, sum %s %s\n",
      name.c_str(), a->cg_steps_mean, b->cg_steps_mean, mean_diff, max_diff, 100.0 * same / n,
      sums ? "ok" : "!= cg_steps_mean", ok ? "ok" : "FAIL");
  if (!ok) ++g_failures;
}

}  // namespace
}  // namespace mesa::kernels::cuda

int main() {
  using mesa::kernels::cuda::Case;
  if (!mesa::kernels::cuda::DeviceAvailable().ok()) {
    std::printf("no CUDA device\n");
    return 1;
  }
  std::random_device rd;
  const unsigned seed = rd();
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  std::vector<Case> cases = {
      {"f32_B2_T200_H2_D64_h0", 2, 200, 2, 64, false, {}, true},
      {"f32_B2_T130_H2_D128", 2, 130, 2, 128},
      {"bf16_B2_T130_H2_D128", 2, 130, 2, 128, true},
      {"bf16_B1_T50_H3_D64", 1, 50, 3, 64, true},
      {"f32_B1_T100_H2_D16", 1, 100, 2, 16},
      {"bf16_B1_T70_H2_D96_h0", 1, 70, 2, 96, true, {}, true},
      {"f32_varlen_T300_D64", 1, 300, 2, 64, false, {0, 37, 37, 200, 300}, true},
      {"f32_tol1e-4_T200_D64", 1, 200, 2, 64, false, {}, false, 100, 1e-4f},
      {"f32_gla0_T150_D64", 1, 150, 2, 64, false, {}, false, 0},
      {"f32_gamma~1_T256_D128", 1, 256, 2, 128, false, {}, false, 30, 0.f, 6.f},
      // Long sequences: the state scans run in segments (PlanStateScan), the gate scan and the
      // do scale in several tiles and pieces; an empty sequence and a partial last chunk.
      {"f32_long_T5000_H2_D64", 1, 5000, 2, 64},
      {"bf16_long_T4200_H2_D128", 1, 4200, 2, 128, true},
      {"f32_varlen_long_T6000_D64_h0", 1, 6000, 2, 64, false, {0, 700, 700, 5000, 6000}, true},
  };
  for (const Case& c : cases) mesa::kernels::cuda::RunCase(c, rng);
  mesa::kernels::cuda::RunSeamCase(rng);
  mesa::kernels::cuda::RunRepeatCase(rng);
  for (const Case& c : std::vector<Case>{
           {"f32_B2_T200_H2_D64_h0_tol1e-3", 2, 200, 2, 64, false, {}, true, 30, 1e-3f},
           {"f32_B1_T300_H2_D128_tol1e-2", 1, 300, 2, 128, false, {}, false, 30, 1e-2f},
           {"f32_varlen_T300_D64_tol1e-3",
            1,
            300,
            2,
            64,
            false,
            {0, 37, 37, 200, 300},
            true,
            30,
            1e-3f},
           {"f32_B2_T100_H2_D64_fixed7", 2, 100, 2, 64, false, {}, false, 7}}) {
    mesa::kernels::cuda::RunTokenStepsCase(c, rng);
  }
  std::printf("%s: %d failures\n", mesa::kernels::cuda::g_failures ? "FAILED" : "PASSED",
              mesa::kernels::cuda::g_failures);
  return mesa::kernels::cuda::g_failures ? 1 : 0;
}
