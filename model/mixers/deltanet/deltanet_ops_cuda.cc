// The DeltaNet-family operator on the CUDA backend: kernels/deltanet/cuda's device API on the
// backend's stream. Each layer's instance owns its workspace, so that the layer's backward reuses
// what its forward computed (the workspace checks that dims and input pointers match, else it
// recomputes); about 150 MB per layer at MesaNet-small's B8 x T2048.
#include <memory>

#include "kernels/deltanet/cuda/deltanet_cuda.h"
#include "kernels/deltanet/cuda/step_cuda.h"
#include "model/backend/cuda/cuda_backend.h"
#include "model/mixers/deltanet/deltanet_ops.h"
#include "model/mixers/mixer_ops.h"

namespace mesa::model {
namespace {

namespace kc = ::mesa::kernels::cuda;
namespace kdc = ::mesa::kernels::deltanet::cuda;

class CudaDeltaNetOps final : public DeltaNetOps {
 public:
  CudaDeltaNetOps(CudaBackendControl& control, bool bf16) : control_(control), bf16_(bf16) {}

  absl::Status Forward(const DeltaActs& in, Act o) override {
    if (absl::Status s = Check(in); !s.ok()) return s;
    if (!o) return absl::InvalidArgumentError("DeltaNetForward: null o");
    if (in.dims.seq_len == 1 && in.s0 != nullptr && in.s0 == in.s_final) {
      // One decoding token, state carried in place: the fused step kernel, one launch.
      const kdc::DeviceInputs d = DeviceInputsFor(in);
      control_.ProfileBegin();
      if (absl::Status s = kdc::DeltaStepDevice({in.dims.batch, in.dims.heads, in.dims.head_dim},
                                                {.dtype = d.dtype,
                                                 .q = d.q,
                                                 .k = d.k,
                                                 .v = d.v,
                                                 .beta = d.beta,
                                                 .log_gamma = d.log_gamma},
                                                in.s_final, o.ptr, Stream());
          !s.ok()) {
        return control_.RecordError(s);
      }
      control_.ProfileEnd("DeltaNetStep");
      return absl::OkStatus();
    }
    control_.ProfileBegin();
    // A decoding call (it carries the state in place) has no backward: keep nothing for one. A
    // context-parallel slice writes its final state elsewhere and has one.
    kdc::DeviceForwardOutputs out{
        o.ptr, in.s_final,
        /*keep_for_backward=*/in.s_final == nullptr || in.s_final != in.s0};
    if (absl::Status s =
            kdc::ForwardDevice(DimsFor(in), {}, DeviceInputsFor(in), out, &workspace_, Stream());
        !s.ok()) {
      return control_.RecordError(s);
    }
    control_.ProfileEnd("DeltaNetForward");
    return absl::OkStatus();
  }

  absl::Status Backward(const DeltaActs& in, Act d_o, const DeltaActGrads& grads) override {
    if (absl::Status s = Check(in); !s.ok()) return s;
    if (!d_o || !grads.dq || !grads.dk || !grads.dv || grads.dbeta == nullptr ||
        (in.log_gamma != nullptr) != (grads.dlog_gamma != nullptr)) {
      return absl::InvalidArgumentError("DeltaNetBackward: a required pointer is null");
    }
    kdc::DeviceGradients g{grads.dq.ptr, grads.dk.ptr,     grads.dv.ptr,
                           grads.dbeta,  grads.dlog_gamma, grads.ds0};
    control_.ProfileBegin();
    kdc::DeviceBackwardInputs b{d_o.ptr, in.ds_final, /*reuse_forward=*/true};
    if (absl::Status s =
            kdc::BackwardDevice(DimsFor(in), {}, DeviceInputsFor(in), b, g, &workspace_, Stream());
        !s.ok()) {
      return control_.RecordError(s);
    }
    control_.ProfileEnd("DeltaNetBackward");
    return absl::OkStatus();
  }

 private:
  cudaStream_t Stream() const { return static_cast<cudaStream_t>(control_.stream()); }
  static kernels::deltanet::DeltaDims DimsFor(const DeltaActs& in) {
    return {in.dims.batch, in.dims.seq_len, in.dims.heads, in.dims.head_dim};
  }
  // The backend's sticky error first (its earlier failures make every later call a no-op).
  absl::Status Check(const DeltaActs& in) const {
    if (absl::Status s = control_.status(); !s.ok()) return s;
    if (absl::Status s = kdc::CheckDeviceDims(DimsFor(in)); !s.ok()) return s;
    if (!in.q || !in.k || !in.v || in.beta == nullptr) {
      return absl::InvalidArgumentError("DeltaNet operator: a required input pointer is null");
    }
    return absl::OkStatus();
  }
  kdc::DeviceInputs DeviceInputsFor(const DeltaActs& in) const {
    kdc::DeviceInputs d;
    d.dtype = bf16_ ? kc::DType::kBF16 : kc::DType::kF32;
    d.q = in.q.ptr;
    d.k = in.k.ptr;
    d.v = in.v.ptr;
    d.beta = in.beta;
    d.log_gamma = in.log_gamma;
    d.s0 = in.s0;
    return d;
  }

  CudaBackendControl& control_;
  const bool bf16_;
  kdc::Workspace workspace_;
};

const bool kRegistered = RegisterOps<DeltaNetOps>("cuda", [](Backend& backend) {
  CudaBackendControl* control = GetCudaControl(&backend);
  if (control == nullptr) return std::unique_ptr<DeltaNetOps>();
  return std::unique_ptr<DeltaNetOps>(std::make_unique<CudaDeltaNetOps>(
      *control, backend.activation_type() == ActivationType::kBfloat16));
});

}  // namespace
}  // namespace mesa::model
