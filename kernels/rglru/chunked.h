// The RG-LRU in float32 on the CPU as a three-phase chunked scan (kernels/rglru/README.md; the
// CUDA op streams instead): (1) every chunk scans from zero and keeps its end value
// and total log decay, (2) a short sequential pass over the chunks carries the state, (3) every
// chunk re-scans from its carried-in state. Threads over (row, chunk); dp reduced in a fixed order.
#ifndef MESANET_KERNELS_RGLRU_CHUNKED_H_
#define MESANET_KERNELS_RGLRU_CHUNKED_H_

#include "absl/status/status.h"
#include "kernels/rglru/rglru_types.h"

namespace mesa::kernels::rglru {

absl::Status ChunkedForward(const RgLruInputs& in, const RgLruOptions& options,
                            RgLruForwardOutputs* out);
absl::Status ChunkedBackward(const RgLruInputs& in, const RgLruOptions& options,
                             const RgLruBackwardInputs& bwd, RgLruGradients* grads);

}  // namespace mesa::kernels::rglru

#endif  // MESANET_KERNELS_RGLRU_CHUNKED_H_
