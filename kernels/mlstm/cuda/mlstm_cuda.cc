#include "kernels/mlstm/cuda/mlstm_cuda.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/common/cuda/device_arena.h"
#include "kernels/mlstm/cuda/mlstm_kernels.h"

namespace mesa::kernels::mlstm::cuda {
namespace {

using ::mesa::kernels::cuda::DeviceArena;

// The problem on the device (float32), the reset mask as the kernels' document starts.
absl::StatusOr<DeviceProblem> Upload(const MlstmInputs& in, const MlstmOptions& options,
                                     DeviceArena& arena) {
  const MlstmDims& d = in.dims;
  DeviceProblem p{.batch = d.batch,
                  .seq_len = d.seq_len,
                  .heads = d.heads,
                  .key_dim = d.key_dim,
                  .value_dim = d.value_dim,
                  .eps = static_cast<float>(options.eps)};
  if (!Supported(p)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the mLSTM's CUDA kernels take key and value widths up to ", kCudaMaxDim,
                     ", got Dk=", d.key_dim, " Dv=", d.value_dim, "; use impl = chunked"));
  }
  MESA_ASSIGN_OR_RETURN(q, arena.Copy(in.q));
  MESA_ASSIGN_OR_RETURN(k, arena.Copy(in.k));
  MESA_ASSIGN_OR_RETURN(v, arena.Copy(in.v));
  MESA_ASSIGN_OR_RETURN(ig, arena.Copy(in.i));
  MESA_ASSIGN_OR_RETURN(fg, arena.Copy(in.f));
  MESA_ASSIGN_OR_RETURN(c0, arena.Copy(in.c0));
  MESA_ASSIGN_OR_RETURN(n0, arena.Copy(in.n0));
  MESA_ASSIGN_OR_RETURN(m0, arena.Copy(in.m0));
  p.q = q;
  p.k = k;
  p.v = v;
  p.i = ig;
  p.f = fg;
  p.c0 = c0;
  p.n0 = n0;
  p.m0 = m0;
  MESA_ASSIGN_OR_RETURN(doc_start, arena.DocStarts(in.reset, d.seq_len));
  p.doc_start = doc_start;
  p.restart_at_row_start = true;
  return p;
}

}  // namespace

absl::Status CudaForward(const MlstmInputs& in, const MlstmOptions& options,
                         MlstmForwardOutputs* out) {
  DeviceArena arena("mLSTM");
  absl::StatusOr<DeviceProblem> p = Upload(in, options, arena);
  if (!p.ok()) return p.status();
  const MlstmDims& d = in.dims;
  const bool finals = !out->c_final.empty();
  MESA_ASSIGN_OR_RETURN(h, arena.Alloc<float>(out->h.size()));
  MESA_ASSIGN_OR_RETURN(c, arena.Alloc<float>(finals ? d.CElems() : 0));
  MESA_ASSIGN_OR_RETURN(n, arena.Alloc<float>(finals ? d.NElems() : 0));
  MESA_ASSIGN_OR_RETURN(m, arena.Alloc<float>(finals ? d.MElems() : 0));
  MESA_ASSIGN_OR_RETURN(workspace, arena.Alloc<char>(WorkspaceBytes(*p)));
  MESA_RETURN_IF_ERROR(arena.Check(
      static_cast<cudaError_t>(MlstmForwardDevice(*p, h, c, n, m, workspace, nullptr)), "forward"));
  MESA_RETURN_IF_ERROR(arena.Check(cudaDeviceSynchronize(), "forward"));
  for (auto [host, device] :
       {std::pair{out->h, h}, {out->c_final, c}, {out->n_final, n}, {out->m_final, m}}) {
    MESA_RETURN_IF_ERROR(arena.CopyOut(host, device));
  }
  return absl::OkStatus();
}

absl::Status CudaBackward(const MlstmInputs& in, const MlstmOptions& options,
                          const MlstmBackwardInputs& bwd, MlstmGradients* grads) {
  DeviceArena arena("mLSTM");
  absl::StatusOr<DeviceProblem> p = Upload(in, options, arena);
  if (!p.ok()) return p.status();
  MESA_ASSIGN_OR_RETURN(dh, arena.Copy(bwd.dh));
  MESA_ASSIGN_OR_RETURN(dc_final, arena.Copy(bwd.dc_final));
  MESA_ASSIGN_OR_RETURN(dn_final, arena.Copy(bwd.dn_final));
  MESA_ASSIGN_OR_RETURN(dq, arena.Alloc<float>(grads->dq.size()));
  MESA_ASSIGN_OR_RETURN(dk, arena.Alloc<float>(grads->dk.size()));
  MESA_ASSIGN_OR_RETURN(dv, arena.Alloc<float>(grads->dv.size()));
  MESA_ASSIGN_OR_RETURN(di, arena.Alloc<float>(grads->di.size()));
  MESA_ASSIGN_OR_RETURN(df, arena.Alloc<float>(grads->df.size()));
  MESA_ASSIGN_OR_RETURN(dc0, arena.Alloc<float>(grads->dc0.size()));
  MESA_ASSIGN_OR_RETURN(dn0, arena.Alloc<float>(grads->dn0.size()));
  MESA_ASSIGN_OR_RETURN(workspace, arena.Alloc<char>(WorkspaceBytes(*p)));
  MESA_RETURN_IF_ERROR(
      arena.Check(static_cast<cudaError_t>(MlstmBackwardDevice(*p, dh, dc_final, dn_final, dq, dk,
                                                               dv, di, df, dc0, dn0, workspace,
                                                               /*states_valid=*/false, nullptr)),
                  "backward"));
  MESA_RETURN_IF_ERROR(arena.Check(cudaDeviceSynchronize(), "backward"));
  for (auto [host, device] : {std::pair{grads->dq, dq},
                              {grads->dk, dk},
                              {grads->dv, dv},
                              {grads->di, di},
                              {grads->df, df},
                              {grads->dc0, dc0},
                              {grads->dn0, dn0}}) {
    MESA_RETURN_IF_ERROR(arena.CopyOut(host, device));
  }
  return absl::OkStatus();
}

}  // namespace mesa::kernels::mlstm::cuda
