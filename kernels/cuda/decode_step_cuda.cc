#include "kernels/cuda/decode_step_cuda.h"

#include <initializer_list>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/decode_step_kernels.h"

namespace mesa::kernels::cuda {
namespace {

absl::Status RequirePointers(std::initializer_list<std::pair<const char*, const void*>> ptrs) {
  for (const auto& [name, ptr] : ptrs) {
    if (ptr == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' is missing (null)"));
    }
  }
  return absl::OkStatus();
}

absl::Status LaunchStatus(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(error)));
}

}  // namespace

absl::Status MesaStepOnDevice(const DecodeDims& dims, const CgOptions& cg, const MesaStepDevice& p,
                              cudaStream_t stream) {
  if (auto s = ValidateMesaShape({dims.batch, 1, dims.heads, dims.head_dim}, cg); !s.ok()) {
    return s;
  }
  if (auto s = RequirePointers({{"q", p.q},
                                {"k", p.k},
                                {"v", p.v},
                                {"log_gamma", p.log_gamma},
                                {"beta", p.beta},
                                {"lambda", p.lambda},
                                {"g", p.g},
                                {"o", p.o}});
      !s.ok()) {
    return s;
  }
  if (cg.max_steps > 0 && p.h == nullptr) {
    return absl::InvalidArgumentError(
        "tensor 'h' is missing (null); it may be absent only with 0 CG steps (GLA)");
  }
  return LaunchStatus(
      LaunchMesaStep(static_cast<int>(dims.batch * dims.heads), static_cast<int>(dims.heads),
                     static_cast<int>(dims.head_dim), cg.max_steps, cg.tolerance, p, stream),
      "Mesa decoding step launch");
}

absl::Status DeltaNetStepOnDevice(const DecodeDims& dims, const DeltaStepDevice& p,
                                  cudaStream_t stream) {
  if (dims.batch < 1 || dims.heads < 1 || dims.head_dim < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch, heads and head_dim must be >= 1, got B=", dims.batch,
                     " H=", dims.heads, " D=", dims.head_dim));
  }
  if (auto s = RequirePointers(
          {{"q", p.q}, {"k", p.k}, {"v", p.v}, {"beta", p.beta}, {"s", p.s}, {"o", p.o}});
      !s.ok()) {
    return s;
  }
  return LaunchStatus(LaunchDeltaNetStep(static_cast<int>(dims.batch * dims.heads),
                                         static_cast<int>(dims.head_dim), p, stream),
                      "DeltaNet decoding step launch");
}

}  // namespace mesa::kernels::cuda
