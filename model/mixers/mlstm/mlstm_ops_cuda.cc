// The mLSTM on the CUDA backend: kernels/mlstm/cuda's device API on the backend's stream, in the
// backend's activation type (k unscaled: the kernels apply 1/sqrt(D) on load and to dk). Each
// layer's instance owns its workspace, so that the layer's backward reuses the chunk states its
// forward computed (when the inputs are the same buffers and shape; else they are recomputed).
#include <cuda_runtime.h>

#include <cmath>
#include <memory>

#include "absl/strings/str_cat.h"
#include "kernels/common/cuda/device_scratch.h"
#include "kernels/mlstm/cuda/mlstm_kernels.h"
#include "model/backend/cuda/cuda_backend.h"
#include "model/mixers/mixer_ops.h"
#include "model/mixers/mlstm/mlstm_ops.h"

namespace mesa::model {
namespace {

namespace kmc = ::mesa::kernels::mlstm::cuda;

class CudaMlstmOps final : public MlstmOps {
 public:
  CudaMlstmOps(CudaBackendControl& control, bool bf16) : control_(control), bf16_(bf16) {}

  absl::Status Forward(const MlstmActs& in, Act h) override {
    if (absl::Status s = control_.status(); !s.ok()) return s;
    const kmc::DeviceProblem p = ProblemFor(in);
    if (absl::Status s = Prepare(p); !s.ok()) return s;
    control_.ProfileBegin();
    if (int e = kmc::MlstmForwardDevice(p, h.ptr, in.c_final, in.n_final, in.m_final,
                                        workspace_.ptr, control_.stream());
        e != 0) {
      return Failed("forward", e);
    }
    control_.ProfileEnd("MlstmForward");
    last_ = p;
    return absl::OkStatus();
  }

  absl::Status Backward(const MlstmActs& in, Act dh, const MlstmActGrads& grads) override {
    if (absl::Status s = control_.status(); !s.ok()) return s;
    const kmc::DeviceProblem p = ProblemFor(in);
    if (absl::Status s = Prepare(p); !s.ok()) return s;
    control_.ProfileBegin();
    if (int e = kmc::MlstmBackwardDevice(p, dh.ptr, in.dc_final, in.dn_final, grads.dq.ptr,
                                         grads.dk.ptr, grads.dv.ptr, grads.di_pre.ptr,
                                         grads.df_pre.ptr, grads.dc0, grads.dn0, workspace_.ptr,
                                         SameAsLast(p), control_.stream());
        e != 0) {
      return Failed("backward", e);
    }
    control_.ProfileEnd("MlstmBackward");
    return absl::OkStatus();
  }

 private:
  kmc::DeviceProblem ProblemFor(const MlstmActs& in) const {
    return {.batch = in.batch,
            .seq_len = in.seq_len,
            .heads = in.heads,
            .key_dim = in.head_dim,
            .value_dim = in.head_dim,
            .bf16 = bf16_,
            .q = in.q.ptr,
            .k = in.k.ptr,
            .v = in.v.ptr,
            .i = in.i_pre.ptr,
            .f = in.f_pre.ptr,
            .k_scale = 1.0f / std::sqrt(static_cast<float>(in.head_dim)),
            .c0 = in.c0,
            .n0 = in.n0,
            .m0 = in.m0,
            .doc_start = in.doc_start};
  }
  absl::Status Prepare(const kmc::DeviceProblem& p) {
    if (!kmc::Supported(p)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the mLSTM's CUDA kernels take head dims up to ", kmc::kCudaMaxDim, ", got ", p.key_dim));
    }
    return workspace_.Ensure(kmc::WorkspaceBytes(p));
  }
  absl::Status Failed(const char* what, int e) {
    return control_.RecordError(absl::InternalError(
        absl::StrCat("mLSTM ", what, ": ", cudaGetErrorString(static_cast<cudaError_t>(e)))));
  }
  // Whether the workspace still holds the chunk states of a forward of this problem (the layer's
  // backward follows its own forward on the same buffers).
  bool SameAsLast(const kmc::DeviceProblem& p) const {
    return last_.batch == p.batch && last_.seq_len == p.seq_len && last_.heads == p.heads &&
           last_.key_dim == p.key_dim && last_.q == p.q && last_.k == p.k && last_.v == p.v &&
           last_.i == p.i && last_.f == p.f && last_.c0 == p.c0 && last_.n0 == p.n0 &&
           last_.m0 == p.m0 && last_.doc_start == p.doc_start;
  }

  CudaBackendControl& control_;
  const bool bf16_;
  kernels::cuda::DeviceBuffer workspace_;
  kmc::DeviceProblem last_;
};

const bool kRegistered = RegisterOps<MlstmOps>("cuda", [](Backend& backend) {
  CudaBackendControl* control = GetCudaControl(&backend);
  if (control == nullptr) return std::unique_ptr<MlstmOps>();
  return std::unique_ptr<MlstmOps>(std::make_unique<CudaMlstmOps>(
      *control, backend.activation_type() == ActivationType::kBfloat16));
});

}  // namespace
}  // namespace mesa::model
