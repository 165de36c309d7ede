// The parameters of an mLSTM layer (docs/math.md §8.9): the q/k/v features without normalisation
// (qk_params.h) and the two per-head gates from the layer's input, xLSTM's initialisation: the
// forget gate (a_proj) with zero weights and biases 3..6 over the heads (f in [0.953, 0.9975]),
// the exponential input gate (b_proj) with zero weights and biases N(0, 0.1²).
#ifndef MESANET_MODEL_MIXERS_MLSTM_MLSTM_PARAMS_H_
#define MESANET_MODEL_MIXERS_MLSTM_MLSTM_PARAMS_H_

#include <string>

#include "model/mixers/qk_params.h"

namespace mesa::model {

MixerWeights DeclareMlstmParams(const ModelConfig& config, const std::string& prefix,
                                ParamBuilder& builder);

}  // namespace mesa::model

#endif  // MESANET_MODEL_MIXERS_MLSTM_MLSTM_PARAMS_H_
