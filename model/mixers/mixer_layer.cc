#include "model/mixers/mixer_layer.h"

#include "model/mixers/deltanet_layer.h"
#include "model/mixers/mesa_layer.h"

namespace mesa::model {

void MixerScratch::Plan(BufferPlan& plan, int64_t bt, const ModelConfig& config) {
  const int64_t hd = config.qk_dim(), h = config.n_heads;
  plan.acts.insert(plan.acts.end(), {{&d_q, bt * hd},
                                     {&d_k, bt * hd},
                                     {&d_v, bt * hd},
                                     {&d_conv, bt * hd},
                                     {&d_pre, bt * hd},
                                     {&d_a_pre, bt * h},
                                     {&d_b_pre, bt * h}});
  plan.floats.insert(plan.floats.end(),
                     {{&d_log_gamma, bt * h}, {&d_beta, bt * h}, {&d_lambda, hd}});
}

std::unique_ptr<MixerLayer> MakeMixerLayer(MixerKind kind, const ModelConfig& config) {
  switch (kind) {
    case MixerKind::kMesa:
      return std::make_unique<MesaLayer>(config, /*gla=*/false);
    case MixerKind::kGla:
      return std::make_unique<MesaLayer>(config, /*gla=*/true);
    case MixerKind::kDeltaNet:
      return std::make_unique<DeltaNetLayer>(config, /*gated=*/false);
    case MixerKind::kGatedDeltaNet:
      return std::make_unique<DeltaNetLayer>(config, /*gated=*/true);
  }
  return nullptr;
}

}  // namespace mesa::model
