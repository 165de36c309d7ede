// The SSD's CUDA kernels behind the operator's host-memory API (kernels/ssd/ssd_op.h with impl =
// kCuda): inputs copied to the device in float32, the kernels of ssd_kernels.h, outputs copied
// back. For the op-check tool and the tests; the model calls the device API directly.
#ifndef MESANET_KERNELS_SSD_CUDA_SSD_CUDA_H_
#define MESANET_KERNELS_SSD_CUDA_SSD_CUDA_H_

#include "absl/status/status.h"
#include "kernels/ssd/ssd_types.h"

namespace mesa::kernels::ssd::cuda {

absl::Status CudaForward(const SsdInputs& in, const SsdOptions& options, SsdForwardOutputs* out);
absl::Status CudaBackward(const SsdInputs& in, const SsdOptions& options,
                          const SsdBackwardInputs& bwd, SsdGradients* grads);

}  // namespace mesa::kernels::ssd::cuda

#endif  // MESANET_KERNELS_SSD_CUDA_SSD_CUDA_H_
