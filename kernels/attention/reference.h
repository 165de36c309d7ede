// Float64 reference (the oracle) of the causal softmax attention operator: the formulas at the
// top of kernels/attention/attention_types.h, one query row at a time, probabilities held whole.
#ifndef MESANET_KERNELS_ATTENTION_REFERENCE_H_
#define MESANET_KERNELS_ATTENTION_REFERENCE_H_

#include <span>
#include <vector>

#include "absl/status/status.h"
#include "kernels/attention/attention_types.h"

namespace mesa::kernels::attention {

// A problem held in float64 (what the float32 entry points convert to; tests use it directly for
// finite differences). Same layouts as AttnInputs.
struct Attn64 {
  AttnDims dims;
  std::vector<double> q, k, v;
  int64_t window = 0;
  double scale = 0;                // the effective scale (never 0)
  std::vector<int32_t> doc_start;  // [B,T] or empty (AttnInputs::doc_start)

  // lo(i) of attention_types.h.
  int64_t FirstKey(int64_t b, int64_t i) const;

  static Attn64 FromInputs(const AttnInputs& in, const AttnOptions& options);
};

struct Forward64 {
  std::vector<double> o;    // [B,T,H,D]
  std::vector<double> lse;  // [B,T,H]
};
struct Gradients64 {
  std::vector<double> dq, dk, dv;  // [B,T,H,D]
};

// The problem must be valid (sizes as ValidateAttnInputs checks).
Forward64 ReferenceForward64(const Attn64& p);
Gradients64 ReferenceBackward64(const Attn64& p, std::span<const double> d_o);

// Float32 entry points used by the dispatcher (arguments already validated).
absl::Status AttnReferenceForward(const AttnInputs& in, const AttnOptions& options,
                                  AttnForwardOutputs* out);
absl::Status AttnReferenceBackward(const AttnInputs& in, const AttnBackwardInputs& bwd,
                                   const AttnOptions& options, AttnGradients* grads);

}  // namespace mesa::kernels::attention

#endif  // MESANET_KERNELS_ATTENTION_REFERENCE_H_
