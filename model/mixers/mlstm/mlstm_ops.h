// The mLSTM operator (kernels/mlstm/mlstm_op.h) on one layer's buffers, as each backend runs it.
// Implementations: mlstm_ops_cpu.cc (the float32 recurrence, or the float64 oracle) and
// mlstm_ops_cuda.cc (kernels/mlstm/cuda).
#ifndef MESANET_MODEL_MIXERS_MLSTM_MLSTM_OPS_H_
#define MESANET_MODEL_MIXERS_MLSTM_MLSTM_OPS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "model/backend/backend.h"

namespace mesa::model {

struct MlstmActs {
  int64_t batch = 0, seq_len = 0, heads = 0, head_dim = 0;
  Act q, k, v;       // [B,T,H,D]; k before the 1/sqrt(D) scale (the operator applies it)
  Act i_pre, f_pre;  // [B*T, H] the gates' pre-activations (ĩ, f̃)
  const int32_t* doc_start = nullptr;  // [B*T] or null (MixerCall::doc_start)
  // The state each row continues from (null: zero) and where the final one goes (null: not
  // wanted): C' [B,H,D,D], n' [B,H,D], m [B,H], float32 (all three or none). The same buffers
  // for both carry it in place (decoding).
  const float *c0 = nullptr, *n0 = nullptr, *m0 = nullptr;
  float *c_final = nullptr, *n_final = nullptr, *m_final = nullptr;
  // Backward: the gradients of the final C' and n' (null: zero).
  const float *dc_final = nullptr, *dn_final = nullptr;
};

struct MlstmActGrads {
  Act dq, dk, dv;                        // [B,T,H,D], overwritten (dk of the unscaled k)
  Act di_pre, df_pre;                    // [B*T, H], overwritten
  float *dc0 = nullptr, *dn0 = nullptr;  // overwritten; null: not wanted
};

class MlstmOps {
 public:
  static constexpr const char* kName = "mLSTM";
  virtual ~MlstmOps() = default;
  virtual absl::Status Forward(const MlstmActs& in, Act h) = 0;
  virtual absl::Status Backward(const MlstmActs& in, Act dh, const MlstmActGrads& grads) = 0;
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_MIXERS_MLSTM_MLSTM_OPS_H_
