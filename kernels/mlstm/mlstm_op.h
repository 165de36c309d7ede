// The mLSTM operator (xLSTM's matrix memory): one API over the float64 oracle and the float32
// CPU recurrence. Conventions in kernels/mlstm/mlstm_types.h.
#ifndef MESANET_KERNELS_MLSTM_MLSTM_OP_H_
#define MESANET_KERNELS_MLSTM_MLSTM_OP_H_

#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/mlstm/mlstm_types.h"

namespace mesa::kernels::mlstm {

absl::Status MlstmForward(const MlstmInputs& in, const MlstmOptions& options,
                          MlstmForwardOutputs* out);
absl::Status MlstmBackward(const MlstmInputs& in, const MlstmOptions& options,
                           const MlstmBackwardInputs& bwd, MlstmGradients* grads);

// "reference" or "recurrent" (the op-check tool's --impl).
absl::StatusOr<MlstmImpl> ParseMlstmImpl(std::string_view name);
std::string_view MlstmImplName(MlstmImpl impl);

}  // namespace mesa::kernels::mlstm

#endif  // MESANET_KERNELS_MLSTM_MLSTM_OP_H_
