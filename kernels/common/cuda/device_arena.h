// Device copies of one host-memory operator call's tensors (the CUDA operators' host seams:
// rglru_cuda.cc, mlstm_cuda.cc): allocations freed together, copies in and out, and CUDA errors
// as absl::Status naming the operator.
#ifndef MESANET_KERNELS_COMMON_CUDA_DEVICE_ARENA_H_
#define MESANET_KERNELS_COMMON_CUDA_DEVICE_ARENA_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

// Status plumbing of the host seams.
#define MESA_ASSIGN_OR_RETURN(lhs, expr)        \
  auto lhs##_or = (expr);                       \
  if (!lhs##_or.ok()) return lhs##_or.status(); \
  auto lhs = *lhs##_or
#define MESA_RETURN_IF_ERROR(expr)                     \
  do {                                                 \
    if (absl::Status s_ = (expr); !s_.ok()) return s_; \
  } while (0)

namespace mesa::kernels::cuda {

class DeviceArena {
 public:
  explicit DeviceArena(std::string op) : op_(std::move(op)) {}
  ~DeviceArena() {
    for (void* p : allocations_) cudaFree(p);
  }
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  // n elements of T (null for n == 0).
  template <typename T>
  absl::StatusOr<T*> Alloc(size_t n) {
    if (n == 0) return static_cast<T*>(nullptr);
    void* p = nullptr;
    if (absl::Status s = Check(cudaMalloc(&p, n * sizeof(T)), "cudaMalloc"); !s.ok()) return s;
    allocations_.push_back(p);
    return static_cast<T*>(p);
  }
  // A device copy of `host` (null when empty).
  template <typename T>
  absl::StatusOr<T*> Copy(std::span<const T> host) {
    if (host.empty()) return static_cast<T*>(nullptr);
    absl::StatusOr<T*> d = Alloc<T>(host.size());
    if (!d.ok()) return d.status();
    if (absl::Status s = Check(
            cudaMemcpy(*d, host.data(), host.size_bytes(), cudaMemcpyHostToDevice), "copy in");
        !s.ok()) {
      return s;
    }
    return *d;
  }
  // Copies device memory back into `host` (nothing when empty).
  absl::Status CopyOut(std::span<float> host, const float* device) const {
    if (host.empty()) return absl::OkStatus();
    return Check(cudaMemcpy(host.data(), device, host.size_bytes(), cudaMemcpyDeviceToHost),
                 "copy out");
  }
  // OK, or Internal "<op> CUDA <what>: <CUDA's message>".
  // A device copy of an operator's reset mask [B*T] as the kernels' document starts: token t of
  // a row at t where reset, −1 elsewhere (null when the mask is empty).
  absl::StatusOr<const int32_t*> DocStarts(std::span<const uint8_t> reset, int64_t seq_len) {
    if (reset.empty()) return static_cast<const int32_t*>(nullptr);
    std::vector<int32_t> doc_start(reset.size());
    for (size_t r = 0; r < doc_start.size(); ++r) {
      doc_start[r] = reset[r] != 0 ? static_cast<int32_t>(r % seq_len) : -1;
    }
    absl::StatusOr<int32_t*> d = Copy(std::span<const int32_t>(doc_start));
    if (!d.ok()) return d.status();
    return static_cast<const int32_t*>(*d);
  }
  absl::Status Check(cudaError_t e, absl::string_view what) const {
    if (e == cudaSuccess) return absl::OkStatus();
    return absl::InternalError(absl::StrCat(op_, " CUDA ", what, ": ", cudaGetErrorString(e)));
  }

 private:
  std::string op_;
  std::vector<void*> allocations_;
};

}  // namespace mesa::kernels::cuda

#endif  // MESANET_KERNELS_COMMON_CUDA_DEVICE_ARENA_H_
