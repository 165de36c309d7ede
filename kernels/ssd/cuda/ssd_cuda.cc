#include "kernels/ssd/cuda/ssd_cuda.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/common/cuda/device_arena.h"
#include "kernels/ssd/cuda/ssd_kernels.h"

namespace mesa::kernels::ssd::cuda {
namespace {

using ::mesa::kernels::cuda::DeviceArena;

// The problem on the device (float32): x, B, C as separate tensors, the reset mask as the
// kernels' document starts.
absl::StatusOr<DeviceProblem> Upload(const SsdInputs& in, DeviceArena& arena) {
  const SsdDims& d = in.dims;
  DeviceProblem p{.batch = d.batch,
                  .seq_len = d.seq_len,
                  .heads = d.heads,
                  .head_dim = d.head_dim,
                  .groups = d.groups,
                  .state_dim = d.state_dim,
                  .x_stride = d.heads * d.head_dim,
                  .bc_stride = d.groups * d.state_dim};
  if (!Supported(p)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the SSD's CUDA kernels take head and state widths up to 128, got P=", d.head_dim,
        " N=", d.state_dim, "; use impl = chunked"));
  }
  MESA_ASSIGN_OR_RETURN(x, arena.Copy(in.x));
  MESA_ASSIGN_OR_RETURN(dt, arena.Copy(in.dt));
  MESA_ASSIGN_OR_RETURN(a_log, arena.Copy(in.a_log));
  MESA_ASSIGN_OR_RETURN(dt_bias, arena.Copy(in.dt_bias));
  MESA_ASSIGN_OR_RETURN(skip, arena.Copy(in.d));
  MESA_ASSIGN_OR_RETURN(b, arena.Copy(in.b));
  MESA_ASSIGN_OR_RETURN(c, arena.Copy(in.c));
  MESA_ASSIGN_OR_RETURN(s0, arena.Copy(in.s0));
  p.x = x;
  p.dt = dt;
  p.a_log = a_log;
  p.dt_bias = dt_bias;
  p.d = skip;
  p.b_ptr = b;
  p.c_ptr = c;
  p.s0 = s0;
  MESA_ASSIGN_OR_RETURN(doc_start, arena.DocStarts(in.reset, d.seq_len));
  p.doc_start = doc_start;
  p.restart_at_row_start = true;
  return p;
}

}  // namespace

absl::Status CudaForward(const SsdInputs& in, const SsdOptions& /*options*/,
                         SsdForwardOutputs* out) {
  DeviceArena arena("SSD");
  absl::StatusOr<DeviceProblem> p = Upload(in, arena);
  if (!p.ok()) return p.status();
  MESA_ASSIGN_OR_RETURN(y, arena.Alloc<float>(out->y.size()));
  MESA_ASSIGN_OR_RETURN(s_final, arena.Alloc<float>(out->s_final.size()));
  MESA_ASSIGN_OR_RETURN(workspace, arena.Alloc<char>(WorkspaceBytes(*p)));
  MESA_RETURN_IF_ERROR(arena.Check(
      static_cast<cudaError_t>(SsdForwardDevice(*p, y, s_final, workspace, nullptr)), "forward"));
  MESA_RETURN_IF_ERROR(arena.Check(cudaDeviceSynchronize(), "forward"));
  MESA_RETURN_IF_ERROR(arena.CopyOut(out->y, y));
  return arena.CopyOut(out->s_final, s_final);
}

absl::Status CudaBackward(const SsdInputs& in, const SsdOptions& /*options*/,
                          const SsdBackwardInputs& bwd, SsdGradients* grads) {
  DeviceArena arena("SSD");
  absl::StatusOr<DeviceProblem> p = Upload(in, arena);
  if (!p.ok()) return p.status();
  const int64_t h = in.dims.heads;
  MESA_ASSIGN_OR_RETURN(dy, arena.Copy(bwd.dy));
  MESA_ASSIGN_OR_RETURN(ds_final, arena.Copy(bwd.ds_final));
  MESA_ASSIGN_OR_RETURN(dx, arena.Alloc<float>(grads->dx.size()));
  MESA_ASSIGN_OR_RETURN(ddt, arena.Alloc<float>(grads->ddt.size()));
  MESA_ASSIGN_OR_RETURN(db, arena.Alloc<float>(grads->db.size()));
  MESA_ASSIGN_OR_RETURN(dc, arena.Alloc<float>(grads->dc.size()));
  MESA_ASSIGN_OR_RETURN(params, arena.Alloc<float>(3 * h));  // dA_log | ddt_bias | dD
  MESA_ASSIGN_OR_RETURN(ds0, arena.Alloc<float>(grads->ds0.size()));
  MESA_ASSIGN_OR_RETURN(workspace, arena.Alloc<char>(WorkspaceBytes(*p)));
  MESA_RETURN_IF_ERROR(arena.Check(cudaMemset(params, 0, 3 * h * sizeof(float)), "memset"));
  MESA_RETURN_IF_ERROR(arena.Check(
      static_cast<cudaError_t>(SsdBackwardDevice(*p, dy, ds_final, dx, ddt, db, dc, params,
                                                 params + h, params + 2 * h, ds0, workspace,
                                                 /*states_valid=*/false, nullptr)),
      "backward"));
  MESA_RETURN_IF_ERROR(arena.Check(cudaDeviceSynchronize(), "backward"));
  for (auto [host, device] : {std::pair{grads->dx, static_cast<const float*>(dx)},
                              {grads->ddt, ddt},
                              {grads->db, db},
                              {grads->dc, dc},
                              {grads->da_log, params},
                              {grads->ddt_bias, params + h},
                              {grads->dd, params + 2 * h},
                              {grads->ds0, ds0}}) {
    MESA_RETURN_IF_ERROR(arena.CopyOut(host, device));
  }
  return absl::OkStatus();
}

}  // namespace mesa::kernels::ssd::cuda
