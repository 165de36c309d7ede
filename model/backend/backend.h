// The device abstraction of the trainer.
//
// MesaNet's forward and backward (model/net) are written once against this interface: every
// pointer passed in is a device pointer obtained from Allocate*. The CPU backend runs the
// model/layers functions on host memory; a CUDA backend (bf16 activations, cuBLASLt, fused
// kernels) implements the same calls. Shapes follow model/layers/cpu_layers.h; backward calls
// accumulate into gradients the same way. The sequence mixers' operators (Mesa, DeltaNet, ...) are
// not part of this interface: each mixer declares its own and each backend's implementation
// registers under the backend's Name() (model/mixers/mixer_ops.h), so a new mixer edits no file
// here.
#ifndef MESANET_MODEL_BACKEND_BACKEND_H_
#define MESANET_MODEL_BACKEND_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include <map>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "model/backend/sampling_row.h"

namespace mesa::model {

// Element type of a backend's activation buffers: float32 on the CPU, bf16 (or float32, for exact
// comparisons) on CUDA. Parameters, gradients, optimiser state, norms' rstd, the Mesa gates and
// q* are float32 on every backend.
enum class ActivationType { kFloat32, kBfloat16 };
inline const char* ActivationTypeName(ActivationType type) {  // "fp32" | "bf16"
  return type == ActivationType::kBfloat16 ? "bf16" : "fp32";
}

// A device buffer of activations in the backend's ActivationType. Opaque on purpose: model code
// cannot index it as floats; sub-buffers come from Backend::ActAt.
struct Act {
  void* ptr = nullptr;
  explicit operator bool() const { return ptr != nullptr; }
};

class Backend {
 public:
  virtual ~Backend() = default;
  // The name operators are registered under (model/mixers/mixer_ops.h): "cpu", "cuda".
  virtual std::string Name() const = 0;
  virtual ActivationType activation_type() const { return ActivationType::kFloat32; }
  int64_t activation_bytes() const {
    return activation_type() == ActivationType::kBfloat16 ? 2 : 4;
  }
  // The activation `elements` past `base`.
  Act ActAt(Act base, int64_t elements) const {
    return {static_cast<char*>(base.ptr) + elements * activation_bytes()};
  }

  // Memory. Allocations are zero-filled and live until Free.
  virtual float* AllocateFloats(int64_t n) = 0;
  virtual int32_t* AllocateInts(int64_t n) = 0;
  virtual Act AllocateActivations(int64_t n) = 0;
  virtual void Free(void* ptr) = 0;
  void Free(Act act) { Free(act.ptr); }
  virtual void CopyToDevice(void* dst, const void* src, size_t bytes) = 0;
  virtual void CopyToHost(void* dst, const void* src, size_t bytes) = 0;
  virtual void Zero(float* ptr, int64_t n) = 0;
  virtual void Copy(float* dst, const float* src, int64_t n) = 0;  // device to device
  // Rows of `row_elems` values of one buffer: row first_dst + j becomes a copy of row src_rows[j]
  // (host array of `count`), j < count. No source row may lie among the destinations (the rows
  // are copied in any order). Row copies by default; the CUDA backend launches one kernel.
  virtual void GatherRows(float* base, int64_t row_elems, const int32_t* src_rows,
                          int64_t first_dst, int64_t count) {
    for (int64_t j = 0; j < count; ++j) {
      Copy(base + (first_dst + j) * row_elems, base + int64_t{src_rows[j]} * row_elems, row_elems);
    }
  }
  virtual void ZeroActivations(Act ptr, int64_t n) = 0;
  virtual void CopyActivations(Act dst, Act src, int64_t n) = 0;
  // Converting copies between host float32 and activations (tests, readbacks).
  virtual void ActivationsToHost(float* dst, Act src, int64_t n) = 0;
  virtual void ActivationsFromHost(Act dst, const float* src, int64_t n) = 0;

  // The float32 parameter buffer that the next Linear* calls take their weights from. A backend
  // computing in lower precision converts it here once (call again after every update of the
  // parameters); weights outside it still work, converted per call.
  virtual void CacheWeights(const float* params, int64_t n) {}

  // Layers. `Act` arguments are activations; `float*` ones are float32 (weights and their
  // gradients, rstd, gates).
  // out = in · weight^T, or out += in · weight^T when accumulate (residual branches).
  void LinearForward(Act in, const float* weight, Act out, int64_t m, int64_t k, int64_t n,
                     bool accumulate) {
    LinearForwardStrided(in, weight, out, n, m, k, n, accumulate);
  }
  // d_in += d_out · weight (skipped when d_in is null; d_in = ... when !accumulate_d_in, which
  // spares zeroing it first), d_weight += d_out^T · in (float32).
  void LinearBackward(Act in, const float* weight, Act d_out, Act d_in, float* d_weight, int64_t m,
                      int64_t k, int64_t n, bool accumulate_d_in = true) {
    LinearBackwardStrided(in, weight, d_out, n, d_in, d_weight, m, k, n, accumulate_d_in);
  }
  // The same with the rows of `out` / `d_out` `ld` >= n elements apart (a padded row stride);
  // columns [n, ld) are neither read nor written.
  virtual void LinearForwardStrided(Act in, const float* weight, Act out, int64_t ld, int64_t m,
                                    int64_t k, int64_t n, bool accumulate) = 0;
  virtual void LinearBackwardStrided(Act in, const float* weight, Act d_out, int64_t ld, Act d_in,
                                     float* d_weight, int64_t m, int64_t k, int64_t n,
                                     bool accumulate_d_in) = 0;
  virtual void BiasForward(Act out, const float* bias, int64_t rows, int64_t n) = 0;
  virtual void BiasBackward(Act d_out, float* d_bias, int64_t rows, int64_t n) = 0;
  virtual void EmbeddingForward(const int32_t* tokens, const float* table, Act out, int64_t n,
                                int64_t c, float scale) = 0;
  virtual void EmbeddingBackward(const int32_t* tokens, Act d_out, float* d_table, int64_t n,
                                 int64_t c, float scale) = 0;
  virtual void RmsNormForward(Act x, const float* weight, Act out, float* rstd, int64_t rows,
                              int64_t c, float eps) = 0;
  virtual void RmsNormBackward(Act x, const float* weight, const float* rstd, Act d_out, Act d_x,
                               float* d_weight, int64_t rows, int64_t c) = 0;
  // `doc_start` [b*t] int32 on the backend (null: none): packed documents, whose taps before
  // their document's first token read zero (cpu::CausalConvForward).
  virtual void CausalConvForward(Act x, const float* weight, Act out, int64_t b, int64_t t,
                                 int64_t ch, int64_t w, const int32_t* doc_start) = 0;
  virtual void CausalConvBackward(Act x, const float* weight, Act d_out, Act d_x, float* d_weight,
                                  int64_t b, int64_t t, int64_t ch, int64_t w,
                                  const int32_t* doc_start) = 0;
  // Packed documents: x[r, 0..cols) = value at every position r of b x t that starts a document
  // (doc_start[r] == r % t; cpu::FillAtDocumentStarts).
  virtual void FillAtDocumentStarts(float* x, const int32_t* doc_start, int64_t b, int64_t t,
                                    int64_t cols, float value) = 0;
  // Decoding: the causal convolution of `t` new inputs per sequence continued from `tail`
  // (float32 [b, w - 1, ch], the sequence's last inputs; zero before the first), which it then
  // advances (kernels/conv/causal_conv_step.h). One call, no scratch.
  virtual void CausalConvAppend(Act x, const float* weight, float* tail, Act out, int64_t b,
                                int64_t t, int64_t ch, int64_t w) = 0;
  // Context parallelism: the terms of CausalConvBackward for a slice that continued (by
  // CausalConvAppend) from `tail` and whose last w - 1 inputs the next slice continued from, with
  // `d_tail_out` their gradient there (float32 [b, w - 1, ch]; null: none, as null `tail` is zero
  // and null d_tail not wanted; needs t >= w - 1). Adds d_tail_out to d_x's last rows, writes
  // d_tail (the gradient of `tail`), accumulates d_weight
  // (model/layers/cpu_layers.h). Unimplemented where the backend has no kernel for it.
  virtual absl::Status CausalConvTailBackward(const float* tail, const float* d_tail_out,
                                              const float* weight, Act d_out, Act d_x,
                                              float* d_tail, float* d_weight, int64_t b, int64_t t,
                                              int64_t ch, int64_t w) {
    return absl::UnimplementedError(absl::StrCat(
        "the ", Name(), " backend has no causal-convolution tail backward (context parallelism)"));
  }
  // Two CausalConvAppend of the same shape (a layer's q and k paths): one launch where a backend
  // fuses it. No output or tail may overlap an operand of the other.
  virtual void CausalConvAppendPair(Act x0, const float* weight0, float* tail0, Act out0, Act x1,
                                    const float* weight1, float* tail1, Act out1, int64_t b,
                                    int64_t t, int64_t ch, int64_t w) {
    CausalConvAppend(x0, weight0, tail0, out0, b, t, ch, w);
    CausalConvAppend(x1, weight1, tail1, out1, b, t, ch, w);
  }
  virtual void SiluL2NormForward(Act x, Act y, int64_t groups, int64_t d) = 0;
  virtual void SiluL2NormBackward(Act x, Act d_y, Act d_x, int64_t groups, int64_t d) = 0;
  // An empty b_pre (a mixer without an input gate, mamba2_mesa): beta = 1; then GatesBackward
  // takes an empty b_pre and d_b_pre too, and GateProjectionsForward a null b_weight and b_bias.
  virtual void GatesForward(Act a_pre, Act b_pre, float* beta, float* log_gamma, int64_t n,
                            float cap) = 0;
  // BiasForward of a_pre (skipped when a_bias is null) and b_pre ([rows, cols], bias [cols]),
  // then GatesForward of them: the same results, in one launch where a backend fuses it.
  virtual void BiasGatesForward(Act a_pre, const float* a_bias, Act b_pre, const float* b_bias,
                                float* beta, float* log_gamma, int64_t rows, int64_t cols,
                                float cap) {
    if (a_bias != nullptr) BiasForward(a_pre, a_bias, rows, cols);
    if (b_pre) BiasForward(b_pre, b_bias, rows, cols);
    GatesForward(a_pre, b_pre, beta, log_gamma, rows * cols, cap);
  }
  // The gates straight from the normed input ln [rows, in]: a_pre = ln a_weight^T (zero when
  // a_weight is null: no forget gate) and b_pre = ln b_weight^T ([rows, heads] each, weights
  // [heads, in]), then BiasGatesForward. One launch where a backend fuses it (CUDA at decoding's
  // few rows: two GEMMs and a kernel otherwise cost three launches a layer).
  virtual void GateProjectionsForward(Act ln, const float* a_weight, const float* a_bias,
                                      const float* b_weight, const float* b_bias, Act a_pre,
                                      Act b_pre, float* beta, float* log_gamma, int64_t rows,
                                      int64_t in, int64_t heads, float cap) {
    if (a_weight != nullptr) {
      LinearForward(ln, a_weight, a_pre, rows, in, heads, false);
    } else {
      ZeroActivations(a_pre, rows * heads);
    }
    if (b_weight != nullptr) LinearForward(ln, b_weight, b_pre, rows, in, heads, false);
    BiasGatesForward(a_pre, a_bias, b_pre, b_bias, beta, log_gamma, rows, heads, cap);
  }
  virtual void GatesBackward(Act a_pre, Act b_pre, const float* d_beta, const float* d_log_gamma,
                             Act d_a_pre, Act d_b_pre, int64_t n, float cap) = 0;
  virtual void LambdaForward(const float* p, float* lambda, int64_t n, float floor) = 0;
  virtual void LambdaBackward(const float* p, const float* d_lambda, float* d_p, int64_t n) = 0;
  virtual void SwiGluForward(Act gate, Act up, Act h, int64_t n) = 0;
  // SwiGluForward with each row's gate and up side by side (one GEMM's output): gate_up
  // [rows, 2n] = gate | up, h [rows, n]. One launch where a backend fuses it.
  virtual void SwiGluRowsForward(Act gate_up, Act h, int64_t rows, int64_t n) {
    for (int64_t r = 0; r < rows; ++r) {
      SwiGluForward(ActAt(gate_up, 2 * n * r), ActAt(gate_up, 2 * n * r + n), ActAt(h, n * r), n);
    }
  }
  virtual void SwiGluBackward(Act gate, Act up, Act d_h, Act d_gate, Act d_up, int64_t n) = 0;
  // SiLU, y = x * sigmoid(x) (Mamba-2's convolution output), and its backward (d_x overwritten;
  // cpu::SiluForward).
  virtual void SiluForward(Act x, Act y, int64_t n) = 0;
  virtual void SiluBackward(Act x, Act d_y, Act d_x, int64_t n) = 0;
  // Hawk's GeLU branch gating the recurrence, out = gelu_tanh(y_pre) * x, and its backward
  // (cpu::GeluGateForward).
  virtual void GeluGateForward(Act y_pre, Act x, Act out, int64_t n) = 0;
  virtual void GeluGateBackward(Act y_pre, Act x, Act d_out, Act d_y_pre, Act d_x, int64_t n) = 0;
  // A block-diagonal linear map of m rows with `blocks` blocks of width x width float32 weights
  // (cpu::BlockDiagonalLinearForward); d_weight accumulates, d_in null is skipped.
  virtual void BlockDiagonalLinearForward(Act in, const float* weight, Act out, int64_t m,
                                          int64_t blocks, int64_t width, bool accumulate) = 0;
  virtual void BlockDiagonalLinearBackward(Act in, const float* weight, Act d_out, Act d_in,
                                           float* d_weight, int64_t m, int64_t blocks,
                                           int64_t width, bool accumulate_d_in) = 0;
  virtual void AddInPlace(Act out, Act in, int64_t n) = 0;
  // Writes per-row losses (0 on BOS targets) and returns their sum. Logit rows are `ld` >= v
  // elements apart; columns [v, ld) are neither read nor written (also by the backward, which
  // overwrites the logits with d(loss_scale * loss)/d(logits)). The backward takes the forward's
  // `losses` of the same logits and targets: a backend may rebuild each row's log-sum-exp from
  // them (loss + the target's soft-capped logit) instead of another pass over the row.
  virtual double SoftcapCrossEntropyForward(Act logits, const int32_t* targets, float* losses,
                                            int64_t rows, int64_t v, int64_t ld, float cap,
                                            int32_t ignore_token) = 0;
  // Greedy decoding without reading the logits back: per row the lowest index of the largest
  // soft-capped logit and its log-probability (cpu::SoftcapArgmax), into host `tokens` and
  // `logprobs` ([rows]).
  virtual void SoftcapArgmax(Act logits, int64_t rows, int64_t v, int64_t ld, float cap,
                             int32_t* tokens, float* logprobs) = 0;
  // Sampling without reading the logits back: per row the token model::SampleToken draws from the
  // soft-capped logits with that row's settings (`params`, host, [rows]) and its log-probability
  // under the unmodified distribution, into host `tokens` and `logprobs` ([rows]). The CUDA
  // kernel sums in float where the host sums doubles: at a cut or draw boundary it may rarely
  // choose a neighbouring token.
  virtual void SoftcapSample(Act logits, int64_t rows, int64_t v, int64_t ld, float cap,
                             const SamplingRow* params, int32_t* tokens, float* logprobs) = 0;
  virtual void SoftcapCrossEntropyBackward(Act logits, const int32_t* targets, const float* losses,
                                           int64_t rows, int64_t v, int64_t ld, float cap,
                                           int32_t ignore_token, float loss_scale) = 0;

  // Optimizer and reductions over contiguous float32 buffers.
  virtual double SumOfSquares(const float* x, int64_t n) = 0;
  virtual void Scale(float* x, int64_t n, float factor) = 0;
  // AdamW on one segment; bias corrections are passed in so resumed runs match exactly.
  virtual void AdamWUpdate(float* params, const float* grads, float* m, float* v, int64_t n,
                           float lr, float beta1, float beta2, float eps, float weight_decay,
                           float bias_correction1, float bias_correction2) = 0;

  // Waits until the device has done every call so far (a profiled step's phase boundaries).
  virtual void WaitForDevice() {}
  // Named ranges of host time, nested, for a device profiler (NVTX on CUDA, for Nsight).
  virtual void PushRange(const char* name) {}
  virtual void PopRange() {}

  // Recording (CUDA graphs): the calls between BeginRecording and EndRecording are kept, not run,
  // as one unit that Replay runs again on whatever the buffers then hold. A recorded call must not
  // allocate, synchronise or copy from the host. Backends that cannot record say Unimplemented
  // and the caller runs the calls directly.
  virtual absl::Status BeginRecording() {
    return absl::UnimplementedError(Name() + " backend cannot record");
  }
  virtual absl::StatusOr<int> EndRecording() {
    return absl::UnimplementedError(Name() + " backend cannot record");
  }
  virtual absl::Status Replay(int recording) {
    return absl::UnimplementedError(Name() + " backend cannot record");
  }

  // State an operator keeps once per backend and shares between layers (e.g. one CUDA workspace
  // for every Mesa layer, since layers run one at a time): made on first use of `key`, destroyed
  // with the backend.
  template <typename T>
  T& Shared(const std::string& key) {
    std::shared_ptr<void>& slot = shared_[key];
    if (slot == nullptr) slot = std::make_shared<T>();
    return *static_cast<T*>(slot.get());
  }

 private:
  std::map<std::string, std::shared_ptr<void>> shared_;
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_BACKEND_BACKEND_H_
