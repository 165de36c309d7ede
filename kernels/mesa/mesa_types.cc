#include "kernels/mesa/mesa_types.h"

#include <cmath>
#include <mutex>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "kernels/common/limits.h"
#include "kernels/common/tensor_checks.h"

namespace mesa::kernels {

absl::Status ValidateMesaShape(const MesaDims& d, const CgOptions& cg) {
  if (d.batch < 1 || d.seq_len < 1 || d.heads < 1) {
    return absl::InvalidArgumentError(absl::StrCat("batch, seq_len and heads must be >= 1, got B=",
                                                   d.batch, " T=", d.seq_len, " H=", d.heads));
  }
  if (d.head_dim < kMinHeadDim || d.head_dim > kMaxHeadDim || d.head_dim % kHeadDimMultiple != 0) {
    return absl::InvalidArgumentError(absl::StrCat("head_dim must be a multiple of ",
                                                   kHeadDimMultiple, " in [", kMinHeadDim, ", ",
                                                   kMaxHeadDim, "], got D=", d.head_dim));
  }
  if (cg.max_steps < 0 || cg.max_steps > kMaxCgSteps) {
    return absl::InvalidArgumentError(
        absl::StrCat("cg max_steps must be in [0, ", kMaxCgSteps, "], got ", cg.max_steps));
  }
  if (!(cg.tolerance >= 0.f) || !std::isfinite(cg.tolerance)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cg tolerance must be finite and >= 0, got ", cg.tolerance));
  }
  return absl::OkStatus();
}

absl::Status ValidateMesaInputs(const MesaInputs& in, const MesaOptions& options) {
  const MesaDims& d = in.dims;
  if (auto s = ValidateMesaShape(d, options.cg); !s.ok()) return s;
  if (auto s = CheckSize("q", in.q.size(), d.TokenElems()); !s.ok()) return s;
  if (auto s = CheckSize("k", in.k.size(), d.TokenElems()); !s.ok()) return s;
  if (auto s = CheckSize("v", in.v.size(), d.TokenElems()); !s.ok()) return s;
  if (auto s = CheckSize("log_gamma", in.log_gamma.size(), d.GateElems()); !s.ok()) return s;
  if (auto s = CheckSize("beta", in.beta.size(), d.GateElems()); !s.ok()) return s;
  if (auto s = CheckSize("lambda", in.lambda.size(), d.LambdaElems()); !s.ok()) return s;
  if (in.is_varlen()) {
    if (auto s = CheckCuSeqlens(in.cu_seqlens, d.batch, d.seq_len); !s.ok()) return s;
  }
  if (auto s = CheckOptionalSize("h0", in.h0.size(), in.StateElems()); !s.ok()) return s;
  if (auto s = CheckOptionalSize("g0", in.g0.size(), in.StateElems()); !s.ok()) return s;

  if (options.memory == MemorySpace::kHost) {
    for (auto [name, data] : {std::pair{"q", in.q},
                              {"k", in.k},
                              {"v", in.v},
                              {"log_gamma", in.log_gamma},
                              {"beta", in.beta},
                              {"lambda", in.lambda},
                              {"h0", in.h0},
                              {"g0", in.g0}}) {
      if (auto s = CheckFinite(name, data); !s.ok()) return s;
    }
    for (size_t i = 0; i < in.lambda.size(); ++i) {
      if (!(in.lambda[i] > 0.f)) {
        return absl::InvalidArgumentError(absl::StrCat("lambda must be > 0 everywhere, got ",
                                                       in.lambda[i], " at flat index ", i));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateForwardOutputs(const MesaInputs& in, const MesaForwardOutputs& out) {
  if (auto s = CheckSize("o", out.o.size(), in.dims.TokenElems()); !s.ok()) return s;
  if (auto s = CheckOptionalSize("q_star", out.q_star.size(), in.dims.TokenElems()); !s.ok())
    return s;
  if (auto s = CheckOptionalSize("h_final", out.h_final.size(), in.StateElems()); !s.ok()) return s;
  if (auto s = CheckOptionalSize("g_final", out.g_final.size(), in.StateElems()); !s.ok()) return s;
  if (auto s = CheckOptionalSize("token_cg_steps", out.token_cg_steps.size(), in.dims.GateElems());
      !s.ok())
    return s;
  return absl::OkStatus();
}

absl::Status ValidateBackward(const MesaInputs& in, const MesaBackwardInputs& bwd,
                              const MesaGradients& grads, const MesaOptions& options) {
  const MesaDims& d = in.dims;
  if (auto s = CheckSize("q_star", bwd.q_star.size(), d.TokenElems()); !s.ok()) return s;
  if (auto s = CheckSize("do", bwd.d_o.size(), d.TokenElems()); !s.ok()) return s;
  if (auto s = CheckOptionalSize("dh_final", bwd.dh_final.size(), in.StateElems()); !s.ok())
    return s;
  if (auto s = CheckOptionalSize("dg_final", bwd.dg_final.size(), in.StateElems()); !s.ok())
    return s;
  if (auto s = CheckSize("dq", grads.dq.size(), d.TokenElems()); !s.ok()) return s;
  if (auto s = CheckSize("dk", grads.dk.size(), d.TokenElems()); !s.ok()) return s;
  if (auto s = CheckSize("dv", grads.dv.size(), d.TokenElems()); !s.ok()) return s;
  if (auto s = CheckSize("dlog_gamma", grads.dlog_gamma.size(), d.GateElems()); !s.ok()) return s;
  if (auto s = CheckSize("dbeta", grads.dbeta.size(), d.GateElems()); !s.ok()) return s;
  if (auto s = CheckSize("dlambda", grads.dlambda.size(), d.LambdaElems()); !s.ok()) return s;
  if (auto s = CheckOptionalSize("dh0", grads.dh0.size(), in.StateElems()); !s.ok()) return s;
  if (auto s = CheckOptionalSize("dg0", grads.dg0.size(), in.StateElems()); !s.ok()) return s;
  if (options.memory == MemorySpace::kHost) {
    for (auto [name, data] : {std::pair{"q_star", bwd.q_star},
                              {"do", bwd.d_o},
                              {"dh_final", bwd.dh_final},
                              {"dg_final", bwd.dg_final}}) {
      if (auto s = CheckFinite(name, data); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

namespace {
std::mutex& RegistryMutex() {
  static std::mutex mu;
  return mu;
}
std::optional<MesaBackend>& CudaBackendSlot() {
  static std::optional<MesaBackend> slot;
  return slot;
}
}  // namespace

void RegisterMesaCudaBackend(const MesaBackend& backend) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  CudaBackendSlot() = backend;
}

const MesaBackend* GetMesaCudaBackend() {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  return CudaBackendSlot().has_value() ? &*CudaBackendSlot() : nullptr;
}

}  // namespace mesa::kernels
