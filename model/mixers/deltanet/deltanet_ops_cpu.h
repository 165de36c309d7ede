// The DeltaNet-family operator on CpuBackend (float32 host buffers): the chunked CPU operator, or
// the float64 reference when the backend's options ask for the reference implementation.
// Registered for "cpu"; exposed so that tests can wrap it (e.g. with bf16 rounding).
#ifndef MESANET_MODEL_MIXERS_DELTANET_DELTANET_OPS_CPU_H_
#define MESANET_MODEL_MIXERS_DELTANET_DELTANET_OPS_CPU_H_

#include <memory>

#include "model/backend/cpu_backend.h"
#include "model/mixers/deltanet/deltanet_ops.h"

namespace mesa::model {

std::unique_ptr<DeltaNetOps> MakeCpuDeltaNetOps(const CpuBackendOptions& options);

}  // namespace mesa::model

#endif  // MESANET_MODEL_MIXERS_DELTANET_DELTANET_OPS_CPU_H_
