#include "spec/curve_bins.h"

#include <algorithm>
#include <cmath>

namespace mesa::spec {

std::vector<std::pair<int32_t, int32_t>> CurveBins(int positions, int bins_per_octave) {
  constexpr int kExact = 64;
  std::vector<std::pair<int32_t, int32_t>> bins;
  const int exact = bins_per_octave > 0 ? std::min(positions, kExact) : positions;
  for (int k = 0; k < exact; ++k) bins.push_back({k, k});
  if (bins_per_octave <= 0) return bins;
  for (int j = 0;; ++j) {
    const auto edge = [&](int i) {
      return static_cast<int64_t>(
          std::floor(kExact * std::exp2(static_cast<double>(i) / bins_per_octave)));
    };
    const int64_t lo = edge(j), hi = edge(j + 1);
    if (lo >= positions) break;
    if (hi <= lo) continue;
    bins.push_back(
        {static_cast<int32_t>(lo), static_cast<int32_t>(std::min<int64_t>(hi, positions) - 1)});
  }
  return bins;
}

}  // namespace mesa::spec
