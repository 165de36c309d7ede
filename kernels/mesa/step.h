// Recurrent single-token step of the Mesa operator on the CPU (float32): constant-memory decoding.
//
// Per sequence b and head h, with the state (H, G) of the previous token:
//   H <- gamma H + beta k k^T,   G <- gamma G + beta v k^T,   gamma = exp(log_gamma)
//   q* = (H + diag lambda)^{-1} q    by the CG of kernels/mesa/mesa_types.h (x0 = 0, same steps,
//                                    same stopping rule and freezing, same float64 dot products
//                                    as the chunked CPU op; max_steps == 0 => q* = q, GLA)
//   o  = G q*
// The state is exactly what MesaForward takes as h0/g0 and returns as h_final/g_final (same
// [B, H, D, D] layout and orientation: H[i][j] symmetric, G[i][j] with i = value dim, j = key
// dim), so a chunkwise prefill's final states feed the step directly, and the step's state can be
// handed back to MesaForward as h0/g0 to append several tokens at once (chunked prefill).
//
// Layouts (row-major, contiguous):
//   q, k, v, o, q_star : [B, H, D]   (= the op's [B, T, H, D] with T = 1)
//   log_gamma, beta    : [B, H]
//   lambda             : [H, D], > 0
//   h, g               : [B, H, D, D], updated in place
//   cg_steps           : [B, H] int32, the CG steps this token took (0 for GLA)
// Each batch row has its own state; rows never interact. There is no varlen mode: a decoding
// batch holds one token per sequence.
//
// The float64 counterpart is the reference op (kernels/mesa/reference.h) run with T = 1 and
// h0/g0 = the state: RunReferenceForward with ReferenceSolver::kCg performs the same step in
// float64 (the tests compare against it).
#ifndef MESANET_KERNELS_MESA_STEP_H_
#define MESANET_KERNELS_MESA_STEP_H_

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "kernels/mesa/mesa_types.h"

namespace mesa::kernels::cpu {

struct MesaStepDims {
  int64_t batch = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;

  int64_t TokenElems() const { return batch * heads * head_dim; }  // q, k, v, o, q_star
  int64_t GateElems() const { return batch * heads; }              // log_gamma, beta, cg_steps
  int64_t StateElems() const { return batch * heads * head_dim * head_dim; }  // h, g
};

struct MesaStepInputs {
  MesaStepDims dims;
  std::span<const float> q, k, v;          // [B,H,D]
  std::span<const float> log_gamma, beta;  // [B,H]
  std::span<const float> lambda;           // [H,D], > 0
};

// The recurrent state, updated in place. h may be empty when cg.max_steps == 0 (GLA never reads
// H; the chunkwise op would still advance it, so keep it if you will hand the state back to
// MesaForward with a solve).
struct MesaStepState {
  std::span<float> h;  // [B,H,D,D]
  std::span<float> g;  // [B,H,D,D]
};

struct MesaStepOutputs {
  std::span<float> o;           // required [B,H,D]
  std::span<float> q_star;      // optional [B,H,D]
  std::span<int32_t> cg_steps;  // optional [B,H]
};

// Checks dims (B, H >= 1; D a multiple of 16 in [16, 128]), CG options, every span size, that
// the inputs are finite and lambda > 0. The state is not scanned (that would cost as much as the
// step). InvalidArgument naming the offending tensor.
absl::Status ValidateMesaStep(const MesaStepInputs& in, const CgOptions& cg,
                              const MesaStepState& state, const MesaStepOutputs& out);

// Validates, then advances every (sequence, head) by one token and writes o (and q_star,
// cg_steps). On error nothing is modified. num_threads: threads over the B * H (sequence, head)
// rows; 1 runs on the caller's thread, 0 uses every hardware thread. The results do not depend
// on it. A thread costs tens of microseconds to start, about the cost of one head's GLA step at
// D = 128, so threads pay off for Mesa and for large batches.
absl::Status MesaStep(const MesaStepInputs& in, const CgOptions& cg, MesaStepState state,
                      MesaStepOutputs out, int num_threads = 1);

}  // namespace mesa::kernels::cpu

#endif  // MESANET_KERNELS_MESA_STEP_H_
