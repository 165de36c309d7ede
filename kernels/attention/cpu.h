// Float32 CPU implementation of the causal softmax attention operator (conventions:
// kernels/attention/attention_types.h): blocks of 64 queries against the keys their window
// reaches, scores and products as OpenBLAS GEMMs (single-threaded inside), a 64 x T score buffer
// per thread, threads over (b, h). The backward recomputes each block's probabilities from the
// forward's lse (or recomputes the forward when lse is absent) and takes delta_i = do_i . o_i as
// sum_j P_ij dP_ij (equal; it needs no o). Decoding (one query per (b, h)) stays a row of dot
// products.
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
