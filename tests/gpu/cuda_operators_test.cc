// GPU test (part of //tests/gpu:cuda_backend_test): the sequence-mixer operators through
// their per-backend implementations (model/mixers/*/..._ops_{cpu,cuda}.cc), CUDA against the CPU
// backend (cuda_backend_test.cc describes the checks).
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "model/backend/cpu_backend.h"
#include "model/backend/cuda/cuda_backend.h"
#include "model/mixers/deltanet/deltanet_ops.h"
#include "model/mixers/mesa/mesa_ops.h"
#include "model/mixers/mixer_ops.h"
#include "model/net/mesanet.h"
#include "tests/gpu/cuda_backend_test_util.h"

namespace mesa::model::cuda_test {
namespace {

TEST_P(CudaVsCpu, MesaOperator) {
  // The kernels/mesa/cuda op (fp16 chunk states and CG matvec operands) against the CPU chunked op.
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
  auto cpu_mesa = MakeOps<MesaOps>(*cpu_);
  auto gpu_mesa = MakeOps<MesaOps>(*gpu_);
  ASSERT_TRUE(cpu_mesa.ok() && gpu_mesa.ok()) << cpu_mesa.status() << gpu_mesa.status();
  // CPU.
  Vec o_cpu(tok), qs_cpu(tok), dq_cpu(tok), dk_cpu(tok), dv_cpu(tok), dlg_cpu(gates), db_cpu(gates),
      dl_cpu(h * d);
  const MesaActs in_cpu =
      acts(HostAct(q), HostAct(k), HostAct(v), lg.data(), beta.data(), lambda.data());
  auto cpu_fwd = (*cpu_mesa)->Forward(in_cpu, solve, HostAct(o_cpu), qs_cpu.data());
  ASSERT_TRUE(cpu_fwd.ok()) << cpu_fwd.status();
  const MesaActGrads gr_cpu{.dq = HostAct(dq_cpu),
                            .dk = HostAct(dk_cpu),
                            .dv = HostAct(dv_cpu),
                            .dlog_gamma = dlg_cpu.data(),
                            .dbeta = db_cpu.data(),
                            .dlambda = dl_cpu.data()};
  auto cpu_bwd = (*cpu_mesa)->Backward(in_cpu, qs_cpu.data(), HostAct(d_o), solve, gr_cpu);
  ASSERT_TRUE(cpu_bwd.ok()) << cpu_bwd.status();
  // GPU.
  const MesaActs in_gpu = acts(UpAct(q), UpAct(k), UpAct(v), Up(lg), Up(beta), Up(lambda));
  const Act g_o = PoisonedAct(tok);
  float* g_qs = Poisoned(tok);
  auto steps = (*gpu_mesa)->Forward(in_gpu, solve, g_o, g_qs);
  ASSERT_TRUE(steps.ok()) << steps.status();
  std::printf("Mesa forward cg_steps_mean %.2f (%s activations)\n", *steps,
              ActivationTypeName(GetParam()));
  const MesaActGrads gr{.dq = PoisonedAct(tok),
                        .dk = PoisonedAct(tok),
                        .dv = PoisonedAct(tok),
                        .dlog_gamma = Poisoned(gates),
                        .dbeta = Poisoned(gates),
                        .dlambda = Poisoned(h * d)};
  auto bsteps = (*gpu_mesa)->Backward(in_gpu, g_qs, UpAct(d_o), solve, gr);
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
  // plain, through the operator interface the model's layers use.
  const int64_t b = 2, t = 200, h = 3, d = 64;
  auto cpu_delta = MakeOps<DeltaNetOps>(*cpu_);
  auto gpu_delta = MakeOps<DeltaNetOps>(*gpu_);
  ASSERT_TRUE(cpu_delta.ok() && gpu_delta.ok()) << cpu_delta.status() << gpu_delta.status();
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
    ASSERT_TRUE((*cpu_delta)->Forward(in_cpu, HostAct(o_cpu)).ok());
    const DeltaActGrads gr_cpu{.dq = HostAct(dq_cpu),
                               .dk = HostAct(dk_cpu),
                               .dv = HostAct(dv_cpu),
                               .dbeta = db_cpu.data(),
                               .dlog_gamma = gated ? dlg_cpu.data() : nullptr};
    ASSERT_TRUE((*cpu_delta)->Backward(in_cpu, HostAct(d_o), gr_cpu).ok());
    const DeltaActs in_gpu{.dims = dims,
                           .q = UpAct(q),
                           .k = UpAct(k),
                           .v = UpAct(v),
                           .beta = Up(beta),
                           .log_gamma = gated ? Up(lg) : nullptr};
    const Act g_o = PoisonedAct(tok);
    absl::Status s = (*gpu_delta)->Forward(in_gpu, g_o);
    ASSERT_TRUE(s.ok()) << s;
    const DeltaActGrads gr{.dq = PoisonedAct(tok),
                           .dk = PoisonedAct(tok),
                           .dv = PoisonedAct(tok),
                           .dbeta = Poisoned(gates),
                           .dlog_gamma = gated ? Poisoned(gates) : nullptr};
    s = (*gpu_delta)->Backward(in_gpu, UpAct(d_o), gr);
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

}  // namespace
}  // namespace mesa::model::cuda_test
