// Public API of the Mesa operator (target //kernels:mesa_op_api).
//
//   o_t = G_t (H_t + diag lambda)^{-1} q_t,  H_t = gamma_t H_{t-1} + beta_t k_t k_t^T,
//                                             G_t = gamma_t G_{t-1} + beta_t v_t k_t^T
//
// All conventions (layouts, varlen packing, what q* is, the CG iteration and its x0 = 0 initial
// guess, the max_steps == 0 => GLA rule, state orientation) are documented at the top of
// kernels/mesa/mesa_types.h and in docs/kernels.md. Read them before calling.
//
// One entry point for every implementation; MesaOptions::impl picks it:
//   kReference : float64 recurrent oracle, exact Cholesky solve (or float64 CG), slow.
//   kChunked   : float32 chunkwise CPU implementation (chunk 64), multithreaded. Default.
//   kCuda      : the CUDA backend registered by //kernels:mesa_op_cuda_dispatch; returns
//                FailedPrecondition if the binary was built without it or has no GPU.
//
// Example (the trainer's Mesa mixer on CPU):
//   MesaInputs in{.dims = {B, T, H, D}, .q = q, .k = k, .v = v, .log_gamma = lg, .beta = beta,
//                 .lambda = lambda};
//   MesaOptions opt;  // chunked, 30 fixed CG steps
//   ASSIGN_OR_RETURN(MesaForwardResult fwd, MesaForwardAlloc(in, opt));
//   ... later, with dO:
//   ASSIGN_OR_RETURN(MesaGradientsResult g, MesaBackwardAlloc(in, fwd.q_star, d_o, opt));
#ifndef MESANET_KERNELS_MESA_MESA_OP_H_
#define MESANET_KERNELS_MESA_MESA_OP_H_

#include <span>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/mesa/mesa_types.h"

namespace mesa::kernels {

// Caller-owned buffers. Validates everything, then dispatches on options.impl.
absl::Status MesaForward(const MesaInputs& in, const MesaOptions& options, MesaForwardOutputs* out);
absl::Status MesaBackward(const MesaInputs& in, const MesaBackwardInputs& bwd,
                          const MesaOptions& options, MesaGradients* grads);

// Owning convenience wrappers (host memory only).
struct MesaForwardResult {
  std::vector<float> o;                 // [B,T,H,D]
  std::vector<float> q_star;            // [B,T,H,D]
  std::vector<float> h_final, g_final;  // [S,H,D,D]; filled only if want_final_states
  std::vector<int32_t> token_cg_steps;  // [B,T,H]; filled only if want_token_cg_steps
  double cg_steps_mean = 0.0;
};
// Per-token CG steps cost B*T*H ints and their bookkeeping on every call; only per-position
// evaluation (eval.cg_sweep's curves) needs them, so they are opt-in.
absl::StatusOr<MesaForwardResult> MesaForwardAlloc(const MesaInputs& in, const MesaOptions& options,
                                                   bool want_final_states = false,
                                                   bool want_token_cg_steps = false);

struct MesaGradientsResult {
  std::vector<float> dq, dk, dv;         // [B,T,H,D]
  std::vector<float> dlog_gamma, dbeta;  // [B,T,H]
  std::vector<float> dlambda;            // [H,D]
  std::vector<float> dh0, dg0;           // [S,H,D,D]; filled only if want_state_grads
  double cg_steps_mean = 0.0;
};
absl::StatusOr<MesaGradientsResult> MesaBackwardAlloc(
    const MesaInputs& in, std::span<const float> q_star, std::span<const float> d_o,
    const MesaOptions& options, bool want_state_grads = false, std::span<const float> dh_final = {},
    std::span<const float> dg_final = {});

// "reference" | "chunked" | "cuda" <-> MesaImpl.
absl::StatusOr<MesaImpl> ParseMesaImpl(std::string_view name);
std::string_view MesaImplName(MesaImpl impl);

}  // namespace mesa::kernels

#endif  // MESANET_KERNELS_MESA_MESA_OP_H_
