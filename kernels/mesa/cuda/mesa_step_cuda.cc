#include "kernels/mesa/cuda/mesa_step_cuda.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/common/cuda/step_checks.h"
#include "kernels/mesa/cuda/mesa_step_kernels.h"

namespace mesa::kernels::cuda {

absl::Status ValidateMesaStepDevice(const MesaStepDims& d, const CgOptions& cg,
                                    const MesaStepDeviceInputs& in,
                                    const MesaStepDeviceState& state,
                                    const MesaStepDeviceOutputs& out) {
  if (auto s = ValidateMesaShape(MesaDims{d.batch, 1, d.heads, d.head_dim}, cg); !s.ok()) {
    return s;
  }
  if (auto s = CheckStepRows("batch * heads", d.GateElems()); !s.ok()) return s;
  if (auto s = CheckRequired({{"q", in.q},
                              {"k", in.k},
                              {"v", in.v},
                              {"log_gamma", in.log_gamma},
                              {"beta", in.beta},
                              {"lambda", in.lambda},
                              {"g", state.g},
                              {"o", out.o}});
      !s.ok()) {
    return s;
  }
  if (out.o_normed != nullptr) {
    if (out.norm_weight == nullptr) {
      return absl::InvalidArgumentError("norm_weight is required with o_normed");
    }
    if (!(out.norm_eps >= 0) || !std::isfinite(out.norm_eps)) {
      return absl::InvalidArgumentError(
          absl::StrCat("norm_eps must be finite and >= 0, got ", out.norm_eps));
    }
    if (out.o_normed == out.o) return absl::InvalidArgumentError("o_normed must not be o");
  }
  if (cg.max_steps > 0 && state.h == nullptr) {
    return absl::InvalidArgumentError(
        "h is required (it may be null only with 0 CG steps, the GLA readout)");
  }
  return CheckAligned16({{"h", state.h}, {"g", state.g}});
}

absl::Status MesaStepDevice(const MesaStepDims& dims, const CgOptions& cg,
                            const MesaStepDeviceInputs& in, MesaStepDeviceState state,
                            const MesaStepDeviceOutputs& out, cudaStream_t stream) {
  return MesaStepDeviceVariant(0, dims, cg, in, state, out, stream);
}

absl::Status MesaStepDeviceVariant(int variant, const MesaStepDims& dims, const CgOptions& cg,
                                   const MesaStepDeviceInputs& in, MesaStepDeviceState state,
                                   const MesaStepDeviceOutputs& out, cudaStream_t stream) {
  if (auto s = ValidateMesaStepDevice(dims, cg, in, state, out); !s.ok()) return s;
  MesaStepKernelArgs a;
  a.batch = static_cast<int>(dims.batch);
  a.heads = static_cast<int>(dims.heads);
  a.head_dim = static_cast<int>(dims.head_dim);
  a.dtype = in.dtype;
  a.q = in.q;
  a.k = in.k;
  a.v = in.v;
  a.log_gamma = in.log_gamma;
  a.beta = in.beta;
  a.lambda = in.lambda;
  a.h = state.h;
  a.g = state.g;
  a.o = out.o;
  a.q_star = out.q_star;
  a.cg_steps = out.cg_steps;
  a.o_normed = out.o_normed;
  a.norm_weight = out.norm_weight;
  a.norm_eps = out.norm_eps;
  a.max_steps = cg.max_steps;
  a.tolerance = cg.tolerance;
  a.variant = variant;
  if (cudaError_t e = LaunchMesaStep(a, stream); e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("Mesa step launch: ", cudaGetErrorString(e)));
  }
  return absl::OkStatus();
}

}  // namespace mesa::kernels::cuda
