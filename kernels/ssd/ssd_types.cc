#include "kernels/ssd/ssd_types.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/common/tensor_checks.h"

namespace mesa::kernels::ssd {
namespace {

const SsdCudaBackend*& CudaBackendSlot() {
  static const SsdCudaBackend* backend = nullptr;
  return backend;
}

}  // namespace

absl::Status ValidateSsdInputs(const SsdInputs& in, const SsdOptions& options) {
  const SsdDims& d = in.dims;
  if (d.batch < 1 || d.seq_len < 1 || d.heads < 1 || d.head_dim < 1 || d.groups < 1 ||
      d.state_dim < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch, seq_len, heads, head_dim, groups and state_dim must be >= 1, got B=", d.batch,
        " T=", d.seq_len, " H=", d.heads, " P=", d.head_dim, " G=", d.groups, " N=", d.state_dim));
  }
  if (d.heads % d.groups != 0) {
    return absl::InvalidArgumentError(absl::StrCat("heads (", d.heads,
                                                   ") must be a multiple of groups (", d.groups,
                                                   "): each group's B and C serve H/G heads"));
  }
  if (options.num_threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_threads must be >= 0, got ", options.num_threads));
  }
  if (options.chunk_size < 1 || options.chunk_size > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk_size must be in [1, 1024], got ", options.chunk_size));
  }
  if (auto s = CheckSize("x", in.x.size(), d.XElems()); !s.ok()) return s;
  if (auto s = CheckSize("dt", in.dt.size(), d.GateElems()); !s.ok()) return s;
  if (auto s = CheckSize("A_log", in.a_log.size(), d.heads); !s.ok()) return s;
  if (auto s = CheckSize("dt_bias", in.dt_bias.size(), d.heads); !s.ok()) return s;
  if (auto s = CheckSize("D", in.d.size(), d.heads); !s.ok()) return s;
  if (auto s = CheckSize("B", in.b.size(), d.BcElems()); !s.ok()) return s;
  if (auto s = CheckSize("C", in.c.size(), d.BcElems()); !s.ok()) return s;
  if (auto s = CheckOptionalSize("reset", in.reset.size(), d.batch * d.seq_len); !s.ok()) {
    return s;
  }
  if (auto s = CheckOptionalSize("s0", in.s0.size(), d.StateElems()); !s.ok()) return s;
  for (auto [name, data] : {std::pair{"x", in.x},
                            {"dt", in.dt},
                            {"A_log", in.a_log},
                            {"dt_bias", in.dt_bias},
                            {"D", in.d},
                            {"B", in.b},
                            {"C", in.c},
                            {"s0", in.s0}}) {
    if (auto s = CheckFinite(name, data); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ValidateSsdForwardOutputs(const SsdInputs& in, const SsdForwardOutputs& out) {
  const SsdDims& d = in.dims;
  if (auto s = CheckSize("y", out.y.size(), d.XElems()); !s.ok()) return s;
  return CheckOptionalSize("s_final", out.s_final.size(), d.StateElems());
}

absl::Status ValidateSsdBackward(const SsdInputs& in, const SsdBackwardInputs& bwd,
                                 const SsdGradients& grads) {
  const SsdDims& d = in.dims;
  if (auto s = CheckSize("dy", bwd.dy.size(), d.XElems()); !s.ok()) return s;
  if (auto s = CheckOptionalSize("ds_final", bwd.ds_final.size(), d.StateElems()); !s.ok()) {
    return s;
  }
  if (auto s = CheckSize("dx", grads.dx.size(), d.XElems()); !s.ok()) return s;
  if (auto s = CheckSize("ddt", grads.ddt.size(), d.GateElems()); !s.ok()) return s;
  if (auto s = CheckSize("dA_log", grads.da_log.size(), d.heads); !s.ok()) return s;
  if (auto s = CheckSize("ddt_bias", grads.ddt_bias.size(), d.heads); !s.ok()) return s;
  if (auto s = CheckSize("dD", grads.dd.size(), d.heads); !s.ok()) return s;
  if (auto s = CheckSize("dB", grads.db.size(), d.BcElems()); !s.ok()) return s;
  if (auto s = CheckSize("dC", grads.dc.size(), d.BcElems()); !s.ok()) return s;
  if (auto s = CheckOptionalSize("ds0", grads.ds0.size(), d.StateElems()); !s.ok()) return s;
  for (auto [name, data] : {std::pair{"dy", bwd.dy}, {"ds_final", bwd.ds_final}}) {
    if (auto s = CheckFinite(name, data); !s.ok()) return s;
  }
  return absl::OkStatus();
}

void RegisterSsdCudaBackend(const SsdCudaBackend& backend) {
  static SsdCudaBackend stored;
  stored = backend;
  CudaBackendSlot() = &stored;
}

const SsdCudaBackend* GetSsdCudaBackend() { return CudaBackendSlot(); }

}  // namespace mesa::kernels::ssd
