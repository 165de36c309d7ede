// CPU backend: float32 host memory, OpenBLAS GEMMs. The mixers' CPU operators register for "cpu"
// (model/mixers/*/..._ops_cpu.cc) and read options() for their threads and implementation.
#ifndef MESANET_MODEL_BACKEND_CPU_BACKEND_H_
#define MESANET_MODEL_BACKEND_CPU_BACKEND_H_

#include <cstdint>
#include <string>

#include "kernels/mesa/mesa_types.h"
#include "model/backend/backend.h"

namespace mesa::model {

struct CpuBackendOptions {
  int num_threads = 0;  // OpenBLAS and mixer-operator threads; 0 = all cores.
  // The mixer operators' implementation: kChunked (default) or kReference (float64; exact
  // solves, for gradient checks).
  kernels::MesaImpl mesa_impl = kernels::MesaImpl::kChunked;
};

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(const CpuBackendOptions& options = {});

  std::string Name() const override { return "cpu"; }
  // num_threads resolved (never 0).
  const CpuBackendOptions& options() const { return options_; }
  // A host float buffer as a CPU activation (tests that call the backend on std::vectors).
  static Act AsAct(const float* host) { return {const_cast<float*>(host)}; }
  // ... and back: a CPU activation buffer is float32 host memory.
  static float* AsFloats(Act act) { return static_cast<float*>(act.ptr); }
  // Activations are float32 on the CPU (activation_type() keeps its kFloat32 default), so an
  // Act's ptr is a float* and every activation call is the float32 layer function.
  float* AllocateFloats(int64_t n) override;
  int32_t* AllocateInts(int64_t n) override;
  Act AllocateActivations(int64_t n) override;
  using Backend::Free;
  void Free(void* ptr) override;
  void CopyToDevice(void* dst, const void* src, size_t bytes) override;
  void CopyToHost(void* dst, const void* src, size_t bytes) override;
  void Zero(float* ptr, int64_t n) override;
  void Copy(float* dst, const float* src, int64_t n) override;
  void ZeroActivations(Act ptr, int64_t n) override;
  void CopyActivations(Act dst, Act src, int64_t n) override;
  void ActivationsToHost(float* dst, Act src, int64_t n) override;
  void ActivationsFromHost(Act dst, const float* src, int64_t n) override;

  void LinearForwardStrided(Act in, const float* weight, Act out, int64_t ld, int64_t m, int64_t k,
                            int64_t n, bool accumulate) override;
  void LinearBackwardStrided(Act in, const float* weight, Act d_out, int64_t ld, Act d_in,
                             float* d_weight, int64_t m, int64_t k, int64_t n,
                             bool accumulate_d_in) override;
  void BiasForward(Act out, const float* bias, int64_t rows, int64_t n) override;
  void BiasBackward(Act d_out, float* d_bias, int64_t rows, int64_t n) override;
  void EmbeddingForward(const int32_t* tokens, const float* table, Act out, int64_t n, int64_t c,
                        float scale) override;
  void EmbeddingBackward(const int32_t* tokens, Act d_out, float* d_table, int64_t n, int64_t c,
                         float scale) override;
  void RmsNormForward(Act x, const float* weight, Act out, float* rstd, int64_t rows, int64_t c,
                      float eps) override;
  void RmsNormBackward(Act x, const float* weight, const float* rstd, Act d_out, Act d_x,
                       float* d_weight, int64_t rows, int64_t c) override;
  void CausalConvForward(Act x, const float* weight, Act out, int64_t b, int64_t t, int64_t ch,
                         int64_t w, const int32_t* doc_start) override;
  void CausalConvBackward(Act x, const float* weight, Act d_out, Act d_x, float* d_weight,
                          int64_t b, int64_t t, int64_t ch, int64_t w,
                          const int32_t* doc_start) override;
  void FillAtDocumentStarts(float* x, const int32_t* doc_start, int64_t b, int64_t t, int64_t cols,
                            float value) override;
  void CausalConvAppend(Act x, const float* weight, float* tail, Act out, int64_t b, int64_t t,
                        int64_t ch, int64_t w) override;
  absl::Status CausalConvTailBackward(const float* tail, const float* d_tail_out,
                                      const float* weight, Act d_out, Act d_x, float* d_tail,
                                      float* d_weight, int64_t b, int64_t t, int64_t ch,
                                      int64_t w) override;
  void SiluL2NormForward(Act x, Act y, int64_t groups, int64_t d) override;
  void SiluL2NormBackward(Act x, Act d_y, Act d_x, int64_t groups, int64_t d) override;
  void GatesForward(Act a_pre, Act b_pre, float* beta, float* log_gamma, int64_t n,
                    float cap) override;
  void GatesBackward(Act a_pre, Act b_pre, const float* d_beta, const float* d_log_gamma,
                     Act d_a_pre, Act d_b_pre, int64_t n, float cap) override;
  void LambdaForward(const float* p, float* lambda, int64_t n, float floor) override;
  void LambdaBackward(const float* p, const float* d_lambda, float* d_p, int64_t n) override;
  void SwiGluForward(Act gate, Act up, Act h, int64_t n) override;
  void SwiGluBackward(Act gate, Act up, Act d_h, Act d_gate, Act d_up, int64_t n) override;
  void SiluForward(Act x, Act y, int64_t n) override;
  void SiluBackward(Act x, Act d_y, Act d_x, int64_t n) override;
  void GeluGateForward(Act y_pre, Act x, Act out, int64_t n) override;
  void GeluGateBackward(Act y_pre, Act x, Act d_out, Act d_y_pre, Act d_x, int64_t n) override;
  void BlockDiagonalLinearForward(Act in, const float* weight, Act out, int64_t m, int64_t blocks,
                                  int64_t width, bool accumulate) override;
  void BlockDiagonalLinearBackward(Act in, const float* weight, Act d_out, Act d_in,
                                   float* d_weight, int64_t m, int64_t blocks, int64_t width,
                                   bool accumulate_d_in) override;
  void AddInPlace(Act out, Act in, int64_t n) override;
  double SoftcapCrossEntropyForward(Act logits, const int32_t* targets, float* losses, int64_t rows,
                                    int64_t v, int64_t ld, float cap,
                                    int32_t ignore_token) override;
  void SoftcapSample(Act logits, int64_t rows, int64_t v, int64_t ld, float cap,
                     const SamplingRow* params, int32_t* tokens, float* logprobs) override;
  void SoftcapArgmax(Act logits, int64_t rows, int64_t v, int64_t ld, float cap, int32_t* tokens,
                     float* logprobs) override;
  // Recomputes each row's statistics (the losses are not needed on the CPU).
  void SoftcapCrossEntropyBackward(Act logits, const int32_t* targets, const float* losses,
                                   int64_t rows, int64_t v, int64_t ld, float cap,
                                   int32_t ignore_token, float loss_scale) override;
  double SumOfSquares(const float* x, int64_t n) override;
  void Scale(float* x, int64_t n, float factor) override;
  void AdamWUpdate(float* params, const float* grads, float* m, float* v, int64_t n, float lr,
                   float beta1, float beta2, float eps, float weight_decay, float bias_correction1,
                   float bias_correction2) override;

 private:
  CpuBackendOptions options_;
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_BACKEND_CPU_BACKEND_H_
