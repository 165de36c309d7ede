// Choosing the next token from a row of logits: greedy, temperature, top-k, top-p (nucleus), with
// a seed that makes every request reproducible on its own.
//
// Order of operations for temperature > 0 (the order of Hugging Face's generate):
//   1. scale: s_i = logit_i / temperature
//   2. top-k: keep the k largest s_i (ties broken towards the lower token id)
//   3. top-p: among those, sorted by s_i descending, keep the shortest prefix whose probability
//      under softmax(s restricted to the kept set) is >= top_p
//   4. draw one token from softmax(s) restricted to what is left (inverse CDF over the kept
//      tokens in id order), with a uniform number u that depends only on (seed, draw index)
//      (CounterUniform): no state is shared between requests,
//      so a request gives the same tokens whatever batch row or order it runs in, and a request
//      can be resumed at any draw.
// temperature == 0 is greedy: the arg max (lowest token id among ties); top_k and top_p are then
// irrelevant (the arg max is in every kept set). top_k == 1 is greedy for any temperature.
//
// Logits may contain -infinity (a masked token, never chosen); NaN, +infinity, an empty row or a
// row with no finite value is an error.
//
// Log-probability: SampledToken::logprob is log p(token) under the UNMODIFIED model distribution
// softmax(logits), i.e. temperature 1 and no top-k / top-p truncation: the number that perplexity
// and log-likelihood scoring use, independent of the decoding settings.
#ifndef MESANET_MODEL_INFERENCE_SAMPLER_H_
#define MESANET_MODEL_INFERENCE_SAMPLER_H_

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mesa::model {

struct SamplingOptions {
  float temperature = 1.f;  // >= 0; 0 => greedy
  int top_k = 0;            // >= 0; 0 => no top-k cut
  float top_p = 1.f;        // in (0, 1]; 1 => no nucleus cut
  uint64_t seed = 0;
};

// InvalidArgument naming the option: temperature < 0 or not finite, top_k < 0, top_p outside
// (0, 1] or NaN.
absl::Status ValidateSamplingOptions(const SamplingOptions& options);

struct SampledToken {
  int32_t token = 0;
  double logprob = 0.0;  // log softmax(logits)[token], unmodified distribution (see above)
};

// A uniform number in [0, 1) that depends only on (seed, draw): with M SplitMix64's output
// function and phi its golden-ratio increment, z = M(M(seed + phi) + phi * (draw + 1)), and the
// top 53 bits of z scaled by 2^-53 (the draw-th output of a SplitMix64 stream started from seed).
double CounterUniform(uint64_t seed, uint64_t draw);

// Draw number `draw` (0, 1, 2, ... within one request) from a row of logits. Pure: the same
// arguments give the same token. Validates the options and the logits.
absl::StatusOr<SampledToken> SampleToken(std::span<const float> logits,
                                         const SamplingOptions& options, uint64_t draw);

// The model's distribution is softmax(cap · tanh(z / cap)) of the logits z (the loss applies the
// same soft cap), so sampling and log-probabilities on the host see the capped logits: this
// applies the cap in place (cap 0: none, FLA's MesaNet).
void SoftCapLogits(float cap, std::span<float> logits);

// log softmax(logits)[token], in float64 (-infinity for a masked token). The logits must be valid
// (as SampleToken checks) and token in range.
double LogSoftmaxAt(std::span<const float> logits, int32_t token);

// One per request: SampleToken with a draw counter that advances on every successful call.
class Sampler {
 public:
  static absl::StatusOr<Sampler> Create(const SamplingOptions& options);

  absl::StatusOr<SampledToken> Next(std::span<const float> logits);
  uint64_t draws() const { return draws_; }
  const SamplingOptions& options() const { return options_; }

 private:
  explicit Sampler(const SamplingOptions& options) : options_(options) {}
  SamplingOptions options_;
  uint64_t draws_ = 0;
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_INFERENCE_SAMPLER_H_
