// Float32 chunkwise CPU implementation of the DeltaNet family operator (WY representation with
// the UT transform; kernels/deltanet/README.md has the derivation and the sign of T).
//
// Supports everything ValidateDeltaInputs accepts: any D >= 1, any T (chunks of
// DeltaOptions::chunk_size tokens, default 64; the last chunk of a sequence may be shorter),
// varlen packing, initial and final states, DeltaNet and Gated DeltaNet. Threads over
// (sequence, head). The backward is the chunkwise WY backward: it recomputes the chunk-start
// states with a forward state pass (O(T/C D^2) memory per head), then walks the chunks in
// reverse with matrix-form gradients of every chunk quantity.
#ifndef MESANET_KERNELS_DELTANET_CHUNKED_H_
#define MESANET_KERNELS_DELTANET_CHUNKED_H_

#include "absl/status/status.h"
#include "kernels/deltanet/deltanet_types.h"

namespace mesa::kernels::deltanet {

// Arguments must already be validated (the dispatcher in deltanet_op.cc does it).
absl::Status DeltaChunkedForward(const DeltaInputs& in, const DeltaOptions& options,
                                 DeltaForwardOutputs* out);
absl::Status DeltaChunkedBackward(const DeltaInputs& in, const DeltaBackwardInputs& bwd,
                                  const DeltaOptions& options, DeltaGradients* grads);

}  // namespace mesa::kernels::deltanet

#endif  // MESANET_KERNELS_DELTANET_CHUNKED_H_
