// Float64 recurrent reference (the oracle) of the DeltaNet family operator.
//
// Forward, per token (g = exp(log_gamma) or 1):
//   u_t = S_{t-1} k_t,  delta_t = v_t - g_t u_t,  S_t = g_t S_{t-1} + beta_t delta_t k_t^T,
//   o_t = S_t q_t.
// Backward: exact reverse-mode through the recurrence (kernels/deltanet/README.md derives it).
// With dS the gradient w.r.t. S_t (initially ds_final or 0), for t = T..1:
//   dS += do_t q_t^T;  dq_t = S_t^T do_t;  p = dS k_t
//   dbeta_t = delta_t . p;  dv_t = beta_t p;  dk_t = beta_t dS^T delta_t - g_t beta_t S_{t-1}^T p
//   dlog_gamma_t = g_t (<dS, S_{t-1}> - beta_t p . u_t)
//   dS <- g_t (dS - beta_t p k_t^T)          (= g_t dS (I - beta_t k_t k_t^T))
// and ds0 = dS at the end. States S_{t-1} are recomputed from checkpoints every 64 tokens, so
// the memory is O(64 D^2) per head and the work O(T D^2).
#ifndef MESANET_KERNELS_DELTANET_REFERENCE_H_
#define MESANET_KERNELS_DELTANET_REFERENCE_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "kernels/deltanet/deltanet_types.h"

namespace mesa::kernels::deltanet {

// A problem held in float64 (what the float32 entry points convert to; tests use it directly for
// finite differences). Same layouts as DeltaInputs; log_gamma, s0 and cu_seqlens may be empty.
struct Delta64 {
  DeltaDims dims;
  std::vector<double> q, k, v, beta, log_gamma, s0;
  std::vector<int32_t> cu_seqlens;

  static Delta64 FromInputs(const DeltaInputs& in);
  int64_t num_sequences() const {
    return cu_seqlens.empty() ? dims.batch : int64_t(cu_seqlens.size()) - 1;
  }
  int64_t StateElems() const {
    return num_sequences() * dims.heads * dims.head_dim * dims.head_dim;
  }
};

struct Forward64 {
  std::vector<double> o;        // [B,T,H,D]
  std::vector<double> s_final;  // [S,H,D,D]
};

struct Gradients64 {
  std::vector<double> dq, dk, dv;  // [B,T,H,D]
  std::vector<double> dbeta;       // [B,T,H]
  std::vector<double> dlog_gamma;  // [B,T,H] (empty when ungated)
  std::vector<double> ds0;         // [S,H,D,D]
};

// The problem must be valid (sizes as ValidateDeltaInputs checks). ds_final may be empty.
Forward64 ReferenceForward64(const Delta64& p);
Gradients64 ReferenceBackward64(const Delta64& p, std::span<const double> d_o,
                                std::span<const double> ds_final);

// Float32 entry points used by the dispatcher (arguments already validated).
absl::Status DeltaReferenceForward(const DeltaInputs& in, const DeltaOptions& options,
                                   DeltaForwardOutputs* out);
absl::Status DeltaReferenceBackward(const DeltaInputs& in, const DeltaBackwardInputs& bwd,
                                    const DeltaOptions& options, DeltaGradients* grads);

}  // namespace mesa::kernels::deltanet

#endif  // MESANET_KERNELS_DELTANET_REFERENCE_H_
