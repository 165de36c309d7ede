// The RG-LRU in float64, one token at a time: the test oracle (kernels/rglru/rglru_types.h has the
// conventions). The double-precision entry points serve the finite-difference tests; the float
// ones are the op's impl = kReference.
#ifndef MESANET_KERNELS_RGLRU_REFERENCE_H_
#define MESANET_KERNELS_RGLRU_REFERENCE_H_

#include <vector>

#include "absl/status/status.h"
#include "kernels/rglru/rglru_types.h"

namespace mesa::kernels::rglru {

// The op's inputs in float64 (same layouts; optional vectors empty when absent).
struct RgLruProblem64 {
  RgLruDims dims;
  std::vector<double> u, rho, iota, p, h0;
  std::vector<uint8_t> started, reset;

  bool Restart(int64_t b, int64_t t) const {
    if (!reset.empty() && reset[b * dims.seq_len + t] != 0) return true;
    return t == 0 && (started.empty() || started[b] == 0);
  }
};

struct RgLruForward64 {
  std::vector<double> h;        // [B,T,D]
  std::vector<double> h_final;  // [B,D]
};

struct RgLruGradients64 {
  std::vector<double> du, drho, diota, dp, dh0;
};

RgLruForward64 ReferenceForward64(const RgLruProblem64& problem);
// dh [B,T,D] and dh_final [B,D] (empty => 0).
RgLruGradients64 ReferenceBackward64(const RgLruProblem64& problem, const std::vector<double>& dh,
                                     const std::vector<double>& dh_final);

// The float API on top (validated arguments).
absl::Status ReferenceForward(const RgLruInputs& in, RgLruForwardOutputs* out);
absl::Status ReferenceBackward(const RgLruInputs& in, const RgLruBackwardInputs& bwd,
                               RgLruGradients* grads);

}  // namespace mesa::kernels::rglru

#endif  // MESANET_KERNELS_RGLRU_REFERENCE_H_
