// The Mesa operator (kernels/mesa/mesa_op.h) on one layer's device buffers, as each backend runs
// it. Implementations: mesa_ops_cpu.cc (the chunked CPU operator, or the float64 reference) and
// mesa_ops_cuda.cc (kernels/mesa/cuda), registered by backend name (model/mixers/mixer_ops.h).
#ifndef MESANET_MODEL_MIXERS_MESA_MESA_OPS_H_
#define MESANET_MODEL_MIXERS_MESA_MESA_OPS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/mesa/mesa_types.h"
#include "model/backend/backend.h"
#include "model/mixers/mixer_layer.h"

namespace mesa::model {

// One layer's Mesa-operator tensors (kernels/mesa/mesa_types.h layouts).
struct MesaActs {
  kernels::MesaDims dims;
  Act q, k, v;                       // [B,T,H,D], activation type
  const float* log_gamma = nullptr;  // [B,T,H]
  const float* beta = nullptr;       // [B,T,H]
  const float* lambda = nullptr;     // [H,D]
  // Decoding (forward only): initial states (null: zero) and where the final ones go (null: not
  // wanted), float32 [B,H,D,D]. The finals must not overlap the initials, except that for one
  // token (seq_len 1, a decoding step) they may be the very same buffers (state carried in place).
  // Context parallelism also runs the backward from initial states (h0, g0 as in the forward).
  const float *h0 = nullptr, *g0 = nullptr;
  float *h_final = nullptr, *g_final = nullptr;
  // Backward under context parallelism: the gradients of the final states (null: zero).
  const float *dh_final = nullptr, *dg_final = nullptr;
  // One decoding token: where the CG steps per (sequence, head) go, [B,H] int32 on the backend
  // (optional; the CUDA step writes them there instead of its own buffer).
  int32_t* cg_steps = nullptr;
  // A full-sequence forward: each token's CG steps, [B,T,H] int32 on the backend (optional;
  // kernels/mesa/mesa_types.h MesaForwardOutputs::token_cg_steps).
  int32_t* token_cg_steps = nullptr;
  // One decoding token, where the backend's op fuses it (FusesStepHeadNorm): o_normed [B,H,D]
  // (activation type) = RMSNorm over D of o with norm_weight [D] and norm_eps.
  Act o_normed;
  const float* norm_weight = nullptr;
  float norm_eps = 0.f;
};
struct MesaActGrads {
  Act dq, dk, dv;                        // [B,T,H,D], overwritten
  float* dlog_gamma = nullptr;           // [B,T,H], overwritten
  float* dbeta = nullptr;                // [B,T,H], overwritten
  float* dlambda = nullptr;              // [H,D], overwritten
  float *dh0 = nullptr, *dg0 = nullptr;  // [B,H,D,D], overwritten; null: not wanted
};

class MesaOps {
 public:
  static constexpr const char* kName = "Mesa";
  virtual ~MesaOps() = default;
  // Returns the mean CG steps per token. q_star (float32 [B,T,H,D]) is written by the forward and
  // read by the backward.
  virtual absl::StatusOr<double> Forward(const MesaActs& in, const MesaSolve& solve, Act o,
                                         float* q_star) = 0;
  virtual absl::StatusOr<double> Backward(const MesaActs& in, const float* q_star, Act d_o,
                                          const MesaSolve& solve, const MesaActGrads& grads) = 0;
  // The CG steps per (sequence, head), [B,H], of the last Forward when it was a single-token
  // decoding step whose counts were taken (empty otherwise, e.g. fixed steps on CUDA, where every
  // count is max_steps and is not read back).
  virtual std::vector<int32_t> LastHeadSteps() const { return {}; }
  // Whether a single-token Forward writes MesaActs::o_normed (else it is ignored).
  virtual bool FusesStepHeadNorm() const { return false; }
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_MIXERS_MESA_MESA_OPS_H_
