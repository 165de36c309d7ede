// Public API of the causal softmax attention operator (global and sliding-window) on the CPU
// (target //kernels/attention:attention_op). Conventions: kernels/attention/attention_types.h and
// kernels/attention/README.md.
//
// One entry point for the implementations; AttnOptions::impl picks it:
//   kReference : float64 oracle. Slow.
//   kCpu       : float32, multithreaded over (b, h). Default.
//   kCuda      : the fused CUDA kernels through host memory (tests, the op-check tool).
//
// Example:
//   AttnInputs in{.dims = {B, T, H, D}, .q = q, .k = k, .v = v};
//   AttnOptions opt{.window = 1024};
//   ASSIGN_OR_RETURN(AttnForwardResult fwd, AttentionForwardAlloc(in, opt));
//   ASSIGN_OR_RETURN(AttnGradientsResult g, AttentionBackwardAlloc(in, d_o, opt, fwd.o, fwd.lse));
#ifndef MESANET_KERNELS_ATTENTION_ATTENTION_OP_H_
#define MESANET_KERNELS_ATTENTION_ATTENTION_OP_H_

#include <span>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/attention/attention_types.h"

namespace mesa::kernels::attention {

// Caller-owned buffers. Validates everything, then dispatches on options.impl.
absl::Status AttentionForward(const AttnInputs& in, const AttnOptions& options,
                              AttnForwardOutputs* out);
absl::Status AttentionBackward(const AttnInputs& in, const AttnBackwardInputs& bwd,
                               const AttnOptions& options, AttnGradients* grads);

// Owning convenience wrappers.
struct AttnForwardResult {
  std::vector<float> o;    // [B,T,H,D]
  std::vector<float> lse;  // [B,T,H]
};
absl::StatusOr<AttnForwardResult> AttentionForwardAlloc(const AttnInputs& in,
                                                        const AttnOptions& options);

struct AttnGradientsResult {
  std::vector<float> dq, dk, dv;  // [B,T,H,D]
};
// o and lse: the forward's (both, or both empty to recompute them).
absl::StatusOr<AttnGradientsResult> AttentionBackwardAlloc(const AttnInputs& in,
                                                           std::span<const float> d_o,
                                                           const AttnOptions& options,
                                                           std::span<const float> o = {},
                                                           std::span<const float> lse = {});

// One new query per (b, h) against a KV cache (layouts in attention_types.h), float32 on the CPU;
// o is [B,H,D]. scale 0 => 1/sqrt(head_dim). Threads over (b, h) as AttnOptions::num_threads.
absl::Status AttentionDecode(const AttnDecodeInputs& in, float scale, std::span<float> o,
                             int num_threads = 1);

// "reference" | "cpu" | "cuda" <-> AttnImpl.
absl::StatusOr<AttnImpl> ParseAttnImpl(std::string_view name);
std::string_view AttnImplName(AttnImpl impl);

}  // namespace mesa::kernels::attention

#endif  // MESANET_KERNELS_ATTENTION_ATTENTION_OP_H_
