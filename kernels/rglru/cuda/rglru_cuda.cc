#include "kernels/rglru/cuda/rglru_cuda.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/common/cuda/device_arena.h"
#include "kernels/rglru/cuda/rglru_kernels.h"

namespace mesa::kernels::rglru::cuda {
namespace {

using ::mesa::kernels::cuda::DeviceArena;

// The problem on the device (float32), with the restart masks in the kernels' conventions.
absl::StatusOr<DeviceProblem> Upload(const RgLruInputs& in, RgLruScan scan, DeviceArena& arena) {
  DeviceProblem p{
      .batch = in.dims.batch, .seq_len = in.dims.seq_len, .width = in.dims.width, .scan = scan};
  MESA_ASSIGN_OR_RETURN(u, arena.Copy(in.u));
  MESA_ASSIGN_OR_RETURN(rho, arena.Copy(in.rho));
  MESA_ASSIGN_OR_RETURN(iota, arena.Copy(in.iota));
  MESA_ASSIGN_OR_RETURN(decay, arena.Copy(in.p));
  MESA_ASSIGN_OR_RETURN(h0, arena.Copy(in.h0));
  p.u = u;
  p.rho = rho;
  p.iota = iota;
  p.p = decay;
  p.h0 = h0;
  if (!in.started.empty()) {
    std::vector<float> started(in.started.begin(), in.started.end());
    MESA_ASSIGN_OR_RETURN(d_started, arena.Copy(std::span<const float>(started)));
    p.started = d_started;
  }
  MESA_ASSIGN_OR_RETURN(doc_start, arena.DocStarts(in.reset, in.dims.seq_len));
  p.doc_start = doc_start;  // the kernels restart where doc_start == t
  return p;
}

}  // namespace

absl::Status CudaForward(const RgLruInputs& in, const RgLruOptions& /*options*/,
                         RgLruForwardOutputs* out) {
  return CudaForwardOnScan(in, RgLruScan::kAuto, out);
}

absl::Status CudaBackward(const RgLruInputs& in, const RgLruOptions& /*options*/,
                          const RgLruBackwardInputs& bwd, RgLruGradients* grads) {
  return CudaBackwardOnScan(in, RgLruScan::kAuto, bwd, grads);
}

absl::Status CudaForwardOnScan(const RgLruInputs& in, RgLruScan scan, RgLruForwardOutputs* out) {
  DeviceArena arena("RG-LRU");
  absl::StatusOr<DeviceProblem> p = Upload(in, scan, arena);
  if (!p.ok()) return p.status();
  MESA_ASSIGN_OR_RETURN(h, arena.Alloc<float>(out->h.size()));
  MESA_ASSIGN_OR_RETURN(h_final, arena.Alloc<float>(p->batch * p->width));
  MESA_ASSIGN_OR_RETURN(workspace, arena.Alloc<char>(WorkspaceBytes(*p)));
  MESA_RETURN_IF_ERROR(arena.Check(
      static_cast<cudaError_t>(RgLruForwardDevice(*p, h, h_final, nullptr, workspace, nullptr)),
      "forward"));
  MESA_RETURN_IF_ERROR(arena.Check(cudaDeviceSynchronize(), "forward"));
  MESA_RETURN_IF_ERROR(arena.CopyOut(out->h, h));
  return arena.CopyOut(out->h_final, h_final);
}

absl::Status CudaBackwardOnScan(const RgLruInputs& in, RgLruScan scan,
                                const RgLruBackwardInputs& bwd, RgLruGradients* grads) {
  DeviceArena arena("RG-LRU");
  absl::StatusOr<DeviceProblem> p = Upload(in, scan, arena);
  if (!p.ok()) return p.status();
  const size_t n = grads->du.size();
  MESA_ASSIGN_OR_RETURN(dh, arena.Copy(bwd.dh));
  MESA_ASSIGN_OR_RETURN(dh_final, arena.Copy(bwd.dh_final));
  MESA_ASSIGN_OR_RETURN(du, arena.Alloc<float>(n));
  MESA_ASSIGN_OR_RETURN(drho, arena.Alloc<float>(n));
  MESA_ASSIGN_OR_RETURN(diota, arena.Alloc<float>(n));
  MESA_ASSIGN_OR_RETURN(dp, arena.Alloc<float>(p->width));
  MESA_ASSIGN_OR_RETURN(dh0, arena.Alloc<float>(p->batch * p->width));
  MESA_ASSIGN_OR_RETURN(workspace, arena.Alloc<char>(WorkspaceBytes(*p)));
  MESA_ASSIGN_OR_RETURN(partials, arena.Alloc<char>(DpPartialBytes(*p)));
  MESA_RETURN_IF_ERROR(arena.Check(cudaMemset(dp, 0, sizeof(float) * p->width), "memset"));
  MESA_RETURN_IF_ERROR(
      arena.Check(static_cast<cudaError_t>(RgLruBackwardDevice(
                      *p, dh, dh_final, du, drho, diota, dp, dh0, workspace,
                      /*carried_valid=*/false, reinterpret_cast<float*>(partials), nullptr)),
                  "backward"));
  MESA_RETURN_IF_ERROR(arena.Check(cudaDeviceSynchronize(), "backward"));
  for (auto [host, device] : {std::pair{grads->du, du},
                              {grads->drho, drho},
                              {grads->diota, diota},
                              {grads->dp, dp},
                              {grads->dh0, dh0}}) {
    MESA_RETURN_IF_ERROR(arena.CopyOut(host, device));
  }
  return absl::OkStatus();
}

}  // namespace mesa::kernels::rglru::cuda
