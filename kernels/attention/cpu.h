// Float32 CPU implementation of the causal softmax attention operator (conventions:
// kernels/attention/attention_types.h): one query row at a time, scores of the row's window in a
// per-thread buffer (O(T) memory), threads over (b, h). The backward recomputes each row's
// probabilities from the forward's lse (or recomputes the forward when o and lse are absent).
#ifndef MESANET_KERNELS_ATTENTION_CPU_H_
#define MESANET_KERNELS_ATTENTION_CPU_H_

#include <span>

#include "absl/status/status.h"
#include "kernels/attention/attention_types.h"

namespace mesa::kernels::attention {

// Arguments already validated (kernels/attention/attention_op.h).
absl::Status AttnCpuForward(const AttnInputs& in, const AttnOptions& options,
                            AttnForwardOutputs* out);
absl::Status AttnCpuBackward(const AttnInputs& in, const AttnBackwardInputs& bwd,
                             const AttnOptions& options, AttnGradients* grads);
absl::Status AttnCpuDecode(const AttnDecodeInputs& in, float scale, std::span<float> o,
                           int num_threads);

}  // namespace mesa::kernels::attention

#endif  // MESANET_KERNELS_ATTENTION_CPU_H_
