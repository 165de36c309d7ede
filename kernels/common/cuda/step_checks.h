// Host-side argument checks shared by the device decoding steps (mesa_step_cuda.h,
// causal_conv_step_cuda.h, deltanet/cuda/step_cuda.h). They look at pointers only, never at
// device memory.
#ifndef MESANET_KERNELS_COMMON_CUDA_STEP_CHECKS_H_
#define MESANET_KERNELS_COMMON_CUDA_STEP_CHECKS_H_

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace mesa::kernels::cuda {

using NamedPointer = std::pair<const char*, const void*>;

// One CTA or thread index per row: rows (e.g. batch * heads) must fit an int32 grid.
inline absl::Status CheckStepRows(const char* what, int64_t rows) {
  if (rows > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " must be < 2^31, got ", rows));
  }
  return absl::OkStatus();
}

inline absl::Status CheckRequired(std::initializer_list<NamedPointer> pointers) {
  for (auto [name, ptr] : pointers) {
    if (ptr == nullptr) return absl::InvalidArgumentError(absl::StrCat(name, " is required"));
  }
  return absl::OkStatus();
}

// Null passes (optional tensors).
inline absl::Status CheckAligned16(std::initializer_list<NamedPointer> pointers) {
  for (auto [name, ptr] : pointers) {
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) {
      return absl::InvalidArgumentError(absl::StrCat(name, " must be 16-byte aligned"));
    }
  }
  return absl::OkStatus();
}

}  // namespace mesa::kernels::cuda

#endif  // MESANET_KERNELS_COMMON_CUDA_STEP_CHECKS_H_
