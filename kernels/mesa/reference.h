// CPU reference implementation of the Mesa operator. Conventions: kernels/mesa/mesa_types.h.
// Callers normally go through kernels/mesa/mesa_op.h; these functions assume validated arguments.
#ifndef MESANET_KERNELS_MESA_REFERENCE_H_
#define MESANET_KERNELS_MESA_REFERENCE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "kernels/mesa/mesa_types.h"

namespace mesa::kernels::cpu {

// Float64 entry points (the float API converts to and from these). Used directly by the
// finite-difference tests. Same layouts as MesaInputs; optional tensors are empty vectors.
struct ReferenceProblem {
  MesaDims dims;
  std::vector<double> q, k, v, log_gamma, beta, lambda, h0, g0;
  std::vector<int32_t> cu_seqlens;

  static ReferenceProblem FromInputs(const MesaInputs& in);
};

struct ReferenceForwardResult {
  std::vector<double> o, q_star, h_final, g_final;  // states always filled
  std::vector<int32_t> token_cg_steps;              // [B,T,H]: each solve's CG steps
  double cg_steps_mean = 0.0;
};

struct ReferenceCotangents {
  std::vector<double> q_star, d_o;         // required
  std::vector<double> dh_final, dg_final;  // optional (empty = 0)
};

struct ReferenceGradientsResult {
  std::vector<double> dq, dk, dv, dlog_gamma, dbeta, dlambda, dh0, dg0;
  double cg_steps_mean = 0.0;
};

// Arguments must satisfy ValidateMesaInputs (not re-checked here).
ReferenceForwardResult RunReferenceForward(const ReferenceProblem& problem,
                                           const MesaOptions& options);
ReferenceGradientsResult RunReferenceBackward(const ReferenceProblem& problem,
                                              const ReferenceCotangents& cotangents,
                                              const MesaOptions& options);

absl::Status MesaReferenceForward(const MesaInputs& in, const MesaOptions& options,
                                  MesaForwardOutputs* out);
absl::Status MesaReferenceBackward(const MesaInputs& in, const MesaBackwardInputs& bwd,
                                   const MesaOptions& options, MesaGradients* grads);

}  // namespace mesa::kernels::cpu

#endif
