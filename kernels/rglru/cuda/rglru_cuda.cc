#include "kernels/rglru/cuda/rglru_cuda.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/rglru/cuda/rglru_kernels.h"

namespace mesa::kernels::rglru::cuda {
namespace {

absl::Status CudaError(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("RG-LRU CUDA ", what, ": ", cudaGetErrorString(e)));
}

#define RETURN_IF_CUDA(expr, what)                                        \
  do {                                                                    \
    if (absl::Status s_ = CudaError((expr), (what)); !s_.ok()) return s_; \
  } while (0)

// Device copies of one call's tensors, freed on destruction.
class DeviceArena {
 public:
  ~DeviceArena() {
    for (void* p : allocations_) cudaFree(p);
  }
  template <typename T>
  absl::StatusOr<T*> Alloc(size_t n) {
    void* p = nullptr;
    if (n == 0) return static_cast<T*>(nullptr);
    RETURN_IF_CUDA(cudaMalloc(&p, n * sizeof(T)), "cudaMalloc");
    allocations_.push_back(p);
    return static_cast<T*>(p);
  }
  template <typename T>
  absl::StatusOr<T*> Copy(std::span<const T> host) {
    if (host.empty()) return static_cast<T*>(nullptr);
    absl::StatusOr<T*> d = Alloc<T>(host.size());
    if (!d.ok()) return d.status();
    RETURN_IF_CUDA(cudaMemcpy(*d, host.data(), host.size_bytes(), cudaMemcpyHostToDevice),
                   "copy in");
    return *d;
  }

 private:
  std::vector<void*> allocations_;
};

#define ASSIGN_OR_RETURN(lhs, expr)             \
  auto lhs##_or = (expr);                       \
  if (!lhs##_or.ok()) return lhs##_or.status(); \
  auto lhs = *lhs##_or

absl::Status CopyOut(std::span<float> host, const float* device) {
  if (host.empty()) return absl::OkStatus();
  RETURN_IF_CUDA(cudaMemcpy(host.data(), device, host.size_bytes(), cudaMemcpyDeviceToHost),
                 "copy out");
  return absl::OkStatus();
}

// The problem on the device (float32), with the restart masks in the kernels' conventions.
absl::StatusOr<DeviceProblem> Upload(const RgLruInputs& in, DeviceArena& arena) {
  DeviceProblem p{.batch = in.dims.batch, .seq_len = in.dims.seq_len, .width = in.dims.width};
  ASSIGN_OR_RETURN(u, arena.Copy(in.u));
  ASSIGN_OR_RETURN(rho, arena.Copy(in.rho));
  ASSIGN_OR_RETURN(iota, arena.Copy(in.iota));
  ASSIGN_OR_RETURN(decay, arena.Copy(in.p));
  ASSIGN_OR_RETURN(h0, arena.Copy(in.h0));
  p.u = u;
  p.rho = rho;
  p.iota = iota;
  p.p = decay;
  p.h0 = h0;
  if (!in.started.empty()) {
    std::vector<float> started(in.started.begin(), in.started.end());
    ASSIGN_OR_RETURN(d_started, arena.Copy(std::span<const float>(started)));
    p.started = d_started;
  }
  if (!in.reset.empty()) {
    std::vector<int32_t> doc_start(in.reset.size());
    for (size_t r = 0; r < doc_start.size(); ++r) {
      const int32_t t = static_cast<int32_t>(r % in.dims.seq_len);
      doc_start[r] = in.reset[r] != 0 ? t : -1;  // the kernels restart where doc_start == t
    }
    ASSIGN_OR_RETURN(d_doc, arena.Copy(std::span<const int32_t>(doc_start)));
    p.doc_start = d_doc;
  }
  return p;
}

}  // namespace

absl::Status CudaForward(const RgLruInputs& in, const RgLruOptions& /*options*/,
                         RgLruForwardOutputs* out) {
  DeviceArena arena;
  absl::StatusOr<DeviceProblem> p = Upload(in, arena);
  if (!p.ok()) return p.status();
  ASSIGN_OR_RETURN(h, arena.Alloc<float>(out->h.size()));
  ASSIGN_OR_RETURN(h_final, arena.Alloc<float>(p->batch * p->width));
  ASSIGN_OR_RETURN(workspace, arena.Alloc<char>(WorkspaceBytes(*p)));
  RETURN_IF_CUDA(
      static_cast<cudaError_t>(RgLruForwardDevice(*p, h, h_final, nullptr, workspace, nullptr)),
      "forward");
  RETURN_IF_CUDA(cudaDeviceSynchronize(), "forward");
  if (absl::Status s = CopyOut(out->h, h); !s.ok()) return s;
  return CopyOut(out->h_final, h_final);
}

absl::Status CudaBackward(const RgLruInputs& in, const RgLruOptions& /*options*/,
                          const RgLruBackwardInputs& bwd, RgLruGradients* grads) {
  DeviceArena arena;
  absl::StatusOr<DeviceProblem> p = Upload(in, arena);
  if (!p.ok()) return p.status();
  const size_t n = grads->du.size();
  ASSIGN_OR_RETURN(dh, arena.Copy(bwd.dh));
  ASSIGN_OR_RETURN(dh_final, arena.Copy(bwd.dh_final));
  ASSIGN_OR_RETURN(du, arena.Alloc<float>(n));
  ASSIGN_OR_RETURN(drho, arena.Alloc<float>(n));
  ASSIGN_OR_RETURN(diota, arena.Alloc<float>(n));
  ASSIGN_OR_RETURN(dp, arena.Alloc<float>(p->width));
  ASSIGN_OR_RETURN(dh0, arena.Alloc<float>(p->batch * p->width));
  ASSIGN_OR_RETURN(workspace, arena.Alloc<char>(WorkspaceBytes(*p)));
  ASSIGN_OR_RETURN(partials, arena.Alloc<char>(DpPartialBytes(*p)));
  RETURN_IF_CUDA(cudaMemset(dp, 0, sizeof(float) * p->width), "memset");
  RETURN_IF_CUDA(static_cast<cudaError_t>(RgLruBackwardDevice(
                     *p, dh, dh_final, du, drho, diota, dp, dh0, workspace,
                     /*carried_valid=*/false, reinterpret_cast<float*>(partials), nullptr)),
                 "backward");
  RETURN_IF_CUDA(cudaDeviceSynchronize(), "backward");
  for (auto [host, device] : {std::pair{grads->du, du},
                              {grads->drho, drho},
                              {grads->diota, diota},
                              {grads->dp, dp},
                              {grads->dh0, dh0}}) {
    if (absl::Status s = CopyOut(host, device); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace mesa::kernels::rglru::cuda
