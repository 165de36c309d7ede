// Public API of the DeltaNet family operator on the CPU (target //kernels/deltanet:deltanet_op).
//
//   S_t = g_t S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T,   o_t = S_t q_t,
//   g_t = exp(log_gamma_t) (Gated DeltaNet) or 1 (DeltaNet: log_gamma empty).
//
// Conventions (layouts, state orientation, varlen packing) are at the top of
// kernels/deltanet/deltanet_types.h and in kernels/deltanet/README.md.
//
// One entry point for both implementations; DeltaOptions::impl picks it:
//   kReference : float64 recurrent oracle, exact reverse-mode backward. Slow.
//   kChunked   : float32 chunkwise WY / UT-transform form (chunk 64), multithreaded. Default.
//
// Example:
//   DeltaInputs in{.dims = {B, T, H, D}, .q = q, .k = k, .v = v, .beta = beta,
//                  .log_gamma = lg};  // lg empty => plain DeltaNet
//   ASSIGN_OR_RETURN(DeltaForwardResult fwd, DeltaNetForwardAlloc(in, DeltaOptions{}));
//   ASSIGN_OR_RETURN(DeltaGradientsResult g, DeltaNetBackwardAlloc(in, d_o, DeltaOptions{}));
#ifndef MESANET_KERNELS_DELTANET_DELTANET_OP_H_
#define MESANET_KERNELS_DELTANET_DELTANET_OP_H_

#include <span>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/deltanet/deltanet_types.h"

namespace mesa::kernels::deltanet {

// Caller-owned buffers. Validates everything, then dispatches on options.impl.
absl::Status DeltaNetForward(const DeltaInputs& in, const DeltaOptions& options,
                             DeltaForwardOutputs* out);
absl::Status DeltaNetBackward(const DeltaInputs& in, const DeltaBackwardInputs& bwd,
                              const DeltaOptions& options, DeltaGradients* grads);

// Owning convenience wrappers.
struct DeltaForwardResult {
  std::vector<float> o;        // [B,T,H,D]
  std::vector<float> s_final;  // [S,H,D,D]; filled only if want_final_state
};
absl::StatusOr<DeltaForwardResult> DeltaNetForwardAlloc(const DeltaInputs& in,
                                                        const DeltaOptions& options,
                                                        bool want_final_state = false);

struct DeltaGradientsResult {
  std::vector<float> dq, dk, dv;  // [B,T,H,D]
  std::vector<float> dbeta;       // [B,T,H]
  std::vector<float> dlog_gamma;  // [B,T,H] when gated, else empty
  std::vector<float> ds0;         // [S,H,D,D]; filled only if want_state_grad
};
absl::StatusOr<DeltaGradientsResult> DeltaNetBackwardAlloc(const DeltaInputs& in,
                                                           std::span<const float> d_o,
                                                           const DeltaOptions& options,
                                                           bool want_state_grad = false,
                                                           std::span<const float> ds_final = {});

// "reference" | "chunked" <-> DeltaImpl.
absl::StatusOr<DeltaImpl> ParseDeltaImpl(std::string_view name);
std::string_view DeltaImplName(DeltaImpl impl);

}  // namespace mesa::kernels::deltanet

#endif  // MESANET_KERNELS_DELTANET_DELTANET_OP_H_
