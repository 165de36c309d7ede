#include "kernels/deltanet/cuda/step_cuda.h"

#include "absl/strings/str_cat.h"
#include "kernels/common/cuda/step_checks.h"
#include "kernels/deltanet/cuda/step_kernels.h"

namespace mesa::kernels::deltanet::cuda {

using ::mesa::kernels::cuda::CheckAligned16;
using ::mesa::kernels::cuda::CheckRequired;
using ::mesa::kernels::cuda::CheckStepRows;

absl::Status ValidateDeltaStepDevice(const DeltaStepDims& d, const DeltaStepDeviceInputs& in,
                                     const float* s, const void* o) {
  if (d.batch < 1 || d.heads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch and heads must be >= 1, got B=", d.batch, " H=", d.heads));
  }
  if (d.head_dim < 16 || d.head_dim > 128 || d.head_dim % 16 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("head_dim must be a multiple of 16 in [16, 128], got D=", d.head_dim));
  }
  if (auto st = CheckStepRows("batch * heads", d.GateElems()); !st.ok()) return st;
  if (auto st = CheckRequired(
          {{"q", in.q}, {"k", in.k}, {"v", in.v}, {"beta", in.beta}, {"s", s}, {"o", o}});
      !st.ok()) {
    return st;
  }
  return CheckAligned16({{"s", s}});
}

absl::Status DeltaStepDevice(const DeltaStepDims& dims, const DeltaStepDeviceInputs& in, float* s,
                             void* o, cudaStream_t stream) {
  if (auto st = ValidateDeltaStepDevice(dims, in, s, o); !st.ok()) return st;
  DeltaStepKernelArgs a;
  a.batch = static_cast<int>(dims.batch);
  a.heads = static_cast<int>(dims.heads);
  a.head_dim = static_cast<int>(dims.head_dim);
  a.dtype = in.dtype;
  a.q = in.q;
  a.k = in.k;
  a.v = in.v;
  a.beta = in.beta;
  a.log_gamma = in.log_gamma;
  a.s = s;
  a.o = o;
  if (cudaError_t e = LaunchDeltaStep(a, stream); e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("DeltaNet step launch: ", cudaGetErrorString(e)));
  }
  return absl::OkStatus();
}

}  // namespace mesa::kernels::deltanet::cuda
