#include "kernels/mesa/mesa_op.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/mesa/chunked.h"
#include "kernels/mesa/reference.h"

namespace mesa::kernels {
namespace {

absl::StatusOr<const MesaBackend*> CudaBackendOrError() {
  const MesaBackend* backend = GetMesaCudaBackend();
  if (backend == nullptr || backend->forward == nullptr || backend->backward == nullptr) {
    return absl::FailedPreconditionError(
        "impl=cuda requested but this binary was built without the CUDA backend "
        "(link //kernels:mesa_op_cuda_dispatch)");
  }
  if (backend->device_available != nullptr) {
    if (absl::Status s = backend->device_available(); !s.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("impl=cuda requested but no usable GPU: ", s.message()));
    }
  }
  return backend;
}

absl::Status CheckHostOnly(const MesaOptions& options) {
  if (options.memory != MemorySpace::kHost) {
    return absl::InvalidArgumentError(absl::StrCat("impl=", std::string(MesaImplName(options.impl)),
                                                   " runs on the CPU and needs host pointers"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status MesaForward(const MesaInputs& in, const MesaOptions& options,
                         MesaForwardOutputs* out) {
  if (out == nullptr) return absl::InvalidArgumentError("MesaForward: out is null");
  if (absl::Status s = ValidateMesaInputs(in, options); !s.ok()) return s;
  if (absl::Status s = ValidateForwardOutputs(in, *out); !s.ok()) return s;
  switch (options.impl) {
    case MesaImpl::kReference:
      if (absl::Status s = CheckHostOnly(options); !s.ok()) return s;
      return cpu::MesaReferenceForward(in, options, out);
    case MesaImpl::kChunked:
      if (absl::Status s = CheckHostOnly(options); !s.ok()) return s;
      return cpu::MesaChunkedForward(in, options, out);
    case MesaImpl::kCuda: {
      absl::StatusOr<const MesaBackend*> backend = CudaBackendOrError();
      if (!backend.ok()) return backend.status();
      return (*backend)->forward(in, options, out);
    }
  }
  return absl::InvalidArgumentError("MesaForward: unknown impl");
}

absl::Status MesaBackward(const MesaInputs& in, const MesaBackwardInputs& bwd,
                          const MesaOptions& options, MesaGradients* grads) {
  if (grads == nullptr) return absl::InvalidArgumentError("MesaBackward: grads is null");
  if (absl::Status s = ValidateMesaInputs(in, options); !s.ok()) return s;
  if (absl::Status s = ValidateBackward(in, bwd, *grads, options); !s.ok()) return s;
  switch (options.impl) {
    case MesaImpl::kReference:
      if (absl::Status s = CheckHostOnly(options); !s.ok()) return s;
      return cpu::MesaReferenceBackward(in, bwd, options, grads);
    case MesaImpl::kChunked:
      if (absl::Status s = CheckHostOnly(options); !s.ok()) return s;
      return cpu::MesaChunkedBackward(in, bwd, options, grads);
    case MesaImpl::kCuda: {
      absl::StatusOr<const MesaBackend*> backend = CudaBackendOrError();
      if (!backend.ok()) return backend.status();
      return (*backend)->backward(in, bwd, options, grads);
    }
  }
  return absl::InvalidArgumentError("MesaBackward: unknown impl");
}

absl::StatusOr<MesaForwardResult> MesaForwardAlloc(const MesaInputs& in, const MesaOptions& options,
                                                   bool want_final_states,
                                                   bool want_token_cg_steps) {
  if (options.memory != MemorySpace::kHost) {
    return absl::InvalidArgumentError("MesaForwardAlloc allocates host memory; use MesaForward");
  }
  if (absl::Status s = ValidateMesaInputs(in, options); !s.ok()) return s;
  MesaForwardResult result;
  result.o.resize(in.dims.TokenElems());
  result.q_star.resize(in.dims.TokenElems());
  if (want_final_states) {
    result.h_final.resize(in.StateElems());
    result.g_final.resize(in.StateElems());
  }
  if (want_token_cg_steps) result.token_cg_steps.resize(in.dims.GateElems());
  MesaForwardOutputs out{.o = result.o,
                         .q_star = result.q_star,
                         .h_final = result.h_final,
                         .g_final = result.g_final,
                         .token_cg_steps = result.token_cg_steps};
  if (absl::Status s = MesaForward(in, options, &out); !s.ok()) return s;
  result.cg_steps_mean = out.cg_steps_mean;
  return result;
}

absl::StatusOr<MesaGradientsResult> MesaBackwardAlloc(
    const MesaInputs& in, std::span<const float> q_star, std::span<const float> d_o,
    const MesaOptions& options, bool want_state_grads, std::span<const float> dh_final,
    std::span<const float> dg_final) {
  if (options.memory != MemorySpace::kHost) {
    return absl::InvalidArgumentError("MesaBackwardAlloc allocates host memory; use MesaBackward");
  }
  if (absl::Status s = ValidateMesaInputs(in, options); !s.ok()) return s;
  MesaGradientsResult result;
  result.dq.resize(in.dims.TokenElems());
  result.dk.resize(in.dims.TokenElems());
  result.dv.resize(in.dims.TokenElems());
  result.dlog_gamma.resize(in.dims.GateElems());
  result.dbeta.resize(in.dims.GateElems());
  result.dlambda.resize(in.dims.LambdaElems());
  if (want_state_grads) {
    result.dh0.resize(in.StateElems());
    result.dg0.resize(in.StateElems());
  }
  MesaBackwardInputs bwd{.q_star = q_star, .d_o = d_o, .dh_final = dh_final, .dg_final = dg_final};
  MesaGradients grads{.dq = result.dq,
                      .dk = result.dk,
                      .dv = result.dv,
                      .dlog_gamma = result.dlog_gamma,
                      .dbeta = result.dbeta,
                      .dlambda = result.dlambda,
                      .dh0 = result.dh0,
                      .dg0 = result.dg0};
  if (absl::Status s = MesaBackward(in, bwd, options, &grads); !s.ok()) return s;
  result.cg_steps_mean = grads.cg_steps_mean;
  return result;
}

absl::StatusOr<MesaImpl> ParseMesaImpl(std::string_view name) {
  if (name == "reference") return MesaImpl::kReference;
  if (name == "chunked") return MesaImpl::kChunked;
  if (name == "cuda") return MesaImpl::kCuda;
  return absl::InvalidArgumentError(absl::StrCat("unknown mesa impl '", std::string(name),
                                                 "' (expected reference, chunked or cuda)"));
}

std::string_view MesaImplName(MesaImpl impl) {
  switch (impl) {
    case MesaImpl::kReference:
      return "reference";
    case MesaImpl::kChunked:
      return "chunked";
    case MesaImpl::kCuda:
      return "cuda";
  }
  return "unknown";
}

}  // namespace mesa::kernels
