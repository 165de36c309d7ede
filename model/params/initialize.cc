#include "model/params/initialize.h"

#include <algorithm>
#include <cmath>

namespace mesa::model {
namespace {

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Uniform in (0, 1), from 53 random bits.
double Uniform(uint64_t& state) {
  return (static_cast<double>(SplitMix64(state) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

}  // namespace

void InitializeParams(absl::Span<const ParamTensor> tensors, uint64_t seed, float* params) {
  for (size_t index = 0; index < tensors.size(); ++index) {
    const ParamTensor& t = tensors[index];
    float* out = params + t.offset;
    uint64_t state = seed * 0x100000001b3ULL + index * 0x9e3779b97f4a7c15ULL + 12345;
    switch (t.init) {
      case InitKind::kOnes:
        for (int64_t i = 0; i < t.size; ++i) out[i] = 1.0f;
        break;
      case InitKind::kZeros:
        for (int64_t i = 0; i < t.size; ++i) out[i] = 0.0f;
        break;
      case InitKind::kConstant:
        for (int64_t i = 0; i < t.size; ++i) out[i] = t.init_value;
        break;
      case InitKind::kFanIn: {
        // Box-Muller.
        const double std = t.init_scale / std::sqrt(static_cast<double>(t.fan_in));
        for (int64_t i = 0; i < t.size; ++i) {
          const double u1 = Uniform(state), u2 = Uniform(state);
          out[i] =
              static_cast<float>(std * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
        }
        break;
      }
      case InitKind::kGammaBias:
        for (int64_t i = 0; i < t.size; ++i) {
          const double s = t.size == 1 ? 0.95 : 0.9 + 0.09 * i / (t.size - 1);
          out[i] = static_cast<float>(std::log(s / (1.0 - s)));
        }
        break;
      case InitKind::kLinspace:
        for (int64_t i = 0; i < t.size; ++i) {
          const double x = t.size == 1 ? 0.5 : static_cast<double>(i) / (t.size - 1);
          out[i] = static_cast<float>(t.init_value + x * (t.init_scale - t.init_value));
        }
        break;
      case InitKind::kSsmDtBias:
        for (int64_t i = 0; i < t.size; ++i) {
          const double u = Uniform(state);
          const double dt =
              std::max(1e-4, std::exp(std::log(1e-3) + u * (std::log(1e-1) - std::log(1e-3))));
          out[i] = static_cast<float>(dt + std::log(-std::expm1(-dt)));  // softplus^-1
        }
        break;
      case InitKind::kSsmALog:
        for (int64_t i = 0; i < t.size; ++i) {
          out[i] = static_cast<float>(std::log(1.0 + 15.0 * Uniform(state)));
        }
        break;
      case InitKind::kRgLruDecay:
      case InitKind::kRgLruDecayPaper:
        for (int64_t i = 0; i < t.size; ++i) {
          const double u = Uniform(state);
          const double a = t.init == InitKind::kRgLruDecay
                               ? std::sqrt(0.9 * 0.9 + u * (0.999 * 0.999 - 0.9 * 0.9))
                               : std::pow(0.9 + u * (0.999 - 0.9), 1.0 / 8.0);
          out[i] = static_cast<float>(std::log(1.0 / a - 1.0));  // softplus(p) = -log a
        }
        break;
    }
  }
}

}  // namespace mesa::model
