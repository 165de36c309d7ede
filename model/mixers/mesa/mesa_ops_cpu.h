// The Mesa operator on CpuBackend (float32 host buffers): kernels::MesaForward/MesaBackward with
// the backend's implementation choice (chunked, or the float64 reference) and thread count.
// Registered for "cpu"; exposed so that tests can wrap it (e.g. with bf16 rounding).
#ifndef MESANET_MODEL_MIXERS_MESA_MESA_OPS_CPU_H_
#define MESANET_MODEL_MIXERS_MESA_MESA_OPS_CPU_H_

#include <memory>

#include "model/backend/cpu_backend.h"
#include "model/mixers/mesa/mesa_ops.h"

namespace mesa::model {

std::unique_ptr<MesaOps> MakeCpuMesaOps(const CpuBackendOptions& options);

}  // namespace mesa::model

#endif  // MESANET_MODEL_MIXERS_MESA_MESA_OPS_CPU_H_
