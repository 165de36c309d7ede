// Launchers for the CUDA backend's fused kernels (everything except GEMMs and the Mesa operator).
//
// Plain C++ (no nvcc needed to include it). Activation arguments are templates over the
// activation type T, float or __nv_bfloat16 (both instantiated in the op family's .cu file, named
// above each group: bias.cu, rmsnorm.cu, ...); every other argument (weights and their gradients,
// rstd, gates, losses, partial sums) is float32.
// Arithmetic is float32 throughout: bf16 values are widened on load and rounded (to nearest even)
// once on store; "+=" on a bf16 output reads, adds in float32 and rounds once.
// Every launcher is asynchronous on `stream`, never synchronises, and returns the launch error
// (cudaGetLastError). Semantics are exactly those of model/layers/cpu_layers.h (overwrite vs
// accumulate included). Reductions that feed parameter gradients are deterministic: per-block
// partial sums in a fixed layout, then one ordered pass (ReducePartials), never float atomics.
#ifndef MESANET_MODEL_BACKEND_CUDA_BACKEND_KERNELS_H_
#define MESANET_MODEL_BACKEND_CUDA_BACKEND_KERNELS_H_

#include <cuda_runtime.h>

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/common/limits.h"
#include "model/backend/sampling_row.h"

namespace mesa::model::cuda {

// Rows per partial-sum block of the deterministic column reductions; the scratch a caller must
// provide is PartialRows(rows) * columns floats.
inline constexpr int64_t kRowsPerPartial = 64;
inline int64_t PartialRows(int64_t rows) { return (rows + kRowsPerPartial - 1) / kRowsPerPartial; }

// bias.cu
template <typename T>
cudaError_t LaunchBiasForward(T* out, const float* bias, int64_t rows, int64_t n, cudaStream_t s);
// d_bias += column sums of d_out; `partials` holds PartialRows(rows) * n floats.
template <typename T>
cudaError_t LaunchBiasBackward(const T* d_out, float* d_bias, float* partials, int64_t rows,
                               int64_t n, cudaStream_t s);

// embedding.cu
template <typename T>
cudaError_t LaunchEmbeddingForward(const int32_t* tokens, const float* table, T* out, int64_t n,
                                   int64_t c, float scale, cudaStream_t s);
// Deterministic scatter-add: positions are pre-grouped by token on the host. `order` lists the
// positions grouped by token (ascending positions within a group), `seg_start`/`seg_token`
// describe `num_segments` groups (seg_start has num_segments + 1 entries).
template <typename T>
cudaError_t LaunchEmbeddingBackward(const int32_t* order, const int32_t* seg_start,
                                    const int32_t* seg_token, int64_t num_segments, const T* d_out,
                                    float* d_table, int64_t c, float scale, cudaStream_t s);

// rmsnorm.cu
// Largest row width the RMSNorm backward's shared-memory accumulators support.
int64_t MaxRmsNormWidth();
template <typename T>
cudaError_t LaunchRmsNormForward(const T* x, const float* weight, T* out, float* rstd, int64_t rows,
                                 int64_t c, float eps, cudaStream_t s);
// d_x += ..., d_weight += ...; `partials` holds PartialRows(rows) * c floats.
template <typename T>
cudaError_t LaunchRmsNormBackward(const T* x, const float* weight, const float* rstd,
                                  const T* d_out, T* d_x, float* d_weight, float* partials,
                                  int64_t rows, int64_t c, cudaStream_t s);

// causal_conv.cu. The taps live in registers: widths up to kernels::kMaxConvWidth (the bound the
// job-spec validator enforces).
inline constexpr int64_t kMaxConvWidth = kernels::kMaxConvWidth;
template <typename T>
cudaError_t LaunchCausalConvForward(const T* x, const float* weight, T* out, int64_t b, int64_t t,
                                    int64_t ch, int64_t w, const int32_t* doc_start,
                                    cudaStream_t s);
// d_x += ..., d_weight += ...; `partials` holds PartialRows(b * t) * ch * w floats.
template <typename T>
cudaError_t LaunchCausalConvBackward(const T* x, const float* weight, const T* d_out, T* d_x,
                                     float* d_weight, float* partials, int64_t b, int64_t t,
                                     int64_t ch, int64_t w, const int32_t* doc_start,
                                     cudaStream_t s);
// cpu::FillAtDocumentStarts.
// Row first_dst + j of `base` (rows of row_elems floats) = row src_rows[j] (host), j < count.
cudaError_t LaunchGatherRows(float* base, int64_t row_elems, const int32_t* src_rows,
                             int64_t first_dst, int64_t count, cudaStream_t s);
cudaError_t LaunchFillAtDocumentStarts(float* x, const int32_t* doc_start, int64_t b, int64_t t,
                                       int64_t cols, float value, cudaStream_t s);
// Context parallelism: cpu::CausalConvTailBackward (tail, d_tail_out, d_tail may be null).
template <typename T>
cudaError_t LaunchCausalConvTailBackward(const float* tail, const float* d_tail_out,
                                         const float* weight, const T* d_out, T* d_x, float* d_tail,
                                         float* d_weight, int64_t b, int64_t t, int64_t ch,
                                         int64_t w, cudaStream_t s);

// silu_l2norm.cu
template <typename T>
cudaError_t LaunchSiluL2NormForward(const T* x, T* y, int64_t groups, int64_t d, cudaStream_t s);
template <typename T>
cudaError_t LaunchSiluL2NormBackward(const T* x, const T* d_y, T* d_x, int64_t groups, int64_t d,
                                     cudaStream_t s);

// gates.cu
template <typename T>
cudaError_t LaunchGatesForward(const T* a_pre, const T* b_pre, float* beta, float* log_gamma,
                               int64_t n, float cap, cudaStream_t s);
template <typename T>
cudaError_t LaunchBiasGatesForward(T* a_pre, const float* a_bias, T* b_pre, const float* b_bias,
                                   float* beta, float* log_gamma, int64_t rows, int64_t cols,
                                   float cap, cudaStream_t s);
// a_pre, b_pre = ln [rows, in] times the weight rows [heads, in] (a_weight null: a_pre = 0), then
// LaunchBiasGatesForward's results; one CTA per (row, head).
template <typename T>
cudaError_t LaunchGateProjectionsForward(const T* ln, const T* a_weight, const float* a_bias,
                                         const T* b_weight, const float* b_bias, T* a_pre, T* b_pre,
                                         float* beta, float* log_gamma, int64_t rows, int64_t in,
                                         int64_t heads, float cap, cudaStream_t s);
template <typename T>
cudaError_t LaunchGatesBackward(const T* a_pre, const T* b_pre, const float* d_beta,
                                const float* d_log_gamma, T* d_a_pre, T* d_b_pre, int64_t n,
                                float cap, cudaStream_t s);

// lambda.cu
cudaError_t LaunchLambdaForward(const float* p, float* lambda, int64_t n, float floor,
                                cudaStream_t s);
cudaError_t LaunchLambdaBackward(const float* p, const float* d_lambda, float* d_p, int64_t n,
                                 cudaStream_t s);

// swiglu.cu
template <typename T>
cudaError_t LaunchSwiGluForward(const T* gate, const T* up, T* h, int64_t n, cudaStream_t s);
template <typename T>
cudaError_t LaunchSwiGluRowsForward(const T* gate_up, T* h, int64_t rows, int64_t n,
                                    cudaStream_t s);
template <typename T>
cudaError_t LaunchSwiGluBackward(const T* gate, const T* up, const T* d_h, T* d_gate, T* d_up,
                                 int64_t n, cudaStream_t s);

// gelu_gate.cu
template <typename T>
cudaError_t LaunchSiluForward(const T* x, T* y, int64_t n, cudaStream_t s);
template <typename T>
cudaError_t LaunchSiluBackward(const T* x, const T* d_y, T* d_x, int64_t n, cudaStream_t s);
template <typename T>
cudaError_t LaunchGeluGateForward(const T* y_pre, const T* x, T* out, int64_t n, cudaStream_t s);
template <typename T>
cudaError_t LaunchGeluGateBackward(const T* y_pre, const T* x, const T* d_out, T* d_y_pre, T* d_x,
                                   int64_t n, cudaStream_t s);

// add_in_place.cu
template <typename T>
cudaError_t LaunchAddInPlace(T* out, const T* in, int64_t n, cudaStream_t s);
// scale.cu
cudaError_t LaunchScale(float* x, int64_t n, float factor, cudaStream_t s);

// cross_entropy.cu
// Per-row losses (0 on ignored targets) into `losses`. Logit rows are `ld` >= v elements apart;
// columns [v, ld) are neither read nor written.
template <typename T>
cudaError_t LaunchSoftcapCrossEntropyForward(const T* logits, const int32_t* targets, float* losses,
                                             int64_t rows, int64_t v, int64_t ld, float cap,
                                             int32_t ignore_token, cudaStream_t s);
template <typename T>
// `losses` are the forward's: each row's log-sum-exp is rebuilt as loss + the target's
// soft-capped logit, so the row is read once.
cudaError_t LaunchSoftcapCrossEntropyBackward(T* logits, const int32_t* targets,
                                              const float* losses, int64_t rows, int64_t v,
                                              int64_t ld, float cap, int32_t ignore_token,
                                              float loss_scale, cudaStream_t s);

// Per row: tokens[r] = the lowest index of the largest soft-capped logit, logprobs[r] = its
// log-probability under softmax of the soft-capped row (device outputs). cap > 0, or 0 for no
// soft-cap.
template <typename T>
cudaError_t LaunchSoftcapArgmax(const T* logits, int64_t rows, int64_t v, int64_t ld, float cap,
                                int32_t* tokens, float* logprobs, cudaStream_t s);

// sampling.cu: per row the token model::SampleToken draws from the soft-capped logits with the
// row's settings (`params`, device, [rows]), and its log-probability at temperature 1.
template <typename T>
cudaError_t LaunchSoftcapSample(const T* logits, int64_t rows, int64_t v, int64_t ld, float cap,
                                const SamplingRow* params, int32_t* tokens, float* logprobs,
                                cudaStream_t s);

// sum.cu
// Deterministic sums in double. `partials` holds kSumBlocks doubles; the result lands in *out
// (device memory).
inline constexpr int kSumBlocks = 512;
cudaError_t LaunchSumOfSquares(const float* x, int64_t n, double* partials, double* out,
                               cudaStream_t s);
cudaError_t LaunchSum(const float* x, int64_t n, double* partials, double* out, cudaStream_t s);

// adamw.cu
cudaError_t LaunchAdamW(float* params, const float* grads, float* m, float* v, int64_t n, float lr,
                        float beta1, float beta2, float eps, float weight_decay,
                        float bias_correction1, float bias_correction2, cudaStream_t s);

// fill.cu
// Fills with `value` rounded to T (tests poison outputs with NaN).
template <typename T>
cudaError_t LaunchFill(T* x, int64_t n, float value, cudaStream_t s);

// convert.cu
// dst = src rounded to T (T = float: a plain copy), and back.
template <typename T>
cudaError_t LaunchFromFloat(const float* src, T* dst, int64_t n, cudaStream_t s);
template <typename T>
cudaError_t LaunchToFloat(const T* src, float* dst, int64_t n, cudaStream_t s);

}  // namespace mesa::model::cuda

#endif  // MESANET_MODEL_BACKEND_CUDA_BACKEND_KERNELS_H_
