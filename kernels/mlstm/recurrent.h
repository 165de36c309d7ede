// The mLSTM recurrence (mlstm_types.h) token by token, templated on the arithmetic: double is the
// float64 oracle (impl kReference), float the CPU operator (impl kRecurrent). Threads over (row,
// head). The backward re-runs the forward, keeping the state at every chunk_size-th token, then
// per chunk (last first) recomputes the chunk's states and runs the reverse recurrence.
#ifndef MESANET_KERNELS_MLSTM_RECURRENT_H_
#define MESANET_KERNELS_MLSTM_RECURRENT_H_

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "kernels/mlstm/mlstm_types.h"

namespace mesa::kernels::mlstm {

// The operator's tensors in arithmetic T (float: the op's own spans; double: the oracle's).
template <typename T>
struct MlstmProblem {
  MlstmDims dims;
  std::span<const T> q, k, v, i, f;
  std::span<const uint8_t> reset;
  std::span<const T> c0, n0, m0;
};
template <typename T>
struct MlstmForwardResult {
  std::span<T> h, c_final, n_final, m_final;
};
template <typename T>
struct MlstmBackwardArgs {
  std::span<const T> dh, dc_final, dn_final;
};
template <typename T>
struct MlstmGradientsOf {
  std::span<T> dq, dk, dv, di, df, dc0, dn0;
};

// float32 (impl kRecurrent), validated arguments.
absl::Status RecurrentForward(const MlstmInputs& in, const MlstmOptions& options,
                              MlstmForwardOutputs* out);
absl::Status RecurrentBackward(const MlstmInputs& in, const MlstmOptions& options,
                               const MlstmBackwardInputs& bwd, MlstmGradients* grads);

// The float64 oracle, single-threaded, with the denominator's eps given (0 for the unstabilised
// identity). Output spans sized as the layouts say; optional ones empty.
void ReferenceForward64(const MlstmProblem<double>& in, double eps,
                        const MlstmForwardResult<double>& out);
void ReferenceBackward64(const MlstmProblem<double>& in, double eps,
                         const MlstmBackwardArgs<double>& bwd,
                         const MlstmGradientsOf<double>& grads);

}  // namespace mesa::kernels::mlstm

#endif  // MESANET_KERNELS_MLSTM_RECURRENT_H_
