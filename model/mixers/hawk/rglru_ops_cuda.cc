// The RG-LRU on the CUDA backend: kernels/rglru/cuda's device API on the backend's stream, in the
// backend's activation type. Each layer's instance owns its workspace, so that the layer's
// backward reuses the carried states its forward computed (when the inputs are the same buffers
// and shape; else they are recomputed).
#include <cuda_runtime.h>

#include <memory>

#include "absl/strings/str_cat.h"
#include "kernels/rglru/cuda/rglru_kernels.h"
#include "model/backend/cuda/cuda_backend.h"
#include "model/mixers/hawk/rglru_ops.h"
#include "model/mixers/mixer_ops.h"

namespace mesa::model {
namespace {

namespace krc = ::mesa::kernels::rglru::cuda;

// A grow-only device allocation.
class DeviceBytes {
 public:
  ~DeviceBytes() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  absl::Status Ensure(size_t bytes) {
    if (bytes <= bytes_) return absl::OkStatus();
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
    if (cudaError_t e = cudaMalloc(&ptr_, bytes); e != cudaSuccess) {
      return absl::ResourceExhaustedError(
          absl::StrCat("RG-LRU workspace of ", bytes, " bytes: ", cudaGetErrorString(e)));
    }
    bytes_ = bytes;
    return absl::OkStatus();
  }
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

class CudaRgLruOps final : public RgLruOps {
 public:
  CudaRgLruOps(CudaBackendControl& control, bool bf16) : control_(control), bf16_(bf16) {}

  absl::Status Forward(const RgLruActs& in, Act h) override {
    if (absl::Status s = control_.status(); !s.ok()) return s;
    const krc::DeviceProblem p = ProblemFor(in);
    if (absl::Status s = workspace_.Ensure(krc::WorkspaceBytes(p)); !s.ok()) return s;
    control_.ProfileBegin();
    if (int e = krc::RgLruForwardDevice(p, h.ptr, in.h_final, in.started_out, workspace_.get(),
                                        control_.stream());
        e != 0) {
      return control_.RecordError(absl::InternalError(
          absl::StrCat("RG-LRU forward: ", cudaGetErrorString(static_cast<cudaError_t>(e)))));
    }
    control_.ProfileEnd("RgLruForward");
    last_ = p;
    return absl::OkStatus();
  }

  absl::Status Backward(const RgLruActs& in, Act dh, const RgLruActGrads& grads) override {
    if (absl::Status s = control_.status(); !s.ok()) return s;
    const krc::DeviceProblem p = ProblemFor(in);
    if (absl::Status s = workspace_.Ensure(krc::WorkspaceBytes(p)); !s.ok()) return s;
    if (absl::Status s = partials_.Ensure(krc::DpPartialBytes(p)); !s.ok()) return s;
    control_.ProfileBegin();
    if (int e = krc::RgLruBackwardDevice(p, dh.ptr, in.dh_final, grads.du.ptr, grads.drho.ptr,
                                         grads.diota.ptr, grads.dp, grads.dh0, workspace_.get(),
                                         SameAsLast(p), static_cast<float*>(partials_.get()),
                                         control_.stream());
        e != 0) {
      return control_.RecordError(absl::InternalError(
          absl::StrCat("RG-LRU backward: ", cudaGetErrorString(static_cast<cudaError_t>(e)))));
    }
    control_.ProfileEnd("RgLruBackward");
    return absl::OkStatus();
  }

 private:
  krc::DeviceProblem ProblemFor(const RgLruActs& in) const {
    return {.batch = in.batch,
            .seq_len = in.seq_len,
            .width = in.width,
            .bf16 = bf16_,
            .u = in.u.ptr,
            .rho = in.rho.ptr,
            .iota = in.iota.ptr,
            .p = in.p,
            .h0 = in.h0,
            .started = in.started,
            .doc_start = in.doc_start};
  }
  // Whether the workspace still holds the carried states of a forward of this problem (the
  // layer's backward follows its own forward; the parameters do not change in between).
  bool SameAsLast(const krc::DeviceProblem& p) const {
    return last_.batch == p.batch && last_.seq_len == p.seq_len && last_.width == p.width &&
           last_.u == p.u && last_.rho == p.rho && last_.iota == p.iota && last_.p == p.p &&
           last_.h0 == p.h0 && last_.started == p.started && last_.doc_start == p.doc_start;
  }

  CudaBackendControl& control_;
  const bool bf16_;
  DeviceBytes workspace_, partials_;
  krc::DeviceProblem last_;
};

const bool kRegistered = RegisterOps<RgLruOps>("cuda", [](Backend& backend) {
  CudaBackendControl* control = GetCudaControl(&backend);
  if (control == nullptr) return std::unique_ptr<RgLruOps>();
  return std::unique_ptr<RgLruOps>(std::make_unique<CudaRgLruOps>(
      *control, backend.activation_type() == ActivationType::kBfloat16));
});

}  // namespace
}  // namespace mesa::model
