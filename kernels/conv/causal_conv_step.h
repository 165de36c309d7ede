// The short causal depthwise convolution of q and k (model/layers/cpu_layers.h,
// CausalConvForward) continued from a saved tail: decoding one token at a time, or appending a
// chunk of tokens (chunked prefill, multi-turn append) from any state. Float32, CPU.
//
// Convolution (PyTorch Conv1d [C, 1, W] with W - 1 zeros of left padding at a sequence start):
//   out[t, c] = sum_{j=0}^{W-1} weight[c, j] * x[t - (W - 1) + j, c]
// where positions before the first token of the new piece read the tail.
//
// Layouts (row-major, contiguous):
//   x, out : [B, T, C]     the new tokens' inputs (for the model: the q or k projection, C = H*D)
//   weight : [C, W]
//   tail   : [B, W - 1, C]  the last W - 1 inputs before x, oldest first; all zeros at a sequence
//                           start. Updated in place to the last W - 1 inputs of (tail ++ x).
// Each output sums its W terms in the same order as CausalConvForward (j = 0 .. W - 1, taps that
// read the zero padding contribute 0 * weight), so appending in pieces from a zero tail gives the
// one-shot forward's values bit for bit.
#ifndef MESANET_KERNELS_CONV_CAUSAL_CONV_STEP_H_
#define MESANET_KERNELS_CONV_CAUSAL_CONV_STEP_H_

#include <cstdint>
#include <span>

#include "absl/status/status.h"

namespace mesa::kernels::cpu {

struct ConvDims {
  int64_t batch = 0;
  int64_t seq_len = 0;   // T: new tokens (1 when decoding)
  int64_t channels = 0;  // C
  int64_t width = 0;     // W, in [1, kMaxConvWidth]

  int64_t InputElems() const { return batch * seq_len * channels; }     // x, out
  int64_t TailElems() const { return batch * (width - 1) * channels; }  // tail
  int64_t WeightElems() const { return channels * width; }              // weight
};

// Checks dims: B, T, C >= 1, W in [1, kMaxConvWidth]. InvalidArgument saying which.
absl::Status ValidateConvDims(const ConvDims& dims);

// Checks dims (ValidateConvDims), span sizes and that x and weight are
// finite. InvalidArgument naming the offending tensor.
absl::Status ValidateCausalConvAppend(const ConvDims& dims, std::span<const float> x,
                                      std::span<const float> weight, std::span<const float> tail,
                                      std::span<const float> out);

// Validates, writes out and advances tail. x and out must not overlap; on error nothing is
// modified.
absl::Status CausalConvAppend(const ConvDims& dims, std::span<const float> x,
                              std::span<const float> weight, std::span<float> tail,
                              std::span<float> out);

}  // namespace mesa::kernels::cpu

#endif  // MESANET_KERNELS_CONV_CAUSAL_CONV_STEP_H_
