// The SSD operator (Mamba-2's scan): one API over the float64 oracle and the float32 CPU
// recurrence. Conventions in kernels/ssd/ssd_types.h.
#ifndef MESANET_KERNELS_SSD_SSD_OP_H_
#define MESANET_KERNELS_SSD_SSD_OP_H_

#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/ssd/ssd_types.h"

namespace mesa::kernels::ssd {

absl::Status SsdForward(const SsdInputs& in, const SsdOptions& options, SsdForwardOutputs* out);
absl::Status SsdBackward(const SsdInputs& in, const SsdOptions& options,
                         const SsdBackwardInputs& bwd, SsdGradients* grads);

// "reference", "recurrent" or "chunked" (the op-check tool's --impl).
absl::StatusOr<SsdImpl> ParseSsdImpl(std::string_view name);
std::string_view SsdImplName(SsdImpl impl);

}  // namespace mesa::kernels::ssd

#endif  // MESANET_KERNELS_SSD_SSD_OP_H_
