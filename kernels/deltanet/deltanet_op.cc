#include "kernels/deltanet/deltanet_op.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/deltanet/chunked.h"
#include "kernels/deltanet/reference.h"

namespace mesa::kernels::deltanet {
namespace {

absl::StatusOr<const DeltaCudaBackend*> CudaBackend() {
  const DeltaCudaBackend* b = GetDeltaCudaBackend();
  if (b == nullptr) {
    return absl::FailedPreconditionError(
        "impl=cuda: no CUDA backend linked into this binary "
        "(//kernels/deltanet/cuda:deltanet_cuda_register)");
  }
  if (absl::Status s = b->device_available(); !s.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("impl=cuda: ", s.message()));
  }
  return b;
}

}  // namespace

absl::Status DeltaNetForward(const DeltaInputs& in, const DeltaOptions& options,
                             DeltaForwardOutputs* out) {
  if (out == nullptr) return absl::InvalidArgumentError("DeltaNetForward: out is null");
  if (absl::Status s = ValidateDeltaInputs(in, options); !s.ok()) return s;
  if (absl::Status s = ValidateDeltaForwardOutputs(in, *out); !s.ok()) return s;
  switch (options.impl) {
    case DeltaImpl::kReference:
      return DeltaReferenceForward(in, options, out);
    case DeltaImpl::kChunked:
      return DeltaChunkedForward(in, options, out);
    case DeltaImpl::kCuda: {
      absl::StatusOr<const DeltaCudaBackend*> b = CudaBackend();
      if (!b.ok()) return b.status();
      return (*b)->forward(in, out);
    }
  }
  return absl::InvalidArgumentError("DeltaNetForward: unknown impl");
}

absl::Status DeltaNetBackward(const DeltaInputs& in, const DeltaBackwardInputs& bwd,
                              const DeltaOptions& options, DeltaGradients* grads) {
  if (grads == nullptr) return absl::InvalidArgumentError("DeltaNetBackward: grads is null");
  if (absl::Status s = ValidateDeltaInputs(in, options); !s.ok()) return s;
  if (absl::Status s = ValidateDeltaBackward(in, bwd, *grads); !s.ok()) return s;
  switch (options.impl) {
    case DeltaImpl::kReference:
      return DeltaReferenceBackward(in, bwd, options, grads);
    case DeltaImpl::kChunked:
      return DeltaChunkedBackward(in, bwd, options, grads);
    case DeltaImpl::kCuda: {
      absl::StatusOr<const DeltaCudaBackend*> b = CudaBackend();
      if (!b.ok()) return b.status();
      return (*b)->backward(in, bwd, grads);
    }
  }
  return absl::InvalidArgumentError("DeltaNetBackward: unknown impl");
}

absl::StatusOr<DeltaForwardResult> DeltaNetForwardAlloc(const DeltaInputs& in,
                                                        const DeltaOptions& options,
                                                        bool want_final_state) {
  if (absl::Status s = ValidateDeltaInputs(in, options); !s.ok()) return s;
  DeltaForwardResult result;
  result.o.resize(in.dims.TokenElems());
  if (want_final_state) result.s_final.resize(in.StateElems());
  DeltaForwardOutputs out{.o = result.o, .s_final = result.s_final};
  if (absl::Status s = DeltaNetForward(in, options, &out); !s.ok()) return s;
  return result;
}

absl::StatusOr<DeltaGradientsResult> DeltaNetBackwardAlloc(const DeltaInputs& in,
                                                           std::span<const float> d_o,
                                                           const DeltaOptions& options,
                                                           bool want_state_grad,
                                                           std::span<const float> ds_final) {
  if (absl::Status s = ValidateDeltaInputs(in, options); !s.ok()) return s;
  DeltaGradientsResult result;
  result.dq.resize(in.dims.TokenElems());
  result.dk.resize(in.dims.TokenElems());
  result.dv.resize(in.dims.TokenElems());
  result.dbeta.resize(in.dims.GateElems());
  if (in.is_gated()) result.dlog_gamma.resize(in.dims.GateElems());
  if (want_state_grad) result.ds0.resize(in.StateElems());
  DeltaBackwardInputs bwd{.d_o = d_o, .ds_final = ds_final};
  DeltaGradients grads{.dq = result.dq,
                       .dk = result.dk,
                       .dv = result.dv,
                       .dbeta = result.dbeta,
                       .dlog_gamma = result.dlog_gamma,
                       .ds0 = result.ds0};
  if (absl::Status s = DeltaNetBackward(in, bwd, options, &grads); !s.ok()) return s;
  return result;
}

absl::StatusOr<DeltaImpl> ParseDeltaImpl(std::string_view name) {
  if (name == "reference") return DeltaImpl::kReference;
  if (name == "chunked") return DeltaImpl::kChunked;
  if (name == "cuda") return DeltaImpl::kCuda;
  return absl::InvalidArgumentError(absl::StrCat("unknown deltanet impl '", std::string(name),
                                                 "' (expected reference, chunked or cuda)"));
}

std::string_view DeltaImplName(DeltaImpl impl) {
  switch (impl) {
    case DeltaImpl::kReference:
      return "reference";
    case DeltaImpl::kChunked:
      return "chunked";
    case DeltaImpl::kCuda:
      return "cuda";
  }
  return "unknown";
}

}  // namespace mesa::kernels::deltanet
