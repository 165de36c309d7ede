#include "model/mixers/mixer_params.h"

#include "model/mixers/attention/attention_params.h"
#include "model/mixers/deltanet/deltanet_params.h"
#include "model/mixers/hawk/hawk_params.h"
#include "model/mixers/mamba2/mamba2_params.h"
#include "model/mixers/mesa/mesa_params.h"
#include "model/mixers/mlstm/mlstm_params.h"

namespace mesa::model {
namespace {

using DeclareFn = MixerWeights (*)(const ModelConfig&, const std::string&, ParamBuilder&);

// One row per mixer kind, in MixerKind's order.
constexpr DeclareFn kDeclarations[] = {
    &DeclareMesaParams,           // mesa
    &DeclareMesaParams,           // gla
    &DeclareDeltaNetParams,       // deltanet
    &DeclareGatedDeltaNetParams,  // gated_deltanet
    &DeclareAttentionParams,      // attention
    &DeclareAttentionParams,      // swa
    &DeclareHawkParams,           // hawk
    &DeclareMamba2MesaParams,     // mamba2_mesa
    &DeclareMlstmParams,          // mlstm
    &DeclareMamba2Params,         // mamba2
};
static_assert(std::size(kDeclarations) == std::size(spec::kMixers),
              "one parameter declaration per mixer kind");

}  // namespace

MixerWeights DeclareMixerParams(MixerKind kind, const ModelConfig& config,
                                const std::string& layer_prefix, ParamBuilder& builder) {
  return kDeclarations[static_cast<int>(kind)](config, layer_prefix, builder);
}

}  // namespace mesa::model
