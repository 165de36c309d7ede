// Mamba-2's SSD on the CPU backend (ssd_ops_cpu.cc), for wrappers that build on it (the GPU
// test's bf16-rounding CPU backend).
#ifndef MESANET_MODEL_MIXERS_MAMBA2_SSD_OPS_CPU_H_
#define MESANET_MODEL_MIXERS_MAMBA2_SSD_OPS_CPU_H_

#include <memory>

#include "model/backend/cpu_backend.h"
#include "model/mixers/mamba2/ssd_ops.h"

namespace mesa::model {

std::unique_ptr<SsdOps> MakeCpuSsdOps(const CpuBackendOptions& options);

}  // namespace mesa::model

#endif  // MESANET_MODEL_MIXERS_MAMBA2_SSD_OPS_CPU_H_
