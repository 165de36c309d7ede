#include "kernels/conv/cuda/causal_conv_step_cuda.h"

#include "absl/strings/str_cat.h"
#include "kernels/common/cuda/step_checks.h"
#include "kernels/conv/cuda/conv_step_kernels.h"

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

namespace {

// Launches `count` validated convolutions together.
absl::Status LaunchConvs(const ConvDims& dims, DType dtype, const ConvOperands* ops, int count,
                         cudaStream_t stream) {
  ConvStepKernelArgs a[kMaxConvSteps];
  for (int i = 0; i < count; ++i) {
    const ConvOperands& o = ops[i];
    a[i].batch = static_cast<int>(dims.batch);
    a[i].seq_len = static_cast<int>(dims.seq_len);
    a[i].channels = static_cast<int>(dims.channels);
    a[i].width = static_cast<int>(dims.width);
    a[i].dtype = dtype;
    a[i].x = o.x;
    a[i].weight = o.weight;
    a[i].tail = o.tail;
    a[i].out = o.out;
  }
  if (cudaError_t e = LaunchCausalConvSteps(a, count, stream); e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("causal conv step launch: ", cudaGetErrorString(e)));
  }
  return absl::OkStatus();
}

// Whether [a, a + a_bytes) and [b, b + b_bytes) share a byte.
bool Overlap(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + b_bytes && y < x + a_bytes;
}

}  // namespace

absl::Status CausalConvAppendDevice(const ConvDims& dims, DType dtype, const void* x,
                                    const float* weight, float* tail, void* out,
                                    cudaStream_t stream) {
  if (auto s = ValidateCausalConvAppendDevice(dims, x, weight, tail, out); !s.ok()) return s;
  const ConvOperands op{x, weight, tail, out};
  return LaunchConvs(dims, dtype, &op, 1, stream);
}

absl::Status CausalConvAppendPairDevice(const ConvDims& dims, DType dtype,
                                        const ConvOperands& first, const ConvOperands& second,
                                        cudaStream_t stream) {
  const ConvOperands ops[2] = {first, second};
  for (int i = 0; i < 2; ++i) {
    const ConvOperands& o = ops[i];
    if (auto s = ValidateCausalConvAppendDevice(dims, o.x, o.weight, o.tail, o.out); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("convolution ", i, ": ", s.message()));
    }
  }
  const int64_t io = dims.InputElems() * (dtype == DType::kBF16 ? 2 : 4);
  const int64_t tail = dims.TailElems() * 4;
  for (int i = 0; i < 2; ++i) {
    const ConvOperands &o = ops[i], &other = ops[1 - i];
    if (Overlap(o.out, io, other.x, io) || Overlap(o.out, io, other.tail, tail) ||
        Overlap(o.out, io, other.out, io) || Overlap(o.tail, tail, other.x, io) ||
        Overlap(o.tail, tail, other.tail, tail)) {
      return absl::InvalidArgumentError(
          absl::StrCat("convolution ", i, "'s output or tail overlaps an operand of the other"));
    }
  }
  return LaunchConvs(dims, dtype, ops, 2, stream);
}

}  // namespace mesa::kernels::cuda
