#include "model/mixers/deltanet/deltanet_ops_cpu.h"

#include <cstddef>
#include <memory>

#include "kernels/deltanet/deltanet_op.h"
#include "kernels/deltanet/step.h"
#include "model/mixers/mixer_ops.h"

namespace mesa::model {
namespace {

namespace kd = ::mesa::kernels::deltanet;

size_t StateElems(const DeltaActs& a) {
  return static_cast<size_t>(a.dims.batch * a.dims.heads * a.dims.head_dim * a.dims.head_dim);
}

float* F(Act act) { return CpuBackend::AsFloats(act); }

// The operator's span view of one layer (no varlen).
kd::DeltaInputs ToDeltaInputs(const DeltaActs& a) {
  const size_t tokens = static_cast<size_t>(a.dims.TokenElems());
  const size_t gates = static_cast<size_t>(a.dims.GateElems());
  kd::DeltaInputs in;
  in.dims = {a.dims.batch, a.dims.seq_len, a.dims.heads, a.dims.head_dim};
  in.q = {F(a.q), tokens};
  in.k = {F(a.k), tokens};
  in.v = {F(a.v), tokens};
  in.beta = {a.beta, gates};
  if (a.log_gamma != nullptr) in.log_gamma = {a.log_gamma, gates};
  if (a.s0 != nullptr) in.s0 = {a.s0, StateElems(a)};
  return in;
}

class CpuDeltaNetOps final : public DeltaNetOps {
 public:
  explicit CpuDeltaNetOps(const CpuBackendOptions& backend) {
    options_.impl = backend.mesa_impl == kernels::MesaImpl::kReference ? kd::DeltaImpl::kReference
                                                                       : kd::DeltaImpl::kChunked;
    options_.num_threads = backend.num_threads;
  }

  absl::Status Forward(const DeltaActs& in, Act o) override {
    if (in.dims.seq_len == 1 && in.s0 != nullptr && in.s0 == in.s_final &&
        options_.impl != kd::DeltaImpl::kReference) {
      // One decoding token, state carried in place: the recurrent step (kernels/deltanet/step.h).
      const kd::DeltaStepDims dims{in.dims.batch, in.dims.heads, in.dims.head_dim};
      const size_t tokens = static_cast<size_t>(dims.TokenElems());
      const size_t gates = static_cast<size_t>(dims.GateElems());
      kd::DeltaStepInputs step{.dims = dims,
                               .q = {F(in.q), tokens},
                               .k = {F(in.k), tokens},
                               .v = {F(in.v), tokens},
                               .beta = {in.beta, gates}};
      if (in.log_gamma != nullptr) step.log_gamma = {in.log_gamma, gates};
      return kd::DeltaNetStep(step, {in.s_final, StateElems(in)}, {F(o), tokens},
                              options_.num_threads);
    }
    kd::DeltaForwardOutputs outputs;
    outputs.o = {F(o), static_cast<size_t>(in.dims.TokenElems())};
    if (in.s_final != nullptr) outputs.s_final = {in.s_final, StateElems(in)};
    return kd::DeltaNetForward(ToDeltaInputs(in), options_, &outputs);
  }

  absl::Status Backward(const DeltaActs& in, Act d_o, const DeltaActGrads& grads) override {
    const size_t tokens = static_cast<size_t>(in.dims.TokenElems());
    const size_t gates = static_cast<size_t>(in.dims.GateElems());
    kd::DeltaBackwardInputs bwd;
    bwd.d_o = {F(d_o), tokens};
    kd::DeltaGradients gradients;
    gradients.dq = {F(grads.dq), tokens};
    gradients.dk = {F(grads.dk), tokens};
    gradients.dv = {F(grads.dv), tokens};
    gradients.dbeta = {grads.dbeta, gates};
    if (in.log_gamma != nullptr) gradients.dlog_gamma = {grads.dlog_gamma, gates};
    if (in.ds_final != nullptr) bwd.ds_final = {in.ds_final, StateElems(in)};
    if (grads.ds0 != nullptr) gradients.ds0 = {grads.ds0, StateElems(in)};
    return kd::DeltaNetBackward(ToDeltaInputs(in), bwd, options_, &gradients);
  }

 private:
  kd::DeltaOptions options_;
};

const bool kRegistered = RegisterOps<DeltaNetOps>("cpu", [](Backend& backend) {
  const auto* cpu = dynamic_cast<const CpuBackend*>(&backend);
  return MakeCpuDeltaNetOps(cpu != nullptr ? cpu->options() : CpuBackendOptions{});
});

}  // namespace

std::unique_ptr<DeltaNetOps> MakeCpuDeltaNetOps(const CpuBackendOptions& options) {
  return std::make_unique<CpuDeltaNetOps>(options);
}

}  // namespace mesa::model
