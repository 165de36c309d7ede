// eval.curve_bins_per_octave (docs/evaluation.md "Long-context perplexity"): per-position curves
// pooled into bins that widen geometrically, so that 32k-token curves fit the result budget. The
// bins are defined once here, for the validator's budget and the trainer's pooling.
#ifndef MESANET_SPEC_CURVE_BINS_H_
#define MESANET_SPEC_CURVE_BINS_H_

#include <cstdint>
#include <utility>
#include <vector>

namespace mesa::spec {

inline constexpr int kMaxCurveBinsPerOctave = 64;

// Positions 0..63 one bin each, then bins [floor(64 * 2^(j/b)), floor(64 * 2^((j+1)/b))) for
// j = 0, 1, ... (bins the floors leave empty are skipped), the last ending at `positions` - 1; as
// [first, last] pairs. b <= 0: one bin per position. b = 16 gives 208 bins for 32,768 positions.
std::vector<std::pair<int32_t, int32_t>> CurveBins(int positions, int bins_per_octave);

}  // namespace mesa::spec

#endif  // MESANET_SPEC_CURVE_BINS_H_
