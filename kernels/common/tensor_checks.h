// Input checks every operator's validation shares (kernels/mesa/mesa_types.cc,
// kernels/deltanet/deltanet_types.cc, kernels/rglru/rglru_types.cc): element counts, finiteness
// and packed-sequence offsets, errors naming the tensor.
#ifndef MESANET_KERNELS_TENSOR_CHECKS_H_
#define MESANET_KERNELS_TENSOR_CHECKS_H_

#include <cstddef>
#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace mesa::kernels {

// InvalidArgument unless the tensor has exactly `expected` elements.
absl::Status CheckSize(absl::string_view name, size_t actual, int64_t expected);
// The same, but an empty (absent) tensor is fine.
absl::Status CheckOptionalSize(absl::string_view name, size_t actual, int64_t expected);
// InvalidArgument with "non-finite" and the flat index of the first NaN or infinity.
absl::Status CheckFinite(absl::string_view name, std::span<const float> data);
// The offsets of packed sequences (varlen mode, every operator the same): batch must be 1, N+1 >= 2
// int32 offsets from 0 to seq_len, non-decreasing (empty sequences allowed).
absl::Status CheckCuSeqlens(std::span<const int32_t> cu_seqlens, int64_t batch, int64_t seq_len);

}  // namespace mesa::kernels

#endif  // MESANET_KERNELS_TENSOR_CHECKS_H_
