#include "model/mixers/attention/rotary.h"

#include <cmath>
#include <vector>

#include "spec/mixers.h"

namespace mesa::model {

double RotaryAngle(int64_t position, int64_t pair, int64_t head_dim) {
  return static_cast<double>(position) *
         std::pow(spec::kRotaryBase, -2.0 * static_cast<double>(pair) / head_dim);
}

void RotaryCpu(float* x, int64_t batch, int64_t seq_len, int64_t heads, int64_t head_dim,
               std::span<const int64_t> starts, bool inverse) {
  const int64_t half = head_dim / 2;
  std::vector<float> cos_t(half), sin_t(half);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t start = starts.empty() ? 0 : starts[b];
    for (int64_t t = 0; t < seq_len; ++t) {
      // One table per position, shared by the heads; angles in float64 so that large positions
      // keep their precision.
      for (int64_t i = 0; i < half; ++i) {
        const double angle = RotaryAngle(start + t, i, head_dim);
        cos_t[i] = static_cast<float>(std::cos(angle));
        sin_t[i] = static_cast<float>(inverse ? -std::sin(angle) : std::sin(angle));
      }
      float* token = x + ((b * seq_len) + t) * heads * head_dim;
      for (int64_t h = 0; h < heads; ++h) {
        float* v = token + h * head_dim;
        for (int64_t i = 0; i < half; ++i) {
          const float x1 = v[i], x2 = v[i + half];
          v[i] = x1 * cos_t[i] - x2 * sin_t[i];
          v[i + half] = x2 * cos_t[i] + x1 * sin_t[i];
        }
      }
    }
  }
}

}  // namespace mesa::model
