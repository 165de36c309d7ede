// The parameters every mixer here starts with (docs/math.md §2): the q, k, v projections, the
// short q and k convolutions and, where the mixer has them, the forget gate γ (a_proj) and the
// input gate β (b_proj). Their slots come first in such a mixer's MixerWeights; the mixer numbers
// its own tensors from kNumQkSlots on.
#ifndef MESANET_MODEL_MIXERS_QK_PARAMS_H_
#define MESANET_MODEL_MIXERS_QK_PARAMS_H_

#include <string>

#include "model/config/job_config.h"
#include "model/params/param_builder.h"

namespace mesa::model {

enum QkSlot : int {
  kQProj,
  kKProj,
  kVProj,
  kQConv,
  kKConv,
  kAWeight,  // γ
  kABias,
  kBWeight,  // β
  kBBias,
  kNumQkSlots,
};

struct QkGates {
  bool forget = false;  // γ: a_proj weight and bias
  bool input = false;   // β: b_proj weight and bias
};

// Adds the tensors to `builder` as "<prefix>attn.q_proj.weight" and so on, in the order of
// spec/mixers.h's lists, and returns their slots (-1 for gates the mixer lacks).
MixerWeights DeclareQkParams(const ModelConfig& config, const std::string& prefix, QkGates gates,
                             ParamBuilder& builder);

}  // namespace mesa::model

#endif  // MESANET_MODEL_MIXERS_QK_PARAMS_H_
