// CPU chunked implementation of the Mesa operator. Conventions: kernels/mesa/mesa_types.h.
// Callers normally go through kernels/mesa/mesa_op.h; these functions assume validated arguments.
#ifndef MESANET_KERNELS_MESA_CHUNKED_H_
#define MESANET_KERNELS_MESA_CHUNKED_H_

#include "absl/status/status.h"
#include "kernels/mesa/mesa_types.h"

namespace mesa::kernels::cpu {

absl::Status MesaChunkedForward(const MesaInputs& in, const MesaOptions& options,
                                MesaForwardOutputs* out);
absl::Status MesaChunkedBackward(const MesaInputs& in, const MesaBackwardInputs& bwd,
                                 const MesaOptions& options, MesaGradients* grads);

}  // namespace mesa::kernels::cpu

#endif
