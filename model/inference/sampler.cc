#include "model/inference/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
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

// A candidate token, its logit and its sampling weight.
struct Weighted {
  float logit;
  int32_t id;
  double w;
};

// Larger logit first, the lower id first among equal logits: a strict total order, so every
// "top m" set is unique.
inline bool Larger(const Weighted& a, const Weighted& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// The size r of the nucleus: the smallest r whose top-r items (by Larger) weigh >= target.
// Rearranges items so that items[0, r) are those r, with items[r - 1] the lowest ranked of them.
// Weighted quickselect, O(n) expected: the invariant is that items[lo, hi) hold exactly the ranks
// lo .. hi - 1 and that the top lo weigh acc < target.
size_t NucleusSize(std::vector<Weighted>& items, double target) {
  size_t lo = 0, hi = items.size();
  double acc = 0;
  while (hi - lo > 1) {
    const size_t mid = lo + (hi - lo) / 2;
    std::nth_element(items.begin() + lo, items.begin() + mid, items.begin() + hi, Larger);
    double upper = 0;  // the ranks lo .. mid - 1
    for (size_t j = lo; j < mid; ++j) upper += items[j].w;
    if (acc + upper >= target) {
      hi = mid;
    } else {
      acc += upper;
      lo = mid;
    }
  }
  return hi;
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

void SoftCapLogits(float cap, std::span<float> logits) {
  if (!(cap > 0)) return;
  for (float& z : logits) z = cap * std::tanh(z / cap);
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
  if (options.temperature == 0.f || options.top_k == 1) {
    const int32_t token = ArgMax(logits);
    return SampledToken{.token = token, .logprob = LogSoftmaxAt(logits, token)};
  }
  const double max = *std::max_element(logits.begin(), logits.end());
  const double inv_temperature = 1.0 / double(options.temperature);
  // Sampling weights by token id (0 for masked tokens), and the candidates with their weights.
  std::vector<double> weight(logits.size());
  std::vector<Weighted> items;
  items.reserve(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    weight[i] = std::exp((double(logits[i]) - max) * inv_temperature);
    if (std::isfinite(logits[i])) items.push_back({logits[i], static_cast<int32_t>(i), weight[i]});
  }
  // The cuts keep every token ranked at or above `boundary` (none: every unmasked token).
  std::optional<Weighted> boundary;
  const size_t k = size_t(options.top_k);
  if (k > 0 && k < items.size()) {
    std::nth_element(items.begin(), items.begin() + (k - 1), items.end(), Larger);
    items.resize(k);
    boundary = items[k - 1];
  }
  if (options.top_p < 1.f) {
    double total = 0;
    for (const Weighted& item : items) total += item.w;
    const size_t r = NucleusSize(items, double(options.top_p) * total);
    if (r < items.size()) boundary = items[r - 1];
  }
  const auto kept = [&](size_t i) {
    return std::isfinite(logits[i]) &&
           (!boundary || !Larger(*boundary, Weighted{logits[i], int32_t(i), 0}));
  };
  // Inverse-CDF draw over the kept tokens in id order.
  double total = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (kept(i)) total += weight[i];
  }
  const double u = CounterUniform(options.seed, draw) * total;
  int32_t token = -1;
  double mass = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (!kept(i)) continue;
    token = static_cast<int32_t>(i);  // the last kept token, if rounding leaves u at the top
    mass += weight[i];
    if (u < mass) break;
  }
  double logprob;
  if (inv_temperature == 1.0) {  // the weights are the softmax's own terms
    double sum = 0;
    for (double w : weight) sum += w;
    logprob = double(logits[token]) - max - std::log(sum);
  } else {
    logprob = LogSoftmaxAt(logits, token);
  }
  return SampledToken{.token = token, .logprob = logprob};
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
