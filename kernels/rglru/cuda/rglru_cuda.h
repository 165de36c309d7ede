// The RG-LRU's CUDA kernels behind the operator's host-memory API (kernels/rglru/rglru_op.h with
// impl = kCuda): inputs copied to the device in float32, the kernels of rglru_kernels.h, outputs
// copied back. For the op-check tool and the tests; the model calls the device API directly.
#ifndef MESANET_KERNELS_RGLRU_CUDA_RGLRU_CUDA_H_
#define MESANET_KERNELS_RGLRU_CUDA_RGLRU_CUDA_H_

#include "absl/status/status.h"
#include "kernels/rglru/cuda/rglru_kernels.h"
#include "kernels/rglru/rglru_types.h"

namespace mesa::kernels::rglru::cuda {

absl::Status CudaForward(const RgLruInputs& in, const RgLruOptions& options,
                         RgLruForwardOutputs* out);
absl::Status CudaBackward(const RgLruInputs& in, const RgLruOptions& options,
                          const RgLruBackwardInputs& bwd, RgLruGradients* grads);

// The same on a given scan (kAuto: as above), for the tests that cover both.
absl::Status CudaForwardOnScan(const RgLruInputs& in, RgLruScan scan, RgLruForwardOutputs* out);
absl::Status CudaBackwardOnScan(const RgLruInputs& in, RgLruScan scan,
                                const RgLruBackwardInputs& bwd, RgLruGradients* grads);

}  // namespace mesa::kernels::rglru::cuda

#endif  // MESANET_KERNELS_RGLRU_CUDA_RGLRU_CUDA_H_
