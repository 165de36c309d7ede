// Host side of the CUDA attention operator: checks, scratch, launch sequence, host-memory seam.
#include "kernels/attention/cuda/attention_cuda.h"

#include <cuda_runtime.h>

#include <cmath>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/attention/cuda/attention_kernels.h"
#include "kernels/attention/cuda/cudnn_attention.h"
#include "kernels/common/cuda/device_scratch.h"
#include "kernels/common/limits.h"

namespace mesa::kernels::attention::cuda {

using ::mesa::kernels::cuda::DeviceBuffer;

struct Workspace::Impl {
  DeviceBuffer delta, dq_acc, dq_order, cudnn;
};

Workspace::Workspace() : impl_(std::make_unique<Impl>()) {}
Workspace::~Workspace() = default;

namespace {

// The kernels index with int: every tensor must stay under 2^31 elements.
absl::Status CheckElementCount(int64_t n) {
  if (n >= (int64_t{1} << 31))
    return absl::InvalidArgumentError("attention CUDA: more than 2^31 elements per tensor");
  return absl::OkStatus();
}

absl::Status CheckHeadDim(int64_t d) {
  if (d < kMinHeadDim || d > kMaxHeadDim || d % kHeadDimMultiple != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("attention CUDA: head_dim must be a multiple of ", kHeadDimMultiple, " in [",
                     kMinHeadDim, ", ", kMaxHeadDim, "], got ", d));
  }
  return absl::OkStatus();
}

KernelShape ShapeOf(const DeviceProblem& p) {
  return {.batch = static_cast<int>(p.dims.batch),
          .seq_len = static_cast<int>(p.dims.seq_len),
          .heads = static_cast<int>(p.dims.heads),
          .head_dim = static_cast<int>(p.dims.head_dim),
          .window = static_cast<int>(std::min<int64_t>(p.window, p.dims.seq_len)),
          .scale = EffectiveScale({.scale = p.scale}, p.dims.head_dim),
          .dtype = p.dtype,
          .doc_start = p.doc_start};
}

// Whether p goes to cuDNN first (kAuto falls back to our kernels when cuDNN has no engine).
bool TryCudnn(const DeviceProblem& p) {
  switch (p.engine) {
    case AttnEngine::kOwn:
      return false;
    case AttnEngine::kCudnn:
      return true;
    case AttnEngine::kAuto:
      return CudnnExpresses(p) && CudnnAvailable().ok();
  }
  return false;
}

// Whether a cuDNN answer is final: success, a forced engine, or a failure other than "no engine".
bool CudnnAnswerIsFinal(const DeviceProblem& p, const absl::Status& s) {
  return s.ok() || p.engine == AttnEngine::kCudnn || !absl::IsUnimplemented(s);
}

}  // namespace

absl::Status CheckDeviceProblem(const DeviceProblem& p) {
  const AttnDims& d = p.dims;
  if (d.batch < 1 || d.seq_len < 1 || d.heads < 1)
    return absl::InvalidArgumentError("attention CUDA: B, T and H must be >= 1");
  if (auto s = CheckHeadDim(d.head_dim); !s.ok()) return s;
  if (d.seq_len > kMaxSeqLen) {
    return absl::InvalidArgumentError(
        absl::StrCat("attention CUDA: seq_len must be at most ", kMaxSeqLen, ", got ", d.seq_len));
  }
  if (p.window < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("attention CUDA: window must be >= 0, got ", p.window));
  }
  if (!std::isfinite(p.scale))
    return absl::InvalidArgumentError("attention CUDA: scale not finite");
  return CheckElementCount(d.TokenElems());
}

absl::Status ForwardDevice(const DeviceProblem& p, const DeviceInputs& in, void* o, float* lse,
                           cudaStream_t stream) {
  if (auto s = CheckDeviceProblem(p); !s.ok()) return s;
  if (in.q == nullptr || in.k == nullptr || in.v == nullptr || o == nullptr)
    return absl::InvalidArgumentError("attention ForwardDevice: a required pointer is null");
  if (TryCudnn(p)) {
    absl::Status s = CudnnForward(p, in, o, lse, stream);
    if (CudnnAnswerIsFinal(p, s)) return s;
  }
  MESA_CUDA_RETURN_IF_ERROR(LaunchForward(ShapeOf(p), in.q, in.k, in.v, o, lse, stream),
                            "attention forward");
  return absl::OkStatus();
}

absl::Status BackwardDevice(const DeviceProblem& p, const DeviceInputs& in, const void* o,
                            const float* lse, const void* d_o, void* dq, void* dk, void* dv,
                            Workspace* ws, cudaStream_t stream) {
  if (auto s = CheckDeviceProblem(p); !s.ok()) return s;
  if (in.q == nullptr || in.k == nullptr || in.v == nullptr || o == nullptr || lse == nullptr ||
      d_o == nullptr || dq == nullptr || dk == nullptr || dv == nullptr || ws == nullptr) {
    return absl::InvalidArgumentError("attention BackwardDevice: a required pointer is null");
  }
  Workspace::Impl* w = ws->impl();
  if (TryCudnn(p)) {
    absl::Status s = CudnnBackward(p, in, o, lse, d_o, dq, dk, dv, &w->cudnn, stream);
    if (CudnnAnswerIsFinal(p, s)) return s;
  }
  const KernelShape sh = ShapeOf(p);
  const int64_t n = p.dims.TokenElems();
  if (auto s = w->delta.Ensure(p.dims.RowElems() * sizeof(float)); !s.ok()) return s;
  // fp32 gradients accumulate straight into dq; bf16 ones through an fp32 buffer.
  const bool direct = p.dtype == DType::kF32;
  if (!direct) {
    if (auto s = w->dq_acc.Ensure(n * sizeof(float)); !s.ok()) return s;
  }
  float* dq_acc = direct ? static_cast<float*>(dq) : w->dq_acc.as<float>();
  MESA_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dq_acc, 0, n * sizeof(float), stream),
                            "attention dq clear");
  int* dq_order = nullptr;
  if (p.deterministic) {
    const size_t order_bytes = sizeof(int) * static_cast<size_t>(DqOrderInts(sh));
    if (auto s = w->dq_order.Ensure(order_bytes); !s.ok()) return s;
    dq_order = w->dq_order.as<int>();
    MESA_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dq_order, 0, order_bytes, stream),
                              "attention dq order clear");
  }
  MESA_CUDA_RETURN_IF_ERROR(LaunchBackwardPrepare(sh, o, d_o, w->delta.as<float>(), stream),
                            "attention backward prepare");
  MESA_CUDA_RETURN_IF_ERROR(LaunchBackward(sh, in.q, in.k, in.v, d_o, lse, w->delta.as<float>(),
                                           dq_acc, dq_order, dk, dv, stream),
                            "attention backward");
  if (!direct) {
    MESA_CUDA_RETURN_IF_ERROR(LaunchConvertToBf16(dq_acc, dq, n, stream), "attention dq convert");
  }
  return absl::OkStatus();
}

absl::Status DecodeDevice(const DeviceDecode& d, cudaStream_t stream) {
  if (d.batch < 1 || d.heads < 1 || d.capacity < 1)
    return absl::InvalidArgumentError("attention DecodeDevice: B, H and capacity must be >= 1");
  if (auto s = CheckHeadDim(d.head_dim); !s.ok()) return s;
  if (auto s = CheckElementCount(d.batch * d.capacity * d.heads * d.head_dim); !s.ok()) return s;
  if (d.q == nullptr || d.k_cache == nullptr || d.v_cache == nullptr || d.o == nullptr)
    return absl::InvalidArgumentError("attention DecodeDevice: a required pointer is null");
  // The kernel reads 16 bytes per lane (rows are D >= 16 elements, so aligned bases suffice).
  for (auto [name, ptr] : {std::pair{"q", d.q},
                           {"k_cache", d.k_cache},
                           {"v_cache", d.v_cache},
                           {"o", static_cast<const void*>(d.o)}}) {
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("attention DecodeDevice: '", name, "' is not 16-byte aligned"));
    }
  }
  const float scale = EffectiveScale({.scale = d.scale}, d.head_dim);
  MESA_CUDA_RETURN_IF_ERROR(
      LaunchDecode(static_cast<int>(d.batch), static_cast<int>(d.heads),
                   static_cast<int>(d.head_dim), static_cast<int>(d.capacity), scale, d.dtype, d.q,
                   d.k_cache, d.v_cache, d.lengths, d.o, stream),
      "attention decode");
  return absl::OkStatus();
}

// ----------------------------- host-memory seam (fp32) -----------------------------

namespace {

absl::Status Upload(DeviceBuffer* buf, std::span<const float> x) {
  if (auto s = buf->Ensure(x.size() * sizeof(float)); !s.ok()) return s;
  MESA_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(buf->ptr, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice), "upload");
  return absl::OkStatus();
}

// Device output of n floats, poisoned with NaN (all bits set) so that unwritten entries show.
absl::Status Poisoned(DeviceBuffer* buf, size_t n) {
  if (auto s = buf->Ensure(n * sizeof(float)); !s.ok()) return s;
  MESA_CUDA_RETURN_IF_ERROR(cudaMemset(buf->ptr, 0xFF, n * sizeof(float)), "poison");
  return absl::OkStatus();
}

absl::Status Download(const DeviceBuffer& buf, std::span<float> x) {
  MESA_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize(), "attention kernels");
  MESA_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(x.data(), buf.ptr, x.size() * sizeof(float), cudaMemcpyDeviceToHost), "download");
  return absl::OkStatus();
}

// `doc_start` holds in.doc_start on the device when it is given.
absl::StatusOr<DeviceProblem> HostProblem(const AttnInputs& in, const AttnOptions& options,
                                          DeviceBuffer* doc_start) {
  DeviceProblem p{
      .dims = in.dims, .window = options.window, .scale = options.scale, .dtype = DType::kF32};
  if (auto s = CheckDeviceProblem(p); !s.ok()) return s;
  if (!in.doc_start.empty()) {
    const size_t bytes = in.doc_start.size() * sizeof(int32_t);
    if (auto s = doc_start->Ensure(bytes); !s.ok()) return s;
    MESA_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(doc_start->ptr, in.doc_start.data(), bytes, cudaMemcpyHostToDevice),
        "upload doc_start");
    p.doc_start = static_cast<const int32_t*>(doc_start->ptr);
  }
  return p;
}

}  // namespace

absl::Status Forward(const AttnInputs& in, const AttnOptions& options, AttnForwardOutputs* out) {
  DeviceBuffer doc_start;
  const absl::StatusOr<DeviceProblem> problem = HostProblem(in, options, &doc_start);
  if (!problem.ok()) return problem.status();
  const DeviceProblem& p = *problem;
  DeviceBuffer q, k, v, o, lse;
  for (auto [buf, x] : {std::pair{&q, in.q}, {&k, in.k}, {&v, in.v}}) {
    if (auto s = Upload(buf, x); !s.ok()) return s;
  }
  if (auto s = Poisoned(&o, in.dims.TokenElems()); !s.ok()) return s;
  if (auto s = Poisoned(&lse, in.dims.RowElems()); !s.ok()) return s;
  if (auto s = ForwardDevice(p, {q.ptr, k.ptr, v.ptr}, o.ptr, lse.as<float>(), nullptr); !s.ok())
    return s;
  if (auto s = Download(o, out->o); !s.ok()) return s;
  if (!out->lse.empty()) return Download(lse, out->lse);
  return absl::OkStatus();
}

absl::Status Backward(const AttnInputs& in, const AttnBackwardInputs& bwd,
                      const AttnOptions& options, AttnGradients* grads) {
  DeviceBuffer doc_start;
  const absl::StatusOr<DeviceProblem> problem = HostProblem(in, options, &doc_start);
  if (!problem.ok()) return problem.status();
  const DeviceProblem& p = *problem;
  DeviceBuffer q, k, v, o, lse, d_o, dq, dk, dv;
  for (auto [buf, x] : {std::pair{&q, in.q}, {&k, in.k}, {&v, in.v}, {&d_o, bwd.d_o}}) {
    if (auto s = Upload(buf, x); !s.ok()) return s;
  }
  const DeviceInputs din{q.ptr, k.ptr, v.ptr};
  if (bwd.o.empty()) {  // recompute the forward on the device
    if (auto s = Poisoned(&o, in.dims.TokenElems()); !s.ok()) return s;
    if (auto s = Poisoned(&lse, in.dims.RowElems()); !s.ok()) return s;
    if (auto s = ForwardDevice(p, din, o.ptr, lse.as<float>(), nullptr); !s.ok()) return s;
  } else {
    if (auto s = Upload(&o, bwd.o); !s.ok()) return s;
    if (auto s = Upload(&lse, bwd.lse); !s.ok()) return s;
  }
  for (DeviceBuffer* buf : {&dq, &dk, &dv}) {
    if (auto s = Poisoned(buf, in.dims.TokenElems()); !s.ok()) return s;
  }
  Workspace ws;
  if (auto s = BackwardDevice(p, din, o.ptr, lse.as<float>(), d_o.ptr, dq.ptr, dk.ptr, dv.ptr, &ws,
                              nullptr);
      !s.ok()) {
    return s;
  }
  if (auto s = Download(dq, grads->dq); !s.ok()) return s;
  if (auto s = Download(dk, grads->dk); !s.ok()) return s;
  return Download(dv, grads->dv);
}

absl::Status DeviceAvailable() { return ::mesa::kernels::cuda::CudaDeviceAvailable(); }

}  // namespace mesa::kernels::attention::cuda
