#include "kernels/cuda/causal_conv_step_cuda.h"

#include "absl/strings/str_cat.h"
#include "kernels/cuda/step_checks.h"
#include "kernels/cuda/step_kernels.h"

namespace mesa::kernels::cuda {

absl::Status ValidateCausalConvAppendDevice(const ConvDims& d, const void* x, const float* weight,
                                            const float* tail, const void* out) {
  if (auto s = cpu::ValidateConvDims(d); !s.ok()) return s;
  if (auto s = CheckStepRows("batch * channels", d.batch * d.channels); !s.ok()) return s;
  if (auto s = CheckStepRows("seq_len * channels", d.seq_len * d.channels); !s.ok()) return s;
  if (auto s = CheckRequired({{"x", x}, {"weight", weight}, {"out", out}}); !s.ok()) return s;
  if (d.width > 1 && tail == nullptr) {
    return absl::InvalidArgumentError("tail is required (conv width > 1)");
  }
  return absl::OkStatus();
}

absl::Status CausalConvAppendDevice(const ConvDims& dims, DType dtype, const void* x,
                                    const float* weight, float* tail, void* out,
                                    cudaStream_t stream) {
  if (auto s = ValidateCausalConvAppendDevice(dims, x, weight, tail, out); !s.ok()) return s;
  ConvStepKernelArgs a;
  a.batch = static_cast<int>(dims.batch);
  a.seq_len = static_cast<int>(dims.seq_len);
  a.channels = static_cast<int>(dims.channels);
  a.width = static_cast<int>(dims.width);
  a.dtype = dtype;
  a.x = x;
  a.weight = weight;
  a.tail = tail;
  a.out = out;
  if (cudaError_t e = LaunchCausalConvStep(a, stream); e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("causal conv step launch: ", cudaGetErrorString(e)));
  }
  return absl::OkStatus();
}

}  // namespace mesa::kernels::cuda
