// The attention operator on CpuBackend (float32 host buffers): the float32 CPU operator, or the
// float64 reference when the backend's options ask for the reference implementation. Registered
// for "cpu"; exposed so that tests can wrap it.
#ifndef MESANET_MODEL_MIXERS_ATTENTION_ATTENTION_OPS_CPU_H_
#define MESANET_MODEL_MIXERS_ATTENTION_ATTENTION_OPS_CPU_H_

#include <memory>

#include "model/backend/cpu_backend.h"
#include "model/mixers/attention/attention_ops.h"

namespace mesa::model {

std::unique_ptr<AttentionOps> MakeCpuAttentionOps(const CpuBackendOptions& options);

}  // namespace mesa::model

#endif  // MESANET_MODEL_MIXERS_ATTENTION_ATTENTION_OPS_CPU_H_
