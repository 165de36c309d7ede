// The mLSTM's CUDA kernels behind the operator's host-memory API (kernels/mlstm/mlstm_op.h with
// impl = kCuda): inputs copied to the device in float32, the kernels of mlstm_kernels.h, outputs
// copied back. For the op-check tool and the tests; the model calls the device API directly.
#ifndef MESANET_KERNELS_MLSTM_CUDA_MLSTM_CUDA_H_
#define MESANET_KERNELS_MLSTM_CUDA_MLSTM_CUDA_H_

#include "absl/status/status.h"
#include "kernels/mlstm/mlstm_types.h"

namespace mesa::kernels::mlstm::cuda {

absl::Status CudaForward(const MlstmInputs& in, const MlstmOptions& options,
                         MlstmForwardOutputs* out);
absl::Status CudaBackward(const MlstmInputs& in, const MlstmOptions& options,
                          const MlstmBackwardInputs& bwd, MlstmGradients* grads);

}  // namespace mesa::kernels::mlstm::cuda

#endif  // MESANET_KERNELS_MLSTM_CUDA_MLSTM_CUDA_H_
