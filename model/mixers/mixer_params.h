// Which tensors each mixer owns: the one table from a mixer kind to its parameter declaration
// (model/mixers/<mixer>/<mixer>_params.h). The network's layout (model/net/param_layout) asks it
// for each layer; it links no layer, operator or backend, so checkpoints, export and the
// optimizer can lay out a model without them.
#ifndef MESANET_MODEL_MIXERS_MIXER_PARAMS_H_
#define MESANET_MODEL_MIXERS_MIXER_PARAMS_H_

#include <string>

#include "model/config/job_config.h"
#include "model/params/param_builder.h"

namespace mesa::model {

// Adds the tensors of a layer of `kind` to `builder`, named `layer_prefix` ("model.layers.3.")
// followed by the names of the mixer's list in spec/mixers.h, in that order, and returns their
// offsets in the mixer's own slots.
MixerWeights DeclareMixerParams(MixerKind kind, const ModelConfig& config,
                                const std::string& layer_prefix, ParamBuilder& builder);

}  // namespace mesa::model

#endif  // MESANET_MODEL_MIXERS_MIXER_PARAMS_H_
