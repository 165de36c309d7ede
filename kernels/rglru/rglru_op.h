// The RG-LRU operator (Hawk's recurrence): one API over the float64 reference, the float32 chunked
// CPU scan and the CUDA kernels. Conventions in kernels/rglru/rglru_types.h.
#ifndef MESANET_KERNELS_RGLRU_RGLRU_OP_H_
#define MESANET_KERNELS_RGLRU_RGLRU_OP_H_

#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/rglru/rglru_types.h"

namespace mesa::kernels::rglru {

// Validates, then runs options.impl. h = the state after every token (and h_final).
absl::Status RgLruForward(const RgLruInputs& in, const RgLruOptions& options,
                          RgLruForwardOutputs* out);
// Validates, then runs options.impl: the gradients of L for ∂L/∂h_t = dh (+ dh_final).
absl::Status RgLruBackward(const RgLruInputs& in, const RgLruOptions& options,
                           const RgLruBackwardInputs& bwd, RgLruGradients* grads);

// "reference", "chunked" or "cuda" (the op-check tool's --impl).
absl::StatusOr<RgLruImpl> ParseRgLruImpl(std::string_view name);
std::string_view RgLruImplName(RgLruImpl impl);

}  // namespace mesa::kernels::rglru

#endif  // MESANET_KERNELS_RGLRU_RGLRU_OP_H_
