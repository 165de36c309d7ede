// Types shared by every implementation of the Mesa operator (CPU reference, CPU chunked, CUDA).
//
// Users include kernels/mesa/mesa_op.h (target //kernels:mesa_op_api), which includes this file.
// Backends (the CPU forms here, kernels/mesa/cuda) depend only on this file (target :mesa_types),
// so that the dispatcher can depend on them without a cycle.
//
// ---------------------------------------------------------------------------------------------
// CONVENTIONS (all implementations follow them exactly)
//
// Per sequence and head, with t = 1..T, D = head dim (n_a = n_v = D), gamma_t = exp(log_gamma_t):
//   H_t  = gamma_t H_{t-1} + beta_t k_t k_t^T          [D x D, symmetric]      H_0 = h0 (or 0)
//   G_t  = gamma_t G_{t-1} + beta_t v_t k_t^T          [D x D]                 G_0 = g0 (or 0)
//   q*_t = (H_t + diag(lambda))^{-1} q_t               solved by CG (see below)
//   o_t  = G_t q*_t
// lambda is per head [H, D], strictly positive, enters only at solve time and is never decayed.
//
// Layouts (row-major, contiguous, float32 unless stated):
//   q, k, v, o, q_star, dq, dk, dv, do  : [B, T, H, D]   (token-major, like FLA)
//   log_gamma, beta, dlog_gamma, dbeta  : [B, T, H]
//   lambda, dlambda                     : [H, D]
//   h0, g0, h_final, g_final, dh0, ...  : [S, H, D, D] where S = B, or S = N (number of packed
//                                         sequences) in varlen mode.
//   State matrices: H[i][j] = sum beta k_i k_j (symmetric). G[i][j] = sum beta v_i k_j, i.e. the
//   row index is the VALUE dimension and the column index is the KEY dimension (the paper's
//   n_v x n_a orientation; FLA's h_kv is the transpose).
//
// Varlen packing: cu_seqlens (int32, N+1 entries, cu_seqlens[0] = 0, non-decreasing,
// cu_seqlens[N] = T) requires B = 1. Sequence n occupies tokens [cu[n], cu[n+1]) and starts from
// its own initial state (h0[n], g0[n] or zero); no state flows between sequences. Chunks never
// straddle a sequence boundary. Empty sequences are allowed (their final state = initial state).
//
// q* (the "saved solution", output q_star): the CG solution of (H_t + diag lambda) x = q_t. The
// backward consumes it (the op never re-solves the forward system), exactly like FLA saves q*.
//
// CG (per token; per-token scalars alpha, beta, residual; docs/math.md §2.3 with x0 = 0):
//   x0 = 0, r0 = q, p0 = q, d0 = r0^T r0
//   repeat up to max_steps times:
//     w = (H+Λ) p; alpha = d_old / (p^T w); x += alpha p; r -= alpha w; d_new = r^T r
//     if tolerance > 0 and sqrt(d_new) <= tolerance * sqrt(d0): stop this token
//     p = r + (d_new / d_old) p; d_old = d_new
//   A token whose d_old or p^T w is exactly zero / not positive (already converged, e.g. q = 0)
//   is frozen instead of dividing by zero.
//   Steps counted for cg_steps_mean: the number of updates of x for that token (a frozen token
//   counts the steps it actually took). cg_steps_mean averages over all tokens of the forward.
//   MesaForwardOutputs::token_cg_steps, when given, receives these counts per token and head
//   (their sum over the tensor is cg_steps_mean * B*T*H); 0 for max_steps == 0 and exact solves.
//
//   max_steps == 0 is special: q* := q (plain GLA readout, o_t = G_t q_t), as in docs/math.md §1.1
//   ("with 0 CG steps the layer reduces to GLA"). Note this is NOT the x0 = 0 iterate (which is
//   0). Its backward is the GLA backward (dq = G_t^T do_t, no H terms, dlambda = 0).
//
//   tolerance == 0: fixed-step mode (training; exactly max_steps per token, no early exit).
//   tolerance  > 0: each token stops when ||r|| <= tolerance * ||r0||, at most max_steps.
//
// Reference implementation: by default it solves EXACTLY (float64 Cholesky) whenever
// max_steps > 0, ignoring the step count; MesaOptions::reference_solver = kCg makes it run the
// CG above in float64 with the same step semantics (for exact comparisons of fixed-step
// implementations). It reports cg_steps_mean = 0 for exact solves.
//
// Backward (implicit differentiation, docs/math.md §3; CG is not unrolled). Given e_t = dL/do_t:
//   e*_t = (H_t + Λ)^{-1} G_t^T e_t   (second solve, same CG options; exact in the reference)
//   dq_t = e*_t,  dlambda = -sum_t q*_t ⊙ e*_t,  plus dk, dv, dbeta, dlog_gamma, dh0, dg0.
// It uses the q_star passed in (the saved forward solution) in every formula.
// Optional dh_final/dg_final (gradients w.r.t. the final states) are added to the reverse pass.
// h0 must be symmetric (it is an H state); dh0 is returned symmetrised, (dH_0 + dH_0^T) / 2,
// which is the gradient for any symmetric perturbation of h0.
// ---------------------------------------------------------------------------------------------
#ifndef MESANET_KERNELS_MESA_MESA_TYPES_H_
#define MESANET_KERNELS_MESA_MESA_TYPES_H_

#include <cstdint>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "kernels/common/limits.h"

namespace mesa::kernels {

struct MesaDims {
  int64_t batch = 0;
  int64_t seq_len = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;

  int64_t TokenElems() const { return batch * seq_len * heads * head_dim; }  // q, k, v, o
  int64_t GateElems() const { return batch * seq_len * heads; }              // log_gamma, beta
  int64_t LambdaElems() const { return heads * head_dim; }
};

struct CgOptions {
  int max_steps = kDefaultCgSteps;  // 0 => q* = q (GLA readout).
  float tolerance = 0.f;  // 0 => fixed steps; > 0 => stop a token at ||r|| <= tol * ||r0||.
};

enum class MesaImpl { kReference, kChunked, kCuda };

// Reference only: exact float64 Cholesky solve (the oracle) or float64 CG with CgOptions.
enum class ReferenceSolver { kExact, kCg };

// Where the pointers in MesaInputs/Outputs/Gradients live. CPU implementations require kHost.
// The CUDA backend accepts both (kHost: it copies in and out).
enum class MemorySpace { kHost, kDevice };

struct MesaOptions {
  MesaImpl impl = MesaImpl::kChunked;
  CgOptions cg;
  ReferenceSolver reference_solver = ReferenceSolver::kExact;
  int num_threads =
      0;  // CPU threads over (sequence, head); 0 => std::thread::hardware_concurrency.
  MemorySpace memory = MemorySpace::kHost;
};

// Forward inputs. Spans must have exactly the sizes in the layout table above; optional spans
// are empty when absent.
struct MesaInputs {
  MesaDims dims;
  std::span<const float> q, k, v;          // [B,T,H,D]
  std::span<const float> log_gamma, beta;  // [B,T,H]; log_gamma <= 0 expected (not required)
  std::span<const float> lambda;           // [H,D], > 0
  std::span<const float> h0, g0;           // optional [S,H,D,D]
  std::span<const int32_t> cu_seqlens;     // optional, N+1 offsets (then batch must be 1)

  bool is_varlen() const { return !cu_seqlens.empty(); }
  int64_t num_sequences() const {  // S: B, or N in varlen mode
    return is_varlen() ? static_cast<int64_t>(cu_seqlens.size()) - 1 : dims.batch;
  }
  int64_t StateElems() const {
    return num_sequences() * dims.heads * dims.head_dim * dims.head_dim;
  }
};

struct MesaForwardOutputs {
  std::span<float> o;                 // required [B,T,H,D]
  std::span<float> q_star;            // optional [B,T,H,D] (required if you will run backward)
  std::span<float> h_final, g_final;  // optional [S,H,D,D]
  // Optional [B,T,H]: the CG steps of each token's forward solve (evaluation's per-position
  // counts; nothing is written or computed for it when empty).
  std::span<int32_t> token_cg_steps;
  double cg_steps_mean = 0.0;  // written by the forward
};

struct MesaBackwardInputs {
  std::span<const float> q_star;              // [B,T,H,D] from the forward
  std::span<const float> d_o;                 // [B,T,H,D] dL/do
  std::span<const float> dh_final, dg_final;  // optional [S,H,D,D]
};

struct MesaGradients {
  std::span<float> dq, dk, dv;         // required [B,T,H,D]
  std::span<float> dlog_gamma, dbeta;  // required [B,T,H]
  std::span<float> dlambda;            // required [H,D] (summed over batch and time)
  std::span<float> dh0, dg0;           // optional [S,H,D,D] (valid even when h0/g0 were absent)
  double cg_steps_mean = 0.0;          // steps of the backward solve for e*
};

// Validation shared by all backends. Checks dims (D a multiple of 16 in [16,128]; B, T, H >= 1;
// B == 1 in varlen mode), span sizes, cu_seqlens, CG options (max_steps in [0, 1000],
// tolerance >= 0 and finite), and, for host memory only, that every float is finite and
// lambda > 0. Returns InvalidArgument with a message naming the offending tensor.
absl::Status ValidateMesaInputs(const MesaInputs& in, const MesaOptions& options);
// The dims and CG-option part of ValidateMesaInputs (for callers holding typed device pointers).
absl::Status ValidateMesaShape(const MesaDims& dims, const CgOptions& cg);
absl::Status ValidateForwardOutputs(const MesaInputs& in, const MesaForwardOutputs& out);
absl::Status ValidateBackward(const MesaInputs& in, const MesaBackwardInputs& bwd,
                              const MesaGradients& grads, const MesaOptions& options);

// ---------------------------------------------------------------------------------------------
// Backend registration seam for CUDA. //kernels/mesa/cuda:mesa_cuda_register (alwayslink, linked
// via
// //kernels:mesa_op_cuda_dispatch) calls RegisterMesaCudaBackend from a static initialiser;
// without it, impl = kCuda returns FailedPrecondition. Backend functions receive already-validated
// arguments.
struct MesaBackend {
  std::string name;
  absl::Status (*forward)(const MesaInputs&, const MesaOptions&, MesaForwardOutputs*) = nullptr;
  absl::Status (*backward)(const MesaInputs&, const MesaBackwardInputs&, const MesaOptions&,
                           MesaGradients*) = nullptr;
  // Returns OK if a usable device is present (e.g. cudaGetDeviceCount > 0), else why not.
  absl::Status (*device_available)() = nullptr;
};

void RegisterMesaCudaBackend(const MesaBackend& backend);
// nullptr when no CUDA backend was linked in.
const MesaBackend* GetMesaCudaBackend();

}  // namespace mesa::kernels

#endif  // MESANET_KERNELS_MESA_MESA_TYPES_H_
