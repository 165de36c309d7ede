// Limits of mesa-serve's HTTP API (docs/serving.md): checked once, here, by the request parser;
// the engine relies on them. Prompt and generation sizes are those of spec/generation.h.
#ifndef MESANET_SPEC_SERVING_H_
#define MESANET_SPEC_SERVING_H_

#include <cstdint>

namespace mesa::spec {

inline constexpr int64_t kMaxServeRequestBytes = 8 << 20;  // a request body (413 above)
inline constexpr int kMaxServeChoices = 16;                // `n`
inline constexpr int kMaxServeTopLogprobs = 5;             // `logprobs` (as OpenAI's)
inline constexpr int kDefaultServeMaxTokens = 16;          // OpenAI's default for completions
inline constexpr int kMaxServeCgSteps = 1000;              // `cg_max_steps`

}  // namespace mesa::spec

#endif  // MESANET_SPEC_SERVING_H_
