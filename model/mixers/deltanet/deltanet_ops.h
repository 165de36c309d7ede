// The DeltaNet-family operator (kernels/deltanet/deltanet_op.h) on one layer's device buffers, as
// each backend runs it. Implementations: deltanet_ops_cpu.cc (the chunked CPU operator, or the
// float64 reference) and deltanet_ops_cuda.cc (kernels/deltanet/cuda), registered by backend name
// (model/mixers/mixer_ops.h).
#ifndef MESANET_MODEL_MIXERS_DELTANET_DELTANET_OPS_H_
#define MESANET_MODEL_MIXERS_DELTANET_DELTANET_OPS_H_

#include "absl/status/status.h"
#include "kernels/mesa/mesa_types.h"
#include "model/backend/backend.h"

namespace mesa::model {

// One layer's DeltaNet-family tensors (kernels/deltanet/deltanet_types.h layouts).
struct DeltaActs {
  kernels::MesaDims dims;
  Act q, k, v;                       // [B,T,H,D], activation type
  const float* beta = nullptr;       // [B,T,H]
  const float* log_gamma = nullptr;  // [B,T,H]; null for DeltaNet (no forget gate)
  // Decoding (forward only): the initial state (null: zero) and where the final one goes (null:
  // not wanted), float32 [B,H,D,D]; the same buffer for both carries the state in place.
  // Context parallelism (training) gives s0 and s_final as distinct buffers, and s0 and the
  // gradient of s_final (null: zero) to the backward.
  const float* s0 = nullptr;
  float* s_final = nullptr;
  const float* ds_final = nullptr;
};
struct DeltaActGrads {
  Act dq, dk, dv;               // [B,T,H,D], overwritten
  float* dbeta = nullptr;       // [B,T,H], overwritten
  float* dlog_gamma = nullptr;  // [B,T,H], overwritten; null for DeltaNet
  float* ds0 = nullptr;         // [B,H,D,D], overwritten; null: not wanted
};

// One instance per layer: the backward may reuse what the same instance's last forward computed
// (the CUDA implementation keeps its chunk tables and states; it checks the inputs match).
class DeltaNetOps {
 public:
  static constexpr const char* kName = "DeltaNet";
  virtual ~DeltaNetOps() = default;
  virtual absl::Status Forward(const DeltaActs& in, Act o) = 0;
  virtual absl::Status Backward(const DeltaActs& in, Act d_o, const DeltaActGrads& grads) = 0;
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_MIXERS_DELTANET_DELTANET_OPS_H_
