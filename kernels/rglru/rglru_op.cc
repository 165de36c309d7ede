#include "kernels/rglru/rglru_op.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/rglru/chunked.h"
#include "kernels/rglru/reference.h"

namespace mesa::kernels::rglru {
namespace {

absl::Status NoCuda() {
  return absl::FailedPreconditionError(
      "the RG-LRU's CUDA kernels are not linked into this binary "
      "(//kernels/rglru/cuda:rglru_cuda_register); use impl = chunked or reference");
}

}  // namespace

absl::Status RgLruForward(const RgLruInputs& in, const RgLruOptions& options,
                          RgLruForwardOutputs* out) {
  if (auto s = ValidateRgLruInputs(in, options); !s.ok()) return s;
  if (auto s = ValidateRgLruForwardOutputs(in, *out); !s.ok()) return s;
  switch (options.impl) {
    case RgLruImpl::kReference:
      return ReferenceForward(in, out);
    case RgLruImpl::kChunked:
      return ChunkedForward(in, options, out);
    case RgLruImpl::kCuda: {
      const RgLruCudaBackend* cuda = GetRgLruCudaBackend();
      if (cuda == nullptr) return NoCuda();
      return cuda->forward(in, options, out);
    }
  }
  return absl::InvalidArgumentError("unknown RG-LRU implementation");
}

absl::Status RgLruBackward(const RgLruInputs& in, const RgLruOptions& options,
                           const RgLruBackwardInputs& bwd, RgLruGradients* grads) {
  if (auto s = ValidateRgLruInputs(in, options); !s.ok()) return s;
  if (auto s = ValidateRgLruBackward(in, bwd, *grads); !s.ok()) return s;
  switch (options.impl) {
    case RgLruImpl::kReference:
      return ReferenceBackward(in, bwd, grads);
    case RgLruImpl::kChunked:
      return ChunkedBackward(in, options, bwd, grads);
    case RgLruImpl::kCuda: {
      const RgLruCudaBackend* cuda = GetRgLruCudaBackend();
      if (cuda == nullptr) return NoCuda();
      return cuda->backward(in, options, bwd, grads);
    }
  }
  return absl::InvalidArgumentError("unknown RG-LRU implementation");
}

absl::StatusOr<RgLruImpl> ParseRgLruImpl(std::string_view name) {
  if (name == "reference") return RgLruImpl::kReference;
  if (name == "chunked") return RgLruImpl::kChunked;
  if (name == "cuda") return RgLruImpl::kCuda;
  return absl::InvalidArgumentError(absl::StrCat("unknown rglru impl '", std::string(name),
                                                 "' (expected reference, chunked or cuda)"));
}

std::string_view RgLruImplName(RgLruImpl impl) {
  switch (impl) {
    case RgLruImpl::kReference:
      return "reference";
    case RgLruImpl::kChunked:
      return "chunked";
    case RgLruImpl::kCuda:
      return "cuda";
  }
  return "unknown";
}

}  // namespace mesa::kernels::rglru
