// The SSD operator (kernels/ssd/ssd_op.h) on one Mamba-2 layer's buffers, as each backend runs it.
// Implementations: ssd_ops_cpu.cc (the float32 recurrence, or the float64 oracle) and
// ssd_ops_cuda.cc (kernels/ssd/cuda).
#ifndef MESANET_MODEL_MIXERS_MAMBA2_SSD_OPS_H_
#define MESANET_MODEL_MIXERS_MAMBA2_SSD_OPS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "model/backend/backend.h"

namespace mesa::model {

struct SsdActs {
  int64_t batch = 0, seq_len = 0, heads = 0, head_dim = 0, state = 0;  // B, T, H_m, P, N
  // [B*T, H*P + 2N]: the convolution's output after SiLU, each row x | B | C (one group).
  Act xbc;
  Act dt_pre;  // [B*T, H] dt before softplus and dt_bias
  const float *a_log = nullptr, *dt_bias = nullptr, *d = nullptr;  // [H] parameters
  const int32_t* doc_start = nullptr;  // [B*T] or null (MixerCall::doc_start)
  // The state S [B,H,P,N] each row continues from (null: zero) and where the final one goes
  // (null: not wanted); the same buffer for both carries it in place (decoding).
  const float* s0 = nullptr;
  float* s_final = nullptr;
  const float* ds_final = nullptr;  // backward: the final state's gradient (null: zero)
};

struct SsdActGrads {
  Act d_xbc;                                                       // [B*T, H*P + 2N], overwritten
  Act d_dt_pre;                                                    // [B*T, H], overwritten
  float *d_a_log = nullptr, *d_dt_bias = nullptr, *d_d = nullptr;  // accumulated
  float* ds0 = nullptr;                                            // overwritten; null: not wanted
};

class SsdOps {
 public:
  static constexpr const char* kName = "Mamba-2 SSD";
  virtual ~SsdOps() = default;
  // y [B*T, H*P] (the skip D x included).
  virtual absl::Status Forward(const SsdActs& in, Act y) = 0;
  virtual absl::Status Backward(const SsdActs& in, Act dy, const SsdActGrads& grads) = 0;
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_MIXERS_MAMBA2_SSD_OPS_H_
