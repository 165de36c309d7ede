// The sequence mixers a layer can use and what each one needs: the one table that the job-spec
// validator, the trainer's configuration (model/config), the parameter layout (model/net) and the
// layer factory (model/mixers) read. Adding a mixer: a MixerKind value and a row here, its operator
// (kernels/<mixer>/) and its folder model/mixers/<mixer>/ (layer, operator interface, CPU and CUDA
// implementations registered by backend name); docs/design.md §7 "Mixers".
#ifndef MESANET_SPEC_MIXERS_H_
#define MESANET_SPEC_MIXERS_H_

#include <string>

#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"

namespace mesa::spec {

enum class MixerKind { kMesa, kGla, kDeltaNet, kGatedDeltaNet };

struct MixerTraits {
  MixerKind kind;
  const char* name;      // as written in model.mixer / model.layer_mixers
  bool solves_with_cg;   // the CG options (cg_steps, cg_tol, cg_max_steps) apply
  bool has_forget_gate;  // γ: per-layer a_proj weight and bias
  bool has_lambda;       // λ: per-layer lambda_params
};

// Row i describes MixerKind value i. GLA is the Mesa operator with 0 CG steps; DeltaNet and Gated
// DeltaNet use the delta rule (kernels/deltanet/).
inline constexpr MixerTraits kMixers[] = {
    {MixerKind::kMesa, "mesa", true, true, true},
    {MixerKind::kGla, "gla", false, true, true},
    {MixerKind::kDeltaNet, "deltanet", false, false, false},
    {MixerKind::kGatedDeltaNet, "gated_deltanet", false, true, false},
};

constexpr bool MixerTableIsIndexedByKind() {
  for (int i = 0; i < static_cast<int>(std::size(kMixers)); ++i) {
    if (static_cast<int>(kMixers[i].kind) != i) return false;
  }
  return true;
}
static_assert(MixerTableIsIndexedByKind(), "kMixers rows must follow MixerKind's order");

inline constexpr const MixerTraits& TraitsOf(MixerKind kind) {
  return kMixers[static_cast<int>(kind)];
}

// The row named `name`, or nullptr.
inline const MixerTraits* FindMixer(absl::string_view name) {
  for (const MixerTraits& m : kMixers) {
    if (name == m.name) return &m;
  }
  return nullptr;
}

// "mesa, gla, deltanet, gated_deltanet".
inline std::string MixerNameList() {
  return absl::StrJoin(kMixers, ", ",
                       [](std::string* out, const MixerTraits& m) { out->append(m.name); });
}

}  // namespace mesa::spec

#endif  // MESANET_SPEC_MIXERS_H_
