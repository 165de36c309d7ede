// Forward and backward of every non-Mesa layer of MesaNet, on the CPU.
//
// llm.c style: plain functions over row-major buffers, no autograd. Backward functions ACCUMULATE
// (+=) into parameter and input gradients, so callers zero gradient buffers once per step and
// residual branches add up naturally. Every function is instantiated for float (the CPU backend)
// and double (the finite-difference gradient checks).
#ifndef MESANET_MODEL_LAYERS_CPU_LAYERS_H_
#define MESANET_MODEL_LAYERS_CPU_LAYERS_H_

#include <cstdint>

namespace mesa::model::cpu {

// out[M,N] = in[M,K] · weight[N,K]^T (+ out when accumulate). Weight layout is nn.Linear's [out,
// in].
template <typename T>
void LinearForward(const T* in, const T* weight, T* out, int64_t m, int64_t k, int64_t n,
                   bool accumulate = false);
// d_in[M,K] += d_out · weight (skipped when d_in is null); d_weight[N,K] += d_out^T · in.
template <typename T>
void LinearBackward(const T* in, const T* weight, const T* d_out, T* d_in, T* d_weight, int64_t m,
                    int64_t k, int64_t n);
// The same with the rows of out / d_out `ld` >= n apart (columns [n, ld) untouched).
template <typename T>
void LinearForwardStrided(const T* in, const T* weight, T* out, int64_t ld, int64_t m, int64_t k,
                          int64_t n, bool accumulate);
// accumulate_d_in = false overwrites d_in (d_weight always accumulates).
template <typename T>
void LinearBackwardStrided(const T* in, const T* weight, const T* d_out, int64_t ld, T* d_in,
                           T* d_weight, int64_t m, int64_t k, int64_t n,
                           bool accumulate_d_in = true);

// Packed documents (model/layers/document_starts.h): x[r, 0..cols) = value at every position r of
// the b x t positions that starts a document (doc_start[r] == r % t), e.g. log γ at a reset.
void FillAtDocumentStarts(float* x, const int32_t* doc_start, int64_t b, int64_t t, int64_t cols,
                          float value);

// out = E[token] * scale, rows of width C.
template <typename T>
void EmbeddingForward(const int32_t* tokens, const T* table, T* out, int64_t n, int64_t c, T scale);
template <typename T>
void EmbeddingBackward(const int32_t* tokens, const T* d_out, T* d_table, int64_t n, int64_t c,
                       T scale);

// RMSNorm over rows of width C: out = x / sqrt(mean(x^2) + eps) * weight. Saves 1/rms per row.
// The per-head output norm is the same call with rows = tokens * heads and C = head_dim.
template <typename T>
void RmsNormForward(const T* x, const T* weight, T* out, T* rstd, int64_t rows, int64_t c, T eps);
template <typename T>
void RmsNormBackward(const T* x, const T* weight, const T* rstd, const T* d_out, T* d_x,
                     T* d_weight, int64_t rows, int64_t c);

// Causal depthwise conv over time, per sequence: x,out [B,T,Ch], weight [Ch, W] (PyTorch Conv1d
// [Ch,1,W] with left padding W-1): out[t,c] = sum_j weight[c,j] * x[t-(W-1)+j, c].
// Packed documents (data.reset_at_bos): `doc_start` [B*T] (null: none) holds, per position, the
// in-row index of the first token of its document; taps before it read zero, as if the document
// began the sequence (docs/math.md §8.6).
template <typename T>
void CausalConvForward(const T* x, const T* weight, T* out, int64_t b, int64_t t, int64_t ch,
                       int64_t w, const int32_t* doc_start = nullptr);
template <typename T>
void CausalConvBackward(const T* x, const T* weight, const T* d_out, T* d_x, T* d_weight, int64_t b,
                        int64_t t, int64_t ch, int64_t w, const int32_t* doc_start = nullptr);
// Context parallelism (a slice of a longer sequence): the terms of the backward that involve the
// w - 1 inputs before the slice (`tail` [B, W-1, Ch], what its forward continued from; null: zero)
// and the slice's last w - 1 inputs, which the next slice continued from (`d_tail_out` [B, W-1,
// Ch], their gradient there, added to d_x's last rows; needs t >= w - 1). Writes d_tail (the
// gradient of `tail`; null: not wanted) and accumulates d_weight; with CausalConvBackward it is the
// backward of the convolution of [tail; x].
template <typename T>
void CausalConvTailBackward(const T* tail, const T* d_tail_out, const T* weight, const T* d_out,
                            T* d_x, T* d_tail, T* d_weight, int64_t b, int64_t t, int64_t ch,
                            int64_t w);

// y = SiLU(x) / sqrt(|SiLU(x)|^2 + eps) over groups of D (one group per token and head).
template <typename T>
void SiluL2NormForward(const T* x, T* y, int64_t groups, int64_t d);
template <typename T>
void SiluL2NormBackward(const T* x, const T* d_y, T* d_x, int64_t groups, int64_t d);

// Gates from pre-activations (one per token and head):
//   beta = sigmoid(b_pre), log_gamma = logsigmoid(a_pre) + log1p(-cap * beta^2)   (stable, no
//   exp/log of an underflowed gamma).
template <typename T>
// b_pre null: a mixer without an input gate (mamba2_mesa), beta = 1 (and no d_b_pre).
void GatesForward(const T* a_pre, const T* b_pre, T* beta, T* log_gamma, int64_t n, T cap);
// d_a_pre, d_b_pre are overwritten (not accumulated).
template <typename T>
void GatesBackward(const T* a_pre, const T* b_pre, const T* d_beta, const T* d_log_gamma,
                   T* d_a_pre, T* d_b_pre, int64_t n, T cap);

// lambda = floor + softplus(p).
template <typename T>
void LambdaForward(const T* p, T* lambda, int64_t n, T floor);
template <typename T>
void LambdaBackward(const T* p, const T* d_lambda, T* d_p, int64_t n);

// SwiGLU: h = SiLU(gate) * up.
template <typename T>
void SwiGluForward(const T* gate, const T* up, T* h, int64_t n);
template <typename T>
void SwiGluBackward(const T* gate, const T* up, const T* d_h, T* d_gate, T* d_up, int64_t n);

// Hawk's GeLU branch gating the recurrence: out = gelu_tanh(y_pre) * x, with the tanh form
// gelu_tanh(z) = z/2 (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3))) (docs/math.md §8.8).
// SiLU (Mamba-2's convolution output): y = x * sigmoid(x); the backward overwrites d_x.
template <typename T>
void SiluForward(const T* x, T* y, int64_t n);
template <typename T>
void SiluBackward(const T* x, const T* d_y, T* d_x, int64_t n);

template <typename T>
void GeluGateForward(const T* y_pre, const T* x, T* out, int64_t n);
template <typename T>
void GeluGateBackward(const T* y_pre, const T* x, const T* d_out, T* d_y_pre, T* d_x, int64_t n);

// A block-diagonal linear map (Hawk's gates): the m rows of `in` [m, blocks * width] split into
// `blocks` column blocks, out[:, j] (+)= in[:, j] · weight[j]^T with weight [blocks, width, width].
// The backward: d_in[:, j] (+)= d_out[:, j] · weight[j] (skipped when d_in is null), d_weight[j] +=
// d_out[:, j]^T · in[:, j].
template <typename T>
void BlockDiagonalLinearForward(const T* in, const T* weight, T* out, int64_t m, int64_t blocks,
                                int64_t width, bool accumulate);
template <typename T>
void BlockDiagonalLinearBackward(const T* in, const T* weight, const T* d_out, T* d_in, T* d_weight,
                                 int64_t m, int64_t blocks, int64_t width, bool accumulate_d_in);

// Soft-capped cross entropy. For each row: z = cap * tanh(logits / cap) (cap 0: z = logits);
// loss = -log softmax(z)[t].
// Rows whose target is `ignore_token` (BOS) get loss 0 and no gradient. Returns the loss sum.
// Row r of logits starts at logits + r * ld (ld >= v, a padded row stride; columns [v, ld) are
// neither read nor written).
template <typename T>
double SoftcapCrossEntropyForward(const T* logits, const int32_t* targets, T* losses, int64_t rows,
                                  int64_t v, int64_t ld, T cap, int32_t ignore_token);
// Greedy choice per row: tokens[r] = the lowest index of the largest z = cap * tanh(logits / cap)
// and logprobs[r] = its log-probability under softmax(z). cap > 0, or 0 for no soft-cap.
template <typename T>
void SoftcapArgmax(const T* logits, int64_t rows, int64_t v, int64_t ld, T cap, int32_t* tokens,
                   T* logprobs);
// Overwrites logits with d(loss_scale * sum of row losses)/d(logits), in place (saves a [BT,V]
// buffer, as llm.c does).
template <typename T>
void SoftcapCrossEntropyBackward(T* logits, const int32_t* targets, int64_t rows, int64_t v,
                                 int64_t ld, T cap, int32_t ignore_token, T loss_scale);

// out[r, j] += bias[j]; d_bias[j] += sum_r d_out[r, j].
template <typename T>
void BiasForward(T* out, const T* bias, int64_t rows, int64_t n);
template <typename T>
void BiasBackward(const T* d_out, T* d_bias, int64_t rows, int64_t n);

// out += in (residual connections).
template <typename T>
void AddInPlace(T* out, const T* in, int64_t n);

}  // namespace mesa::model::cpu

#endif  // MESANET_MODEL_LAYERS_CPU_LAYERS_H_
