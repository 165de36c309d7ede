// Types shared by the implementations of the causal softmax attention operator (global and
// sliding-window). Users include kernels/attention/attention_op.h, which includes this file.
//
// ---------------------------------------------------------------------------------------------
// CONVENTIONS (every implementation follows them exactly; see kernels/attention/README.md)
//
// Per batch row b and head h, for query token i = 0..T-1 (no rotary, no masking other than the
// causal window; rotary embeddings are the caller's, applied to q and k before the op):
//   keys seen by i:  J(i) = { j : lo(i) <= j <= i },  lo(i) = 0 (window 0: global causal) or
//                    max(0, i - W + 1) (window W >= 1: token i sees itself and the W-1 before it),
//                    raised to doc_start[b, i] when packed documents are given (varlen: a query
//                    sees no key of an earlier document)
//   s_ij = scale * q_i . k_j          scale = options.scale, or 1/sqrt(D) when that is 0
//   lse_i = log sum_{j in J(i)} exp(s_ij)
//   o_i = sum_{j in J(i)} exp(s_ij - lse_i) v_j
// Backward (FlashAttention form), with P_ij = exp(s_ij - lse_i) and delta_i = do_i . o_i:
//   dv_j = sum_i P_ij do_i,  dS_ij = P_ij (do_i . v_j - delta_i),
//   dq_i = scale sum_j dS_ij k_j,  dk_j = scale sum_i dS_ij q_i.
//
// Layouts (row-major, contiguous, float32):
//   q, k, v, o, do, dq, dk, dv : [B, T, H, D]  (token-major, like the Mesa and DeltaNet ops)
//   lse                         : [B, T, H]     (natural log, of the SCALED scores)
//   doc_start (optional)        : [B, T] int32, per token the index of its document's first token
// Keys and values have the same head dim D as queries. Without doc_start every batch row is one
// sequence starting at token 0.
//
// Single-query decoding (AttentionDecode): q [B, H, D] against a KV cache k_cache, v_cache
// [B, C, H, D] of capacity C, of which the first lengths[b] slots of row b are valid (all C when
// lengths is empty). The order of the slots does not matter (softmax attention is a set
// function of its keys once rotary is applied), so a sliding window keeps a ring buffer of
// C = W slots and overwrites slot pos % W.
// ---------------------------------------------------------------------------------------------
#ifndef MESANET_KERNELS_ATTENTION_ATTENTION_TYPES_H_
#define MESANET_KERNELS_ATTENTION_ATTENTION_TYPES_H_

#include <cstdint>
#include <span>

#include "absl/status/status.h"

namespace mesa::kernels::attention {

struct AttnDims {
  int64_t batch = 0;
  int64_t seq_len = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;

  int64_t TokenElems() const { return batch * seq_len * heads * head_dim; }  // q, k, v, o
  int64_t RowElems() const { return batch * seq_len * heads; }               // lse
};

enum class AttnImpl {
  kReference,  // float64 oracle (materialises each row's probabilities; single-threaded).
  kCpu,        // float32, one row at a time (O(T) memory per thread), threads over (b, h).
  kCuda,       // fused FlashAttention-style CUDA kernels (bf16 tensor cores, host memory
               // staged); needs //kernels/attention/cuda:attention_cuda_register and a GPU.
};

struct AttnOptions {
  AttnImpl impl = AttnImpl::kCpu;
  int64_t window = 0;   // 0: global causal; W >= 1: each token sees itself and the W-1 before it
  float scale = 0.f;    // softmax scale; 0 => 1/sqrt(head_dim)
  int num_threads = 0;  // CPU threads over (b, h); 0 => hardware_concurrency.
};

// The scale actually used: options.scale, or 1/sqrt(head_dim) when it is 0.
float EffectiveScale(const AttnOptions& options, int64_t head_dim);
// First key index query i sees (window 0: 0).
inline int64_t WindowStart(int64_t i, int64_t window) {
  return window > 0 && i - window + 1 > 0 ? i - window + 1 : 0;
}

// Useful floating-point work (visible causal/window pairs only, MAC x 2): forward 2 matmuls,
// backward 5. What the benchmarks report throughput against.
double ForwardFlops(const AttnDims& dims, int64_t window);
double BackwardFlops(const AttnDims& dims, int64_t window);

struct AttnInputs {
  AttnDims dims;
  std::span<const float> q, k, v;  // [B,T,H,D]
  // Optional [B,T]: packed documents (each value in [0, t] for token t, non-decreasing within a
  // row); empty: none.
  std::span<const int32_t> doc_start;
};

// lo(i) above: the first key query i of row b (of seq_len tokens) sees.
inline int64_t FirstKey(std::span<const int32_t> doc_start, int64_t seq_len, int64_t window,
                        int64_t b, int64_t i) {
  const int64_t lo = WindowStart(i, window);
  if (doc_start.empty()) return lo;
  const int64_t doc = doc_start[b * seq_len + i];
  return doc > lo ? doc : lo;
}

struct AttnForwardOutputs {
  std::span<float> o;    // required [B,T,H,D]
  std::span<float> lse;  // optional [B,T,H] (what the backward reuses)
};

struct AttnBackwardInputs {
  std::span<const float> d_o;  // required [B,T,H,D], dL/do
  // The forward's o and lse: both given (the backward reuses them) or both empty (recomputed).
  std::span<const float> o;    // [B,T,H,D]
  std::span<const float> lse;  // [B,T,H]
};

struct AttnGradients {
  std::span<float> dq, dk, dv;  // required [B,T,H,D], overwritten
};

struct AttnDecodeInputs {
  int64_t batch = 0, heads = 0, head_dim = 0;
  int64_t capacity = 0;              // C, slots per row of the cache
  std::span<const float> q;          // [B,H,D]
  std::span<const float> k_cache;    // [B,C,H,D]
  std::span<const float> v_cache;    // [B,C,H,D]
  std::span<const int32_t> lengths;  // optional [B], valid slots per row, each in [1, C]
};

// Checks dims (B, T, H, D >= 1), options (window >= 0, finite scale, num_threads >= 0), every span
// size, that every float is finite and the document starts as above. InvalidArgument naming the
// tensor (and, for a non-finite value, its flat index).
absl::Status ValidateAttnInputs(const AttnInputs& in, const AttnOptions& options);
absl::Status ValidateAttnForwardOutputs(const AttnInputs& in, const AttnForwardOutputs& out);
absl::Status ValidateAttnBackward(const AttnInputs& in, const AttnBackwardInputs& bwd,
                                  const AttnGradients& grads);
// Decoding: as above for the sizes, the lengths and the valid slots, plus scale and num_threads.
absl::Status ValidateAttnDecode(const AttnDecodeInputs& in, float scale, int num_threads,
                                std::span<const float> o);

// Backend registration seam for CUDA, as for Mesa and DeltaNet:
// //kernels/attention/cuda:attention_cuda_register (alwayslink) registers it from a static
// initialiser; without it, impl = kCuda is FailedPrecondition. The functions receive validated
// arguments in host memory.
struct AttnCudaBackend {
  absl::Status (*forward)(const AttnInputs&, const AttnOptions&, AttnForwardOutputs*) = nullptr;
  absl::Status (*backward)(const AttnInputs&, const AttnBackwardInputs&, const AttnOptions&,
                           AttnGradients*) = nullptr;
  absl::Status (*device_available)() = nullptr;
};
void RegisterAttnCudaBackend(const AttnCudaBackend& backend);
const AttnCudaBackend* GetAttnCudaBackend();  // nullptr when none was linked in

}  // namespace mesa::kernels::attention

#endif  // MESANET_KERNELS_ATTENTION_ATTENTION_TYPES_H_
