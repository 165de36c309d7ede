// The mLSTM on the CPU backend (mlstm_ops_cpu.cc), for wrappers that build on it (the GPU test's
// bf16-rounding CPU backend).
#ifndef MESANET_MODEL_MIXERS_MLSTM_MLSTM_OPS_CPU_H_
#define MESANET_MODEL_MIXERS_MLSTM_MLSTM_OPS_CPU_H_

#include <memory>

#include "model/backend/cpu_backend.h"
#include "model/mixers/mlstm/mlstm_ops.h"

namespace mesa::model {

std::unique_ptr<MlstmOps> MakeCpuMlstmOps(const CpuBackendOptions& options);

}  // namespace mesa::model

#endif  // MESANET_MODEL_MIXERS_MLSTM_MLSTM_OPS_CPU_H_
