#include "kernels/mlstm/mlstm_types.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/common/tensor_checks.h"

namespace mesa::kernels::mlstm {
namespace {

// All of a group of optional tensors, or none.
absl::Status AllOrNone(absl::string_view what, std::initializer_list<size_t> sizes) {
  bool any = false, all = true;
  for (size_t s : sizes) {
    any |= s != 0;
    all &= s != 0;
  }
  if (any && !all) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": give all of them or none"));
  }
  return absl::OkStatus();
}

const MlstmCudaBackend*& CudaBackendSlot() {
  static const MlstmCudaBackend* backend = nullptr;
  return backend;
}

}  // namespace

absl::Status ValidateMlstmInputs(const MlstmInputs& in, const MlstmOptions& options) {
  const MlstmDims& d = in.dims;
  if (d.batch < 1 || d.seq_len < 1 || d.heads < 1 || d.key_dim < 1 || d.value_dim < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch, seq_len, heads, key_dim and value_dim must be >= 1, got B=", d.batch,
                     " T=", d.seq_len, " H=", d.heads, " Dk=", d.key_dim, " Dv=", d.value_dim));
  }
  if (options.num_threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_threads must be >= 0, got ", options.num_threads));
  }
  if (options.chunk_size < 1 || options.chunk_size > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk_size must be in [1, 1024], got ", options.chunk_size));
  }
  if (!(options.eps >= 0)) return absl::InvalidArgumentError("eps must be >= 0");
  if (auto s = CheckSize("q", in.q.size(), d.KeyElems()); !s.ok()) return s;
  if (auto s = CheckSize("k", in.k.size(), d.KeyElems()); !s.ok()) return s;
  if (auto s = CheckSize("v", in.v.size(), d.ValueElems()); !s.ok()) return s;
  if (auto s = CheckSize("i", in.i.size(), d.GateElems()); !s.ok()) return s;
  if (auto s = CheckSize("f", in.f.size(), d.GateElems()); !s.ok()) return s;
  if (auto s = CheckOptionalSize("reset", in.reset.size(), d.batch * d.seq_len); !s.ok()) {
    return s;
  }
  if (auto s = CheckOptionalSize("c0", in.c0.size(), d.CElems()); !s.ok()) return s;
  if (auto s = CheckOptionalSize("n0", in.n0.size(), d.NElems()); !s.ok()) return s;
  if (auto s = CheckOptionalSize("m0", in.m0.size(), d.MElems()); !s.ok()) return s;
  if (auto s = AllOrNone("c0, n0, m0", {in.c0.size(), in.n0.size(), in.m0.size()}); !s.ok()) {
    return s;
  }
  for (auto [name, data] : {std::pair{"q", in.q},
                            {"k", in.k},
                            {"v", in.v},
                            {"i", in.i},
                            {"f", in.f},
                            {"c0", in.c0},
                            {"n0", in.n0},
                            {"m0", in.m0}}) {
    if (auto s = CheckFinite(name, data); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ValidateMlstmForwardOutputs(const MlstmInputs& in, const MlstmForwardOutputs& out) {
  const MlstmDims& d = in.dims;
  if (auto s = CheckSize("h", out.h.size(), d.ValueElems()); !s.ok()) return s;
  if (auto s = CheckOptionalSize("c_final", out.c_final.size(), d.CElems()); !s.ok()) return s;
  if (auto s = CheckOptionalSize("n_final", out.n_final.size(), d.NElems()); !s.ok()) return s;
  if (auto s = CheckOptionalSize("m_final", out.m_final.size(), d.MElems()); !s.ok()) return s;
  return AllOrNone("c_final, n_final, m_final",
                   {out.c_final.size(), out.n_final.size(), out.m_final.size()});
}

absl::Status ValidateMlstmBackward(const MlstmInputs& in, const MlstmBackwardInputs& bwd,
                                   const MlstmGradients& grads) {
  const MlstmDims& d = in.dims;
  if (auto s = CheckSize("do", bwd.dh.size(), d.ValueElems()); !s.ok()) return s;
  if (auto s = CheckOptionalSize("dc_final", bwd.dc_final.size(), d.CElems()); !s.ok()) return s;
  if (auto s = CheckOptionalSize("dn_final", bwd.dn_final.size(), d.NElems()); !s.ok()) return s;
  if (auto s = AllOrNone("dc_final, dn_final", {bwd.dc_final.size(), bwd.dn_final.size()});
      !s.ok()) {
    return s;
  }
  if (auto s = CheckSize("dq", grads.dq.size(), d.KeyElems()); !s.ok()) return s;
  if (auto s = CheckSize("dk", grads.dk.size(), d.KeyElems()); !s.ok()) return s;
  if (auto s = CheckSize("dv", grads.dv.size(), d.ValueElems()); !s.ok()) return s;
  if (auto s = CheckSize("di", grads.di.size(), d.GateElems()); !s.ok()) return s;
  if (auto s = CheckSize("df", grads.df.size(), d.GateElems()); !s.ok()) return s;
  if (auto s = CheckOptionalSize("dc0", grads.dc0.size(), d.CElems()); !s.ok()) return s;
  if (auto s = CheckOptionalSize("dn0", grads.dn0.size(), d.NElems()); !s.ok()) return s;
  if (auto s = AllOrNone("dc0, dn0", {grads.dc0.size(), grads.dn0.size()}); !s.ok()) return s;
  for (auto [name, data] :
       {std::pair{"do", bwd.dh}, {"dc_final", bwd.dc_final}, {"dn_final", bwd.dn_final}}) {
    if (auto s = CheckFinite(name, data); !s.ok()) return s;
  }
  return absl::OkStatus();
}

void RegisterMlstmCudaBackend(const MlstmCudaBackend& backend) {
  static MlstmCudaBackend stored;
  stored = backend;
  CudaBackendSlot() = &stored;
}

const MlstmCudaBackend* GetMlstmCudaBackend() { return CudaBackendSlot(); }

}  // namespace mesa::kernels::mlstm
