// The SSD recurrence (ssd_types.h) token by token, templated on the arithmetic: double is the
// float64 oracle (impl kReference), float the CPU operator (impl kRecurrent). Threads over (row,
// head). The backward re-runs the forward, keeping the state at every chunk_size-th token, then
// per chunk (last first) recomputes the chunk's states and runs the reverse recurrence. B and C
// gradients are gathered per head and summed over each group's heads in a fixed order, so the
// result does not depend on the thread count.
#ifndef MESANET_KERNELS_SSD_RECURRENT_H_
#define MESANET_KERNELS_SSD_RECURRENT_H_

#include <cstdint>
#include <span>

#include "kernels/ssd/ssd_types.h"

namespace mesa::kernels::ssd {

// The operator's tensors in arithmetic T (float: the op's own spans; double: the oracle's).
template <typename T>
struct SsdProblem {
  SsdDims dims;
  std::span<const T> x, dt, a_log, dt_bias, d, b, c;
  std::span<const uint8_t> reset;
  std::span<const T> s0;
};
template <typename T>
struct SsdForwardResult {
  std::span<T> y, s_final;
};
template <typename T>
struct SsdBackwardArgs {
  std::span<const T> dy, ds_final;
};
template <typename T>
struct SsdGradientsOf {
  std::span<T> dx, ddt, da_log, ddt_bias, dd, db, dc, ds0;
};

template <typename T>
void SsdRecurrentForward(const SsdProblem<T>& in, const SsdOptions& options,
                         const SsdForwardResult<T>& out);
template <typename T>
void SsdRecurrentBackward(const SsdProblem<T>& in, const SsdOptions& options,
                          const SsdBackwardArgs<T>& bwd, const SsdGradientsOf<T>& grads);

}  // namespace mesa::kernels::ssd

#endif  // MESANET_KERNELS_SSD_RECURRENT_H_
