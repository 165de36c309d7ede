#include "model/inference/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"

namespace mesa::model {
namespace {

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

// SplitMix64's output function (Steele, Lea, Flood 2014) on z + golden.
uint64_t SplitMix64(uint64_t z) {
  z += kGolden;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

absl::Status ValidateLogits(std::span<const float> logits) {
  if (logits.empty()) return absl::InvalidArgumentError("logits: the row is empty");
  if (logits.size() > size_t(std::numeric_limits<int32_t>::max())) {
    return absl::InvalidArgumentError(
        absl::StrCat("logits: ", logits.size(), " entries is too many"));
  }
  bool any_finite = false;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float x = logits[i];
    if (std::isnan(x) || x == std::numeric_limits<float>::infinity()) {
      return absl::InvalidArgumentError(
          absl::StrCat("logits: ", x, " at token ", i, " (NaN and +infinity are not allowed)"));
    }
    any_finite = any_finite || std::isfinite(x);
  }
  if (!any_finite) {
    return absl::InvalidArgumentError("logits: every entry is -infinity (no token can be chosen)");
  }
  return absl::OkStatus();
}

// Lowest index among the largest entries.
int32_t ArgMax(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

}  // namespace

absl::Status ValidateSamplingOptions(const SamplingOptions& options) {
  if (!(options.temperature >= 0.f) || !std::isfinite(options.temperature)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "temperature must be finite and >= 0 (0 = greedy), got ", options.temperature));
  }
  if (options.top_k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_k must be >= 0 (0 = no limit), got ", options.top_k));
  }
  if (!(options.top_p > 0.f && options.top_p <= 1.f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_p must be in (0, 1] (1 = no nucleus cut), got ", options.top_p));
  }
  return absl::OkStatus();
}

double CounterUniform(uint64_t seed, uint64_t draw) {
  const uint64_t bits = SplitMix64(SplitMix64(seed) + kGolden * draw);
  return double(bits >> 11) * 0x1.0p-53;
}

double LogSoftmaxAt(std::span<const float> logits, int32_t token) {
  const double max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float x : logits) sum += std::exp(double(x) - max);
  return double(logits[token]) - max - std::log(sum);
}

absl::StatusOr<SampledToken> SampleToken(std::span<const float> logits,
                                         const SamplingOptions& options, uint64_t draw) {
  if (auto s = ValidateSamplingOptions(options); !s.ok()) return s;
  if (auto s = ValidateLogits(logits); !s.ok()) return s;
  int32_t token = 0;
  if (options.temperature == 0.f || options.top_k == 1) {
    token = ArgMax(logits);
  } else {
    // Candidates: every token that is not masked; sorted (largest first, lower id first among
    // ties) only when a cut needs the order.
    std::vector<int32_t> candidates;
    candidates.reserve(logits.size());
    for (size_t i = 0; i < logits.size(); ++i) {
      if (std::isfinite(logits[i])) candidates.push_back(static_cast<int32_t>(i));
    }
    const auto larger = [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    };
    const size_t k = size_t(options.top_k);
    if (k > 0 && k < candidates.size()) {
      std::partial_sort(candidates.begin(), candidates.begin() + k, candidates.end(), larger);
      candidates.resize(k);
    } else if (options.top_p < 1.f) {
      std::sort(candidates.begin(), candidates.end(), larger);
    }
    double max = -std::numeric_limits<double>::infinity();
    for (int32_t i : candidates) max = std::max(max, double(logits[i]));
    const double inv_temperature = 1.0 / double(options.temperature);
    std::vector<double> weights(candidates.size());
    double total = 0;
    for (size_t j = 0; j < candidates.size(); ++j) {
      weights[j] = std::exp((double(logits[candidates[j]]) - max) * inv_temperature);
      total += weights[j];
    }
    size_t kept = candidates.size();
    if (options.top_p < 1.f) {
      const double target = double(options.top_p) * total;
      double mass = 0;
      for (size_t j = 0; j < candidates.size(); ++j) {
        mass += weights[j];
        if (mass >= target) {
          kept = j + 1;
          break;
        }
      }
      total = mass;
    }
    const double u = CounterUniform(options.seed, draw) * total;
    token = candidates[kept - 1];  // if rounding leaves u at the very top
    double mass = 0;
    for (size_t j = 0; j < kept; ++j) {
      mass += weights[j];
      if (u < mass) {
        token = candidates[j];
        break;
      }
    }
  }
  return SampledToken{.token = token, .logprob = LogSoftmaxAt(logits, token)};
}

absl::StatusOr<Sampler> Sampler::Create(const SamplingOptions& options) {
  if (auto s = ValidateSamplingOptions(options); !s.ok()) return s;
  return Sampler(options);
}

absl::StatusOr<SampledToken> Sampler::Next(std::span<const float> logits) {
  absl::StatusOr<SampledToken> token = SampleToken(logits, options_, draws_);
  if (token.ok()) ++draws_;
  return token;
}

}  // namespace mesa::model
