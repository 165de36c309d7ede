#include "kernels/attention/attention_op.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/attention/cpu.h"
#include "kernels/attention/reference.h"

namespace mesa::kernels::attention {
namespace {

absl::StatusOr<const AttnCudaBackend*> CudaBackend() {
  const AttnCudaBackend* b = GetAttnCudaBackend();
  if (b == nullptr) {
    return absl::FailedPreconditionError(
        "impl=cuda: no CUDA backend linked into this binary "
        "(//kernels/attention/cuda:attention_cuda_register)");
  }
  if (absl::Status s = b->device_available(); !s.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("impl=cuda: ", s.message()));
  }
  return b;
}

}  // namespace

absl::Status AttentionForward(const AttnInputs& in, const AttnOptions& options,
                              AttnForwardOutputs* out) {
  if (out == nullptr) return absl::InvalidArgumentError("AttentionForward: out is null");
  if (absl::Status s = ValidateAttnInputs(in, options); !s.ok()) return s;
  if (absl::Status s = ValidateAttnForwardOutputs(in, *out); !s.ok()) return s;
  switch (options.impl) {
    case AttnImpl::kReference:
      return AttnReferenceForward(in, options, out);
    case AttnImpl::kCpu:
      return AttnCpuForward(in, options, out);
    case AttnImpl::kCuda: {
      absl::StatusOr<const AttnCudaBackend*> b = CudaBackend();
      if (!b.ok()) return b.status();
      return (*b)->forward(in, options, out);
    }
  }
  return absl::InvalidArgumentError("AttentionForward: unknown impl");
}

absl::Status AttentionBackward(const AttnInputs& in, const AttnBackwardInputs& bwd,
                               const AttnOptions& options, AttnGradients* grads) {
  if (grads == nullptr) return absl::InvalidArgumentError("AttentionBackward: grads is null");
  if (absl::Status s = ValidateAttnInputs(in, options); !s.ok()) return s;
  if (absl::Status s = ValidateAttnBackward(in, bwd, *grads); !s.ok()) return s;
  switch (options.impl) {
    case AttnImpl::kReference:
      return AttnReferenceBackward(in, bwd, options, grads);
    case AttnImpl::kCpu:
      return AttnCpuBackward(in, bwd, options, grads);
    case AttnImpl::kCuda: {
      absl::StatusOr<const AttnCudaBackend*> b = CudaBackend();
      if (!b.ok()) return b.status();
      return (*b)->backward(in, bwd, options, grads);
    }
  }
  return absl::InvalidArgumentError("AttentionBackward: unknown impl");
}

absl::StatusOr<AttnForwardResult> AttentionForwardAlloc(const AttnInputs& in,
                                                        const AttnOptions& options) {
  if (absl::Status s = ValidateAttnInputs(in, options); !s.ok()) return s;
  AttnForwardResult result;
  result.o.resize(in.dims.TokenElems());
  result.lse.resize(in.dims.RowElems());
  AttnForwardOutputs out{.o = result.o, .lse = result.lse};
  if (absl::Status s = AttentionForward(in, options, &out); !s.ok()) return s;
  return result;
}

absl::StatusOr<AttnGradientsResult> AttentionBackwardAlloc(const AttnInputs& in,
                                                           std::span<const float> d_o,
                                                           const AttnOptions& options,
                                                           std::span<const float> o,
                                                           std::span<const float> lse) {
  if (absl::Status s = ValidateAttnInputs(in, options); !s.ok()) return s;
  AttnGradientsResult result;
  result.dq.resize(in.dims.TokenElems());
  result.dk.resize(in.dims.TokenElems());
  result.dv.resize(in.dims.TokenElems());
  AttnGradients grads{.dq = result.dq, .dk = result.dk, .dv = result.dv};
  if (absl::Status s = AttentionBackward(in, {.d_o = d_o, .o = o, .lse = lse}, options, &grads);
      !s.ok()) {
    return s;
  }
  return result;
}

absl::Status AttentionDecode(const AttnDecodeInputs& in, float scale, std::span<float> o,
                             int num_threads) {
  if (absl::Status s = ValidateAttnDecode(in, scale, num_threads, o); !s.ok()) return s;
  return AttnCpuDecode(in, scale, o, num_threads);
}

absl::StatusOr<AttnImpl> ParseAttnImpl(std::string_view name) {
  if (name == "reference") return AttnImpl::kReference;
  if (name == "cpu") return AttnImpl::kCpu;
  if (name == "cuda") return AttnImpl::kCuda;
  return absl::InvalidArgumentError(absl::StrCat("unknown attention impl '", std::string(name),
                                                 "' (expected reference, cpu or cuda)"));
}

std::string_view AttnImplName(AttnImpl impl) {
  switch (impl) {
    case AttnImpl::kReference:
      return "reference";
    case AttnImpl::kCpu:
      return "cpu";
    case AttnImpl::kCuda:
      return "cuda";
  }
  return "unknown";
}

}  // namespace mesa::kernels::attention
