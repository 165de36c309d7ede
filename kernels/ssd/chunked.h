// The SSD in its chunked form (docs/math.md §8.10; the shape of the planned CUDA kernel), float32
// on the CPU: per chunk of Q tokens the intra-chunk part (C Bᵀ ⊙ L ⊙ dt) X, the part from the
// state before the chunk, and the state pass S_next = decay S + Xᵀ diag(w) B; the backward walks
// the chunks in reverse with the chunk-start states of a forward pass, and gets the decay
// gradients from the masked decay matrices. Exact resets: a decay product that crosses a document
// start is zero.
#ifndef MESANET_KERNELS_SSD_CHUNKED_H_
#define MESANET_KERNELS_SSD_CHUNKED_H_

#include "kernels/ssd/ssd_types.h"

namespace mesa::kernels::ssd {

// Validated arguments; options.chunk_size is Q.
void SsdChunkedForward(const SsdInputs& in, const SsdOptions& options,
                       const SsdForwardOutputs& out);
void SsdChunkedBackward(const SsdInputs& in, const SsdOptions& options,
                        const SsdBackwardInputs& bwd, const SsdGradients& grads);

}  // namespace mesa::kernels::ssd

#endif  // MESANET_KERNELS_SSD_CHUNKED_H_
