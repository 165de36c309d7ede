// Mamba-2's SSD on the CUDA backend: kernels/ssd/cuda's device API on the backend's stream, in
// the backend's activation type, reading x, B and C straight from the convolution's rows
// [x | B | C] and writing their gradients into the same layout. Each layer's instance owns its
// workspace, so that the layer's backward reuses the chunk states its forward computed (when the
// inputs are the same buffers and shape; else they are recomputed).
#include <cuda_runtime.h>

#include <memory>

#include "absl/strings/str_cat.h"
#include "kernels/common/cuda/device_scratch.h"
#include "kernels/ssd/cuda/ssd_kernels.h"
#include "model/backend/cuda/cuda_backend.h"
#include "model/mixers/mamba2/ssd_ops.h"
#include "model/mixers/mixer_ops.h"

namespace mesa::model {
namespace {

namespace ksc = ::mesa::kernels::ssd::cuda;

class CudaSsdOps final : public SsdOps {
 public:
  CudaSsdOps(CudaBackendControl& control, bool bf16) : control_(control), bf16_(bf16) {}

  absl::Status Forward(const SsdActs& in, Act y) override {
    if (absl::Status s = control_.status(); !s.ok()) return s;
    const ksc::DeviceProblem p = ProblemFor(in);
    if (absl::Status s = Prepare(p); !s.ok()) return s;
    control_.ProfileBegin();
    if (int e = ksc::SsdForwardDevice(p, y.ptr, in.s_final, workspace_.ptr, control_.stream());
        e != 0) {
      return Failed("forward", e);
    }
    control_.ProfileEnd("SsdForward");
    last_ = p;
    return absl::OkStatus();
  }

  absl::Status Backward(const SsdActs& in, Act dy, const SsdActGrads& grads) override {
    if (absl::Status s = control_.status(); !s.ok()) return s;
    const ksc::DeviceProblem p = ProblemFor(in);
    if (absl::Status s = Prepare(p); !s.ok()) return s;
    char* d_rows = static_cast<char*>(grads.d_xbc.ptr);
    control_.ProfileBegin();
    if (int e = ksc::SsdBackwardDevice(p, dy.ptr, in.ds_final, d_rows, grads.d_dt_pre.ptr,
                                       d_rows + BOffset(in), d_rows + COffset(in), grads.d_a_log,
                                       grads.d_dt_bias, grads.d_d, grads.ds0, workspace_.ptr,
                                       SameAsLast(p), control_.stream());
        e != 0) {
      return Failed("backward", e);
    }
    control_.ProfileEnd("SsdBackward");
    return absl::OkStatus();
  }

 private:
  // Byte offsets of B and C within a row [x | B | C].
  int64_t ElemBytes() const { return bf16_ ? 2 : 4; }
  int64_t BOffset(const SsdActs& in) const { return in.heads * in.head_dim * ElemBytes(); }
  int64_t COffset(const SsdActs& in) const { return BOffset(in) + in.state * ElemBytes(); }

  ksc::DeviceProblem ProblemFor(const SsdActs& in) const {
    const char* rows = static_cast<const char*>(in.xbc.ptr);
    const int64_t width = in.heads * in.head_dim + 2 * in.state;
    return {.batch = in.batch,
            .seq_len = in.seq_len,
            .heads = in.heads,
            .head_dim = in.head_dim,
            .groups = 1,
            .state_dim = in.state,
            .bf16 = bf16_,
            .x = rows,
            .x_stride = width,
            .b_ptr = rows + BOffset(in),
            .c_ptr = rows + COffset(in),
            .bc_stride = width,
            .dt = in.dt_pre.ptr,
            .a_log = in.a_log,
            .dt_bias = in.dt_bias,
            .d = in.d,
            .s0 = in.s0,
            .doc_start = in.doc_start};
  }
  absl::Status Prepare(const ksc::DeviceProblem& p) {
    if (!ksc::Supported(p)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the SSD's CUDA kernels take head and state widths up to 128, got P=", p.head_dim,
          " N=", p.state_dim));
    }
    return workspace_.Ensure(ksc::WorkspaceBytes(p));
  }
  absl::Status Failed(const char* what, int e) {
    return control_.RecordError(absl::InternalError(
        absl::StrCat("SSD ", what, ": ", cudaGetErrorString(static_cast<cudaError_t>(e)))));
  }
  // Whether the workspace still holds the chunk states of a forward of this problem.
  bool SameAsLast(const ksc::DeviceProblem& p) const {
    return last_.batch == p.batch && last_.seq_len == p.seq_len && last_.heads == p.heads &&
           last_.head_dim == p.head_dim && last_.state_dim == p.state_dim && last_.x == p.x &&
           last_.dt == p.dt && last_.a_log == p.a_log && last_.dt_bias == p.dt_bias &&
           last_.d == p.d && last_.s0 == p.s0 && last_.doc_start == p.doc_start;
  }

  CudaBackendControl& control_;
  const bool bf16_;
  kernels::cuda::DeviceBuffer workspace_;
  ksc::DeviceProblem last_;
};

const bool kRegistered = RegisterOps<SsdOps>("cuda", [](Backend& backend) {
  CudaBackendControl* control = GetCudaControl(&backend);
  if (control == nullptr) return std::unique_ptr<SsdOps>();
  return std::unique_ptr<SsdOps>(std::make_unique<CudaSsdOps>(
      *control, backend.activation_type() == ActivationType::kBfloat16));
});

}  // namespace
}  // namespace mesa::model
