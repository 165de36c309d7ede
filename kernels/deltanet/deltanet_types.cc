#include "kernels/deltanet/deltanet_types.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "kernels/common/tensor_checks.h"

namespace mesa::kernels::deltanet {

absl::Status ValidateDeltaInputs(const DeltaInputs& in, const DeltaOptions& options) {
  const DeltaDims& d = in.dims;
  if (d.batch < 1 || d.seq_len < 1 || d.heads < 1 || d.head_dim < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch, seq_len, heads and head_dim must be >= 1, got B=", d.batch,
                     " T=", d.seq_len, " H=", d.heads, " D=", d.head_dim));
  }
  if (options.num_threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_threads must be >= 0, got ", options.num_threads));
  }
  if (options.chunk_size < 1 || options.chunk_size > kMaxDeltaChunkSize) {
    return absl::InvalidArgumentError(absl::StrCat("chunk_size must be in [1, ", kMaxDeltaChunkSize,
                                                   "], got ", options.chunk_size));
  }
  if (auto s = CheckSize("q", in.q.size(), d.TokenElems()); !s.ok()) return s;
  if (auto s = CheckSize("k", in.k.size(), d.TokenElems()); !s.ok()) return s;
  if (auto s = CheckSize("v", in.v.size(), d.TokenElems()); !s.ok()) return s;
  if (auto s = CheckSize("beta", in.beta.size(), d.GateElems()); !s.ok()) return s;
  if (auto s = CheckOptionalSize("log_gamma", in.log_gamma.size(), d.GateElems()); !s.ok()) {
    return s;
  }
  if (in.is_varlen()) {
    if (auto s = CheckCuSeqlens(in.cu_seqlens, d.batch, d.seq_len); !s.ok()) return s;
  }
  if (auto s = CheckOptionalSize("s0", in.s0.size(), in.StateElems()); !s.ok()) return s;
  for (auto [name, data] : {std::pair{"q", in.q},
                            {"k", in.k},
                            {"v", in.v},
                            {"beta", in.beta},
                            {"log_gamma", in.log_gamma},
                            {"s0", in.s0}}) {
    if (auto s = CheckFinite(name, data); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ValidateDeltaForwardOutputs(const DeltaInputs& in, const DeltaForwardOutputs& out) {
  if (auto s = CheckSize("o", out.o.size(), in.dims.TokenElems()); !s.ok()) return s;
  return CheckOptionalSize("s_final", out.s_final.size(), in.StateElems());
}

absl::Status ValidateDeltaBackward(const DeltaInputs& in, const DeltaBackwardInputs& bwd,
                                   const DeltaGradients& grads) {
  const DeltaDims& d = in.dims;
  if (auto s = CheckSize("do", bwd.d_o.size(), d.TokenElems()); !s.ok()) return s;
  if (auto s = CheckOptionalSize("ds_final", bwd.ds_final.size(), in.StateElems()); !s.ok()) {
    return s;
  }
  if (auto s = CheckSize("dq", grads.dq.size(), d.TokenElems()); !s.ok()) return s;
  if (auto s = CheckSize("dk", grads.dk.size(), d.TokenElems()); !s.ok()) return s;
  if (auto s = CheckSize("dv", grads.dv.size(), d.TokenElems()); !s.ok()) return s;
  if (auto s = CheckSize("dbeta", grads.dbeta.size(), d.GateElems()); !s.ok()) return s;
  if (in.is_gated()) {
    if (auto s = CheckSize("dlog_gamma", grads.dlog_gamma.size(), d.GateElems()); !s.ok()) {
      return s;
    }
  } else if (!grads.dlog_gamma.empty()) {
    return absl::InvalidArgumentError(
        "tensor 'dlog_gamma' must be empty for ungated DeltaNet (log_gamma absent)");
  }
  if (auto s = CheckOptionalSize("ds0", grads.ds0.size(), in.StateElems()); !s.ok()) return s;
  for (auto [name, data] : {std::pair{"do", bwd.d_o}, {"ds_final", bwd.ds_final}}) {
    if (auto s = CheckFinite(name, data); !s.ok()) return s;
  }
  return absl::OkStatus();
}

namespace {
DeltaCudaBackend& CudaBackendSlot() {
  static DeltaCudaBackend backend;
  return backend;
}
}  // namespace

void RegisterDeltaCudaBackend(const DeltaCudaBackend& backend) { CudaBackendSlot() = backend; }

const DeltaCudaBackend* GetDeltaCudaBackend() {
  const DeltaCudaBackend& b = CudaBackendSlot();
  return b.forward != nullptr ? &b : nullptr;
}

}  // namespace mesa::kernels::deltanet
