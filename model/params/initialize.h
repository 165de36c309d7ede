// Initial values of the parameters (docs/math.md §4), deterministic from a seed and portable
// (no std::normal_distribution, whose output differs between standard libraries).
#ifndef MESANET_MODEL_PARAMS_INITIALIZE_H_
#define MESANET_MODEL_PARAMS_INITIALIZE_H_

#include <cstdint>

#include "absl/types/span.h"
#include "model/params/param_tensor.h"

namespace mesa::model {

// Fills each tensor's entries of `params` (host memory). Tensor i draws from its own stream
// (seed, i), so adding a tensor at the end does not reshuffle the others.
void InitializeParams(absl::Span<const ParamTensor> tensors, uint64_t seed, float* params);

}  // namespace mesa::model

#endif  // MESANET_MODEL_PARAMS_INITIALIZE_H_
