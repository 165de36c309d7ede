// The RG-LRU operator (kernels/rglru/rglru_op.h) on one Hawk layer's device buffers, as each
// backend runs it. Implementations: rglru_ops_cpu.cc (the chunked CPU scan, or the float64
// reference) and rglru_ops_cuda.cc (kernels/rglru/cuda), registered by backend name
// (model/mixers/mixer_ops.h).
#ifndef MESANET_MODEL_MIXERS_HAWK_RGLRU_OPS_H_
#define MESANET_MODEL_MIXERS_HAWK_RGLRU_OPS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "model/backend/backend.h"

namespace mesa::model {

// One layer's RG-LRU tensors (kernels/rglru/rglru_types.h layouts, channels fastest).
struct RgLruActs {
  int64_t batch = 0, seq_len = 0, width = 0;
  Act u, rho, iota;          // [B,T,D], activation type
  const float* p = nullptr;  // [D] decay parameter (softplus(p) = -log a)
  // The state each row continues from (null: zero) and where its final state goes (null: not
  // wanted), float32 [B,D]; the same buffer carries it in place (decoding).
  const float* h0 = nullptr;
  float* h_final = nullptr;
  // Per row, float32 [B]: 1 where the row has seen tokens before (no restart at its first
  // token), 0 where it starts here (null: every row starts). `started_out` (may alias) is set
  // to 1 for every row afterwards (null: not written).
  const float* started = nullptr;
  float* started_out = nullptr;
  // Packed documents: [B*T] int32, each position's in-row document start (MixerCall::doc_start);
  // a position that starts a document restarts the recurrence. Null: none.
  const int32_t* doc_start = nullptr;
  // Backward: the gradient of h_final (null: zero).
  const float* dh_final = nullptr;
};

struct RgLruActGrads {
  Act du, drho, diota;   // [B,T,D], overwritten
  float* dp = nullptr;   // [D], accumulated (the model's gradient buffer)
  float* dh0 = nullptr;  // [B,D], overwritten; null: not wanted
};

class RgLruOps {
 public:
  static constexpr const char* kName = "RG-LRU";
  virtual ~RgLruOps() = default;
  // h [B,T,D] = the state after every token.
  virtual absl::Status Forward(const RgLruActs& in, Act h) = 0;
  // dh = ∂L/∂h_t from above.
  virtual absl::Status Backward(const RgLruActs& in, Act dh, const RgLruActGrads& grads) = 0;
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_MIXERS_HAWK_RGLRU_OPS_H_
