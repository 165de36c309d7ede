// The device abstraction of the trainer.
//
// MesaNet's forward and backward (model/model) are written once against this interface: every
// pointer passed in is a device pointer obtained from Allocate*. The CPU backend runs the
// model/layers functions and the chunked CPU Mesa operator on host memory; a CUDA backend
// (bf16 activations, cuBLASLt, fused kernels, the CUDA Mesa operator) implements the same calls.
// Shapes follow model/layers/cpu_layers.h; backward calls accumulate into gradients the same way.
#ifndef MESANET_MODEL_BACKEND_BACKEND_H_
#define MESANET_MODEL_BACKEND_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/mesa_op.h"

namespace mesa::model {

// Which solve the Mesa operator runs: fixed steps (training) or tolerance mode (evaluation).
struct MesaSolve {
  int max_steps = 30;
  float tolerance = 0.0f;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string Name() const = 0;

  // Memory. Allocations are zero-filled and live until Free.
  virtual float* AllocateFloats(int64_t n) = 0;
  virtual int32_t* AllocateInts(int64_t n) = 0;
  virtual void Free(void* ptr) = 0;
  virtual void CopyToDevice(void* dst, const void* src, size_t bytes) = 0;
  virtual void CopyToHost(void* dst, const void* src, size_t bytes) = 0;
  virtual void Zero(float* ptr, int64_t n) = 0;
  virtual void Copy(float* dst, const float* src, int64_t n) = 0;  // device to device

  // Layers.
  // out = in · weight^T, or out += in · weight^T when accumulate (residual branches).
  virtual void LinearForward(const float* in, const float* weight, float* out, int64_t m,
                             int64_t k, int64_t n, bool accumulate) = 0;
  virtual void LinearBackward(const float* in, const float* weight, const float* d_out,
                              float* d_in, float* d_weight, int64_t m, int64_t k, int64_t n) = 0;
  // The same with the rows of `out` / `d_out` `ld` >= n floats apart (a padded row stride);
  // columns [n, ld) are neither read nor written. With ld == n these are exactly LinearForward /
  // LinearBackward. MesaNet pads its logits this way (MesaNet::logits_ld()).
  virtual void LinearForwardStrided(const float* in, const float* weight, float* out, int64_t ld,
                                    int64_t m, int64_t k, int64_t n, bool accumulate) = 0;
  virtual void LinearBackwardStrided(const float* in, const float* weight, const float* d_out,
                                     int64_t ld, float* d_in, float* d_weight, int64_t m,
                                     int64_t k, int64_t n) = 0;
  virtual void BiasForward(float* out, const float* bias, int64_t rows, int64_t n) = 0;
  virtual void BiasBackward(const float* d_out, float* d_bias, int64_t rows, int64_t n) = 0;
  virtual void EmbeddingForward(const int32_t* tokens, const float* table, float* out, int64_t n,
                                int64_t c, float scale) = 0;
  virtual void EmbeddingBackward(const int32_t* tokens, const float* d_out, float* d_table,
                                 int64_t n, int64_t c, float scale) = 0;
  virtual void RmsNormForward(const float* x, const float* weight, float* out, float* rstd,
                              int64_t rows, int64_t c, float eps) = 0;
  virtual void RmsNormBackward(const float* x, const float* weight, const float* rstd,
                               const float* d_out, float* d_x, float* d_weight, int64_t rows,
                               int64_t c) = 0;
  virtual void CausalConvForward(const float* x, const float* weight, float* out, int64_t b,
                                 int64_t t, int64_t ch, int64_t w) = 0;
  virtual void CausalConvBackward(const float* x, const float* weight, const float* d_out,
                                  float* d_x, float* d_weight, int64_t b, int64_t t, int64_t ch,
                                  int64_t w) = 0;
  virtual void SiluL2NormForward(const float* x, float* y, int64_t groups, int64_t d) = 0;
  virtual void SiluL2NormBackward(const float* x, const float* d_y, float* d_x, int64_t groups,
                                  int64_t d) = 0;
  virtual void GatesForward(const float* a_pre, const float* b_pre, float* beta,
                            float* log_gamma, int64_t n, float cap) = 0;
  virtual void GatesBackward(const float* a_pre, const float* b_pre, const float* d_beta,
                             const float* d_log_gamma, float* d_a_pre, float* d_b_pre, int64_t n,
                             float cap) = 0;
  virtual void LambdaForward(const float* p, float* lambda, int64_t n, float floor) = 0;
  virtual void LambdaBackward(const float* p, const float* d_lambda, float* d_p, int64_t n) = 0;
  virtual void SwiGluForward(const float* gate, const float* up, float* h, int64_t n) = 0;
  virtual void SwiGluBackward(const float* gate, const float* up, const float* d_h, float* d_gate,
                              float* d_up, int64_t n) = 0;
  virtual void AddInPlace(float* out, const float* in, int64_t n) = 0;
  // Writes per-row losses (0 on BOS targets) and returns their sum. Logit rows are `ld` >= v
  // floats apart; columns [v, ld) are neither read nor written (also by the backward).
  virtual double SoftcapCrossEntropyForward(const float* logits, const int32_t* targets,
                                            float* losses, int64_t rows, int64_t v, int64_t ld,
                                            float cap, int32_t ignore_token) = 0;
  virtual void SoftcapCrossEntropyBackward(float* logits, const int32_t* targets, int64_t rows,
                                           int64_t v, int64_t ld, float cap,
                                           int32_t ignore_token, float loss_scale) = 0;

  // The Mesa operator (kernels/mesa_op.h). Returns the mean CG steps per token.
  virtual absl::StatusOr<double> MesaForward(const kernels::MesaInputs& in, const MesaSolve& solve,
                                             const kernels::MesaForwardOutputs& out) = 0;
  virtual absl::StatusOr<double> MesaBackward(const kernels::MesaInputs& in,
                                              const kernels::MesaBackwardInputs& bwd,
                                              const MesaSolve& solve,
                                              const kernels::MesaGradients& grads) = 0;

  // Optimizer and reductions over contiguous buffers.
  virtual double SumOfSquares(const float* x, int64_t n) = 0;
  virtual void Scale(float* x, int64_t n, float factor) = 0;
  // AdamW on one segment; bias corrections are passed in so resumed runs match exactly.
  virtual void AdamWUpdate(float* params, const float* grads, float* m, float* v, int64_t n,
                           float lr, float beta1, float beta2, float eps, float weight_decay,
                           float bias_correction1, float bias_correction2) = 0;
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_BACKEND_BACKEND_H_
