// Recurrent single-token step of the DeltaNet family operator on the CPU (float32): the decoding
// counterpart of DeltaNetForward.
//
// Per sequence b and head h, with the state S of the previous token (g = exp(log_gamma), or 1
// for DeltaNet when log_gamma is empty):
//   u = S k,   S <- g S + beta (v - g u) k^T   (= g S (I - beta k k^T) + beta v k^T),   o = S q
// S is exactly what DeltaNetForward takes as s0 and returns as s_final: [B, H, D, D], row i =
// value dimension, column j = key dimension. So a chunkwise prefill's s_final feeds the step
// directly, and the step's state can go back to DeltaNetForward as s0 (chunked prefill, appending
// several tokens from any state).
//
// Layouts (row-major, contiguous, float32):
//   q, k, v, o      : [B, H, D]   (= the op's [B, T, H, D] with T = 1)
//   beta, log_gamma : [B, H]      (log_gamma empty => DeltaNet)
//   s               : [B, H, D, D], updated in place
// Each batch row has its own state. Like the op, the step does not normalise k or restrict beta
// and log_gamma. The float64 counterpart is ReferenceForward64 (kernels/deltanet/reference.h)
// with T = 1 and s0 = the state.
#ifndef MESANET_KERNELS_DELTANET_STEP_H_
#define MESANET_KERNELS_DELTANET_STEP_H_

#include <cstdint>
#include <span>

#include "absl/status/status.h"

namespace mesa::kernels::deltanet {

struct DeltaStepDims {
  int64_t batch = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;

  int64_t TokenElems() const { return batch * heads * head_dim; }             // q, k, v, o
  int64_t GateElems() const { return batch * heads; }                         // beta, log_gamma
  int64_t StateElems() const { return batch * heads * head_dim * head_dim; }  // s
};

struct DeltaStepInputs {
  DeltaStepDims dims;
  std::span<const float> q, k, v;    // [B,H,D]
  std::span<const float> beta;       // [B,H]
  std::span<const float> log_gamma;  // [B,H] for Gated DeltaNet; empty => DeltaNet (g = 1)
};

// Checks dims (B, H, D >= 1), every span size and that the inputs are finite (the state is not
// scanned: that would cost as much as the step). InvalidArgument naming the offending tensor.
absl::Status ValidateDeltaStep(const DeltaStepInputs& in, std::span<const float> s,
                               std::span<const float> o);

// Validates, then advances every (sequence, head) by one token: updates s in place and writes
// o. On error nothing is modified. num_threads: threads over the B * H rows (1 = the caller's
// thread, 0 = every hardware thread); the results do not depend on it.
absl::Status DeltaNetStep(const DeltaStepInputs& in, std::span<float> s, std::span<float> o,
                          int num_threads = 1);

}  // namespace mesa::kernels::deltanet

#endif  // MESANET_KERNELS_DELTANET_STEP_H_
