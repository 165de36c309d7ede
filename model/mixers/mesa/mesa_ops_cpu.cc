#include "model/mixers/mesa/mesa_ops_cpu.h"

#include <algorithm>
#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "kernels/mesa/mesa_op.h"
#include "kernels/mesa/step.h"
#include "model/mixers/mixer_ops.h"

namespace mesa::model {
namespace {

float* F(Act act) { return CpuBackend::AsFloats(act); }

// The kernel's span view of one layer's Mesa tensors (no varlen).
kernels::MesaInputs ToMesaInputs(const MesaActs& a) {
  const size_t tokens = static_cast<size_t>(a.dims.TokenElems());
  const size_t gates = static_cast<size_t>(a.dims.GateElems());
  kernels::MesaInputs in;
  in.dims = a.dims;
  in.q = {F(a.q), tokens};
  in.k = {F(a.k), tokens};
  in.v = {F(a.v), tokens};
  in.log_gamma = {a.log_gamma, gates};
  in.beta = {a.beta, gates};
  in.lambda = {a.lambda, static_cast<size_t>(a.dims.LambdaElems())};
  const size_t states = static_cast<size_t>(in.StateElems());
  if (a.h0 != nullptr) in.h0 = {a.h0, states};
  if (a.g0 != nullptr) in.g0 = {a.g0, states};
  return in;
}

class CpuMesaOps final : public MesaOps {
 public:
  explicit CpuMesaOps(const CpuBackendOptions& options) : options_(options) {}

  absl::StatusOr<double> Forward(const MesaActs& in, const MesaSolve& solve, Act o,
                                 float* q_star) override {
    last_steps_valid_ = false;
    if (in.dims.seq_len == 1 && in.h_final != nullptr && in.g_final != nullptr) {
      if (options_.mesa_impl != kernels::MesaImpl::kReference) return Step(in, solve, o, q_star);
      // The float64 reference (exact solves, for comparisons) runs the operator, which may not
      // write the finals over its initials: those go through a copy.
      const size_t states =
          static_cast<size_t>(in.dims.batch * in.dims.heads * in.dims.head_dim * in.dims.head_dim);
      MesaActs copy = in;
      if (in.h0 != nullptr && in.h0 == in.h_final) {
        h0_.assign(in.h0, in.h0 + states);
        copy.h0 = h0_.data();
      }
      if (in.g0 != nullptr && in.g0 == in.g_final) {
        g0_.assign(in.g0, in.g0 + states);
        copy.g0 = g0_.data();
      }
      return Chunked(copy, solve, o, q_star);
    }
    return Chunked(in, solve, o, q_star);
  }

  absl::StatusOr<double> Backward(const MesaActs& in, const float* q_star, Act d_o,
                                  const MesaSolve& solve, const MesaActGrads& grads) override {
    const size_t tokens = static_cast<size_t>(in.dims.TokenElems());
    const size_t gates = static_cast<size_t>(in.dims.GateElems());
    kernels::MesaBackwardInputs bwd;
    bwd.q_star = {q_star, tokens};
    bwd.d_o = {F(d_o), tokens};
    kernels::MesaGradients gradients;
    gradients.dq = {F(grads.dq), tokens};
    gradients.dk = {F(grads.dk), tokens};
    gradients.dv = {F(grads.dv), tokens};
    gradients.dlog_gamma = {grads.dlog_gamma, gates};
    gradients.dbeta = {grads.dbeta, gates};
    gradients.dlambda = {grads.dlambda, static_cast<size_t>(in.dims.LambdaElems())};
    const size_t states =
        static_cast<size_t>(in.dims.batch * in.dims.heads * in.dims.head_dim * in.dims.head_dim);
    if (in.dh_final != nullptr) bwd.dh_final = {in.dh_final, states};
    if (in.dg_final != nullptr) bwd.dg_final = {in.dg_final, states};
    if (grads.dh0 != nullptr) gradients.dh0 = {grads.dh0, states};
    if (grads.dg0 != nullptr) gradients.dg0 = {grads.dg0, states};
    if (absl::Status s =
            kernels::MesaBackward(ToMesaInputs(in), bwd, OptionsFor(solve), &gradients);
        !s.ok()) {
      return s;
    }
    return gradients.cg_steps_mean;
  }

  std::vector<int32_t> LastHeadSteps() const override {
    return last_steps_valid_ ? steps_ : std::vector<int32_t>{};
  }

 private:
  absl::StatusOr<double> Chunked(const MesaActs& in, const MesaSolve& solve, Act o, float* q_star) {
    const size_t tokens = static_cast<size_t>(in.dims.TokenElems());
    kernels::MesaForwardOutputs outputs;
    outputs.o = {F(o), tokens};
    outputs.q_star = {q_star, tokens};
    const size_t states =
        static_cast<size_t>(in.dims.batch * in.dims.heads * in.dims.head_dim * in.dims.head_dim);
    if (in.h_final != nullptr) outputs.h_final = {in.h_final, states};
    if (in.g_final != nullptr) outputs.g_final = {in.g_final, states};
    if (in.token_cg_steps != nullptr) {
      outputs.token_cg_steps = {in.token_cg_steps, static_cast<size_t>(in.dims.GateElems())};
    }
    if (absl::Status s = kernels::MesaForward(ToMesaInputs(in), OptionsFor(solve), &outputs);
        !s.ok()) {
      return s;
    }
    return outputs.cg_steps_mean;
  }

  // One decoding token: the recurrent step on the materialised state (kernels/mesa/step.h),
  // cheaper than a chunk of one and with the same CG; the finals start as copies of the initials
  // (or zero) and are advanced in place.
  absl::StatusOr<double> Step(const MesaActs& in, const MesaSolve& solve, Act o, float* q_star) {
    const kernels::cpu::MesaStepDims dims{in.dims.batch, in.dims.heads, in.dims.head_dim};
    const size_t tokens = static_cast<size_t>(dims.TokenElems());
    const size_t gates = static_cast<size_t>(dims.GateElems());
    const size_t states = static_cast<size_t>(dims.StateElems());
    for (auto [from, to] : {std::pair{in.h0, in.h_final}, std::pair{in.g0, in.g_final}}) {
      if (from == nullptr) {
        std::fill_n(to, states, 0.0f);
      } else if (from != to) {
        std::copy_n(from, states, to);
      }
    }
    const kernels::cpu::MesaStepInputs step{
        .dims = dims,
        .q = {F(in.q), tokens},
        .k = {F(in.k), tokens},
        .v = {F(in.v), tokens},
        .log_gamma = {in.log_gamma, gates},
        .beta = {in.beta, gates},
        .lambda = {in.lambda, static_cast<size_t>(in.dims.LambdaElems())}};
    steps_.resize(gates);
    kernels::CgOptions cg;
    cg.max_steps = solve.max_steps;
    cg.tolerance = solve.tolerance;
    if (absl::Status s = kernels::cpu::MesaStep(
            step, cg, {.h = {in.h_final, states}, .g = {in.g_final, states}},
            {.o = {F(o), tokens}, .q_star = {q_star, tokens}, .cg_steps = steps_},
            options_.num_threads);
        !s.ok()) {
      return s;
    }
    last_steps_valid_ = true;
    double sum = 0;
    for (int32_t n : steps_) sum += n;
    return gates > 0 ? sum / gates : 0.0;
  }

  kernels::MesaOptions OptionsFor(const MesaSolve& solve) const {
    kernels::MesaOptions options;
    options.impl = options_.mesa_impl;
    options.cg.max_steps = solve.max_steps;
    options.cg.tolerance = solve.tolerance;
    options.num_threads = options_.num_threads;
    options.memory = kernels::MemorySpace::kHost;
    return options;
  }

  const CpuBackendOptions options_;
  std::vector<int32_t> steps_;  // per (sequence, head) of the last step
  bool last_steps_valid_ = false;
  std::vector<float> h0_, g0_;  // initial states copied for the reference operator
};

const bool kRegistered = RegisterOps<MesaOps>("cpu", [](Backend& backend) {
  const auto* cpu = dynamic_cast<const CpuBackend*>(&backend);
  return MakeCpuMesaOps(cpu != nullptr ? cpu->options() : CpuBackendOptions{});
});

}  // namespace

std::unique_ptr<MesaOps> MakeCpuMesaOps(const CpuBackendOptions& options) {
  return std::make_unique<CpuMesaOps>(options);
}

}  // namespace mesa::model
