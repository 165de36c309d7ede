// The Mesa operator on the CUDA backend: kernels/mesa/cuda's device API on the backend's stream,
// one workspace shared by every Mesa layer of the backend (Backend::Shared; layers run one at a
// time).
#include <cuda_runtime.h>

#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

#include "kernels/mesa/cuda/mesa_cuda.h"
#include "kernels/mesa/cuda/mesa_step_cuda.h"
#include "model/backend/cuda/cuda_backend.h"
#include "model/mixers/mesa/mesa_ops.h"
#include "model/mixers/mixer_ops.h"

namespace mesa::model {
namespace {

namespace kc = ::mesa::kernels::cuda;

class CudaMesaOps final : public MesaOps {
 public:
  CudaMesaOps(CudaBackendControl& control, kc::Workspace& workspace, bool bf16)
      : control_(control), workspace_(workspace), bf16_(bf16) {}

  ~CudaMesaOps() override {
    for (int32_t* p : retired_) cudaFree(p);
    if (steps_ != nullptr) cudaFree(steps_);
  }

  absl::StatusOr<double> Forward(const MesaActs& in, const MesaSolve& solve, Act o,
                                 float* q_star) override {
    if (absl::Status s = Check(in, solve); !s.ok()) return s;
    host_steps_.clear();
    if (in.dims.seq_len == 1 && in.h_final != nullptr && in.g_final != nullptr) {
      return Step(in, solve, o, q_star);
    }
    if (!o || q_star == nullptr) return absl::InvalidArgumentError("MesaForward: null o or q_star");
    kc::DeviceForwardOutputs out;
    out.o = o.ptr;
    out.q_star = q_star;
    out.h_final = in.h_final;
    out.g_final = in.g_final;
    out.token_cg_steps = in.token_cg_steps;
    double steps = solve.max_steps;
    out.cg_steps_mean = StepsOut(solve, &steps);
    control_.ProfileBegin();
    if (absl::Status s = kc::ForwardDevice(in.dims, {}, CgFor(solve), DeviceInputsFor(in), out,
                                           &workspace_, Stream());
        !s.ok()) {
      return control_.RecordError(s);
    }
    control_.ProfileEnd("MesaForward");
    return steps;
  }

  absl::StatusOr<double> Backward(const MesaActs& in, const float* q_star, Act d_o,
                                  const MesaSolve& solve, const MesaActGrads& grads) override {
    if (absl::Status s = Check(in, solve); !s.ok()) return s;
    if (q_star == nullptr || !d_o || !grads.dq || !grads.dk || !grads.dv ||
        grads.dlog_gamma == nullptr || grads.dbeta == nullptr || grads.dlambda == nullptr) {
      return absl::InvalidArgumentError("MesaBackward: a required pointer is null");
    }
    kc::DeviceBackwardInputs b;
    b.q_star = q_star;
    b.d_o = d_o.ptr;
    b.dh_final = in.dh_final;
    b.dg_final = in.dg_final;
    kc::DeviceGradients g;
    g.dq = grads.dq.ptr;
    g.dk = grads.dk.ptr;
    g.dv = grads.dv.ptr;
    g.dlog_gamma = grads.dlog_gamma;
    g.dbeta = grads.dbeta;
    g.dlambda = grads.dlambda;
    g.dh0 = grads.dh0;
    g.dg0 = grads.dg0;
    double steps = solve.max_steps;
    g.cg_steps_mean = StepsOut(solve, &steps);
    control_.ProfileBegin();
    if (absl::Status s = kc::BackwardDevice(in.dims, {}, CgFor(solve), DeviceInputsFor(in), b, g,
                                            &workspace_, Stream());
        !s.ok()) {
      return control_.RecordError(s);
    }
    control_.ProfileEnd("MesaBackward");
    return steps;
  }

  std::vector<int32_t> LastHeadSteps() const override { return host_steps_; }
  bool FusesStepHeadNorm() const override { return true; }

 private:
  // One decoding token: the fused step kernel (kernels/mesa/cuda/mesa_step_cuda.h) on the state in
  // place, one launch; the finals start as copies of the initials (or zero) when they differ.
  absl::StatusOr<double> Step(const MesaActs& in, const MesaSolve& solve, Act o, float* q_star) {
    const kc::MesaStepDims dims{in.dims.batch, in.dims.heads, in.dims.head_dim};
    const size_t state_bytes = sizeof(float) * dims.StateElems();
    for (auto [from, to] : {std::pair{in.h0, in.h_final}, std::pair{in.g0, in.g_final}}) {
      const cudaError_t e =
          from == nullptr ? cudaMemsetAsync(to, 0, state_bytes, Stream())
          : from != to ? cudaMemcpyAsync(to, from, state_bytes, cudaMemcpyDeviceToDevice, Stream())
                       : cudaSuccess;
      if (e != cudaSuccess) {
        return control_.RecordError(absl::InternalError(
            absl::StrCat("Mesa decoding step state copy: ", cudaGetErrorString(e))));
      }
    }
    const int64_t rows = dims.GateElems();
    if (in.cg_steps == nullptr && rows > steps_capacity_) {
      // A recorded step may still name the old buffer: it lives as long as this object.
      if (steps_ != nullptr) retired_.push_back(steps_);
      steps_ = nullptr;
      steps_capacity_ = 0;
      if (cudaMalloc(&steps_, sizeof(int32_t) * rows) != cudaSuccess) {
        cudaGetLastError();
        return absl::ResourceExhaustedError("Mesa decoding step: CG step counts");
      }
      steps_capacity_ = rows;
    }
    int32_t* counts = in.cg_steps != nullptr ? in.cg_steps : steps_;
    const kc::DeviceInputs d = DeviceInputsFor(in);
    const kc::MesaStepDeviceInputs step{.dtype = d.dtype,
                                        .q = d.q,
                                        .k = d.k,
                                        .v = d.v,
                                        .log_gamma = in.log_gamma,
                                        .beta = in.beta,
                                        .lambda = in.lambda};
    control_.ProfileBegin();
    if (absl::Status s =
            kc::MesaStepDevice(dims, CgFor(solve), step, {.h = in.h_final, .g = in.g_final},
                               {.o = o.ptr,
                                .q_star = q_star,
                                .cg_steps = counts,
                                .o_normed = in.o_normed.ptr,
                                .norm_weight = in.norm_weight,
                                .norm_eps = in.norm_eps},
                               Stream());
        !s.ok()) {
      return control_.RecordError(s);
    }
    control_.ProfileEnd("MesaStep");
    double unused = solve.max_steps;
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    cudaStreamIsCapturing(Stream(), &capturing);
    // Fixed steps take exactly max_steps; while recording no read-back may synchronise (a
    // recorded tolerance step's counts are read back by MesaNet from in.cg_steps after replay).
    if (StepsOut(solve, &unused) == nullptr || capturing != cudaStreamCaptureStatusNone) {
      return static_cast<double>(solve.max_steps);
    }
    // Tolerance mode (or exact counts asked for): the per-(sequence, head) counts, read back.
    host_steps_.resize(rows);
    if (cudaMemcpyAsync(host_steps_.data(), counts, sizeof(int32_t) * rows, cudaMemcpyDeviceToHost,
                        Stream()) != cudaSuccess ||
        cudaStreamSynchronize(Stream()) != cudaSuccess) {
      return control_.RecordError(absl::InternalError("Mesa decoding step: CG counts readback"));
    }
    double sum = 0;
    for (int32_t n : host_steps_) sum += n;
    return rows > 0 ? sum / rows : 0.0;
  }

  cudaStream_t Stream() const { return static_cast<cudaStream_t>(control_.stream()); }
  static kernels::CgOptions CgFor(const MesaSolve& solve) {
    kernels::CgOptions cg;
    cg.max_steps = solve.max_steps;
    cg.tolerance = solve.tolerance;
    return cg;
  }
  // Where the op writes its mean CG steps: `steps` when they are read back (one sync), else
  // nowhere (a fixed-step solve reports max_steps).
  double* StepsOut(const MesaSolve& solve, double* steps) const {
    return control_.options().exact_cg_steps || solve.tolerance > 0 ? steps : nullptr;
  }
  // The backend's sticky error first (its earlier failures make every later call a no-op).
  absl::Status Check(const MesaActs& in, const MesaSolve& solve) const {
    if (absl::Status s = control_.status(); !s.ok()) return s;
    if (absl::Status s = kernels::ValidateMesaShape(in.dims, CgFor(solve)); !s.ok()) return s;
    if (!in.q || !in.k || !in.v || in.log_gamma == nullptr || in.beta == nullptr ||
        in.lambda == nullptr) {
      return absl::InvalidArgumentError("Mesa operator: a required input pointer is null");
    }
    return absl::OkStatus();
  }
  kc::DeviceInputs DeviceInputsFor(const MesaActs& in) const {
    kc::DeviceInputs d;
    d.dtype = bf16_ ? kc::DType::kBF16 : kc::DType::kF32;
    d.q = in.q.ptr;
    d.k = in.k.ptr;
    d.v = in.v.ptr;
    d.log_gamma = in.log_gamma;
    d.beta = in.beta;
    d.lambda = in.lambda;
    d.h0 = in.h0;
    d.g0 = in.g0;
    return d;
  }

  CudaBackendControl& control_;
  kc::Workspace& workspace_;
  const bool bf16_;
  int32_t* steps_ = nullptr;  // device [B,H] CG steps of the last decoding step
  int64_t steps_capacity_ = 0;
  std::vector<int32_t*> retired_;
  std::vector<int32_t> host_steps_;
};

const bool kRegistered = RegisterOps<MesaOps>("cuda", [](Backend& backend) {
  CudaBackendControl* control = GetCudaControl(&backend);
  if (control == nullptr) return std::unique_ptr<MesaOps>();
  return std::unique_ptr<MesaOps>(
      std::make_unique<CudaMesaOps>(*control, backend.Shared<kc::Workspace>("mesa_cuda_workspace"),
                                    backend.activation_type() == ActivationType::kBfloat16));
});

}  // namespace
}  // namespace mesa::model
