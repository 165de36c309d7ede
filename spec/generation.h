// Limits and defaults of text generation (mesa-generate and GENERATE jobs): checked once, here,
// by both the coordinator's spec validation and the generator.
#ifndef MESANET_SPEC_GENERATION_H_
#define MESANET_SPEC_GENERATION_H_

#include <cstdint>

namespace mesa::spec {

inline constexpr int kMaxPrompts = 1024;              // prompts per request or job
inline constexpr int64_t kMaxPromptTokens = 1 << 20;  // tokens of one prompt
inline constexpr int64_t kMaxPromptBytes = 4 << 20;   // bytes of one prompt's text
inline constexpr int kMaxNewTokens = 1 << 16;         // tokens generated per prompt
// Bytes of one completion's text: 64 per generated token at kMaxNewTokens. The trainer cuts a
// longer text on a character boundary; the coordinator refuses a longer one.
inline constexpr int64_t kMaxCompletionBytes = int64_t{kMaxNewTokens} * 64;
// Bytes of a completion's finish_reason ("length", "stop" or "eos").
inline constexpr int kMaxFinishReasonBytes = 16;
inline constexpr int kMaxStopSequences = 16;
inline constexpr int kMaxStopSequenceBytes = 256;
inline constexpr int kDefaultMaxNewTokens = 64;

}  // namespace mesa::spec

#endif  // MESANET_SPEC_GENERATION_H_
