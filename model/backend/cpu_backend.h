// CPU backend: float32 host memory, OpenBLAS GEMMs, the CPU Mesa operator.
#ifndef MESANET_MODEL_BACKEND_CPU_BACKEND_H_
#define MESANET_MODEL_BACKEND_CPU_BACKEND_H_

#include <string>

#include "kernels/mesa_op.h"
#include "model/backend/backend.h"

namespace mesa::model {

struct CpuBackendOptions {
  int num_threads = 0;  // OpenBLAS and Mesa-op threads; 0 = all cores.
  // kChunked (default) or kReference (float64 exact solve; gradient checks).
  kernels::MesaImpl mesa_impl = kernels::MesaImpl::kChunked;
};

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(const CpuBackendOptions& options = {});

  std::string Name() const override { return "cpu"; }
  float* AllocateFloats(int64_t n) override;
  int32_t* AllocateInts(int64_t n) override;
  void Free(void* ptr) override;
  void CopyToDevice(void* dst, const void* src, size_t bytes) override;
  void CopyToHost(void* dst, const void* src, size_t bytes) override;
  void Zero(float* ptr, int64_t n) override;

  void Copy(float* dst, const float* src, int64_t n) override;
  void LinearForward(const float* in, const float* weight, float* out, int64_t m, int64_t k,
                     int64_t n, bool accumulate) override;
  void LinearBackward(const float* in, const float* weight, const float* d_out, float* d_in,
                      float* d_weight, int64_t m, int64_t k, int64_t n) override;
  void LinearForwardStrided(const float* in, const float* weight, float* out, int64_t ld,
                            int64_t m, int64_t k, int64_t n, bool accumulate) override;
  void LinearBackwardStrided(const float* in, const float* weight, const float* d_out, int64_t ld,
                             float* d_in, float* d_weight, int64_t m, int64_t k,
                             int64_t n) override;
  void BiasForward(float* out, const float* bias, int64_t rows, int64_t n) override;
  void BiasBackward(const float* d_out, float* d_bias, int64_t rows, int64_t n) override;
  void EmbeddingForward(const int32_t* tokens, const float* table, float* out, int64_t n,
                        int64_t c, float scale) override;
  void EmbeddingBackward(const int32_t* tokens, const float* d_out, float* d_table, int64_t n,
                         int64_t c, float scale) override;
  void RmsNormForward(const float* x, const float* weight, float* out, float* rstd, int64_t rows,
                      int64_t c, float eps) override;
  void RmsNormBackward(const float* x, const float* weight, const float* rstd, const float* d_out,
                       float* d_x, float* d_weight, int64_t rows, int64_t c) override;
  void CausalConvForward(const float* x, const float* weight, float* out, int64_t b, int64_t t,
                         int64_t ch, int64_t w) override;
  void CausalConvBackward(const float* x, const float* weight, const float* d_out, float* d_x,
                          float* d_weight, int64_t b, int64_t t, int64_t ch, int64_t w) override;
  void SiluL2NormForward(const float* x, float* y, int64_t groups, int64_t d) override;
  void SiluL2NormBackward(const float* x, const float* d_y, float* d_x, int64_t groups,
                          int64_t d) override;
  void GatesForward(const float* a_pre, const float* b_pre, float* beta, float* log_gamma,
                    int64_t n, float cap) override;
  void GatesBackward(const float* a_pre, const float* b_pre, const float* d_beta,
                     const float* d_log_gamma, float* d_a_pre, float* d_b_pre, int64_t n,
                     float cap) override;
  void LambdaForward(const float* p, float* lambda, int64_t n, float floor) override;
  void LambdaBackward(const float* p, const float* d_lambda, float* d_p, int64_t n) override;
  void SwiGluForward(const float* gate, const float* up, float* h, int64_t n) override;
  void SwiGluBackward(const float* gate, const float* up, const float* d_h, float* d_gate,
                      float* d_up, int64_t n) override;
  void AddInPlace(float* out, const float* in, int64_t n) override;
  double SoftcapCrossEntropyForward(const float* logits, const int32_t* targets, float* losses,
                                    int64_t rows, int64_t v, int64_t ld, float cap,
                                    int32_t ignore_token) override;
  void SoftcapCrossEntropyBackward(float* logits, const int32_t* targets, int64_t rows, int64_t v,
                                   int64_t ld, float cap, int32_t ignore_token,
                                   float loss_scale) override;
  absl::StatusOr<double> MesaForward(const kernels::MesaInputs& in, const MesaSolve& solve,
                                     const kernels::MesaForwardOutputs& out) override;
  absl::StatusOr<double> MesaBackward(const kernels::MesaInputs& in,
                                      const kernels::MesaBackwardInputs& bwd,
                                      const MesaSolve& solve,
                                      const kernels::MesaGradients& grads) override;
  double SumOfSquares(const float* x, int64_t n) override;
  void Scale(float* x, int64_t n, float factor) override;
  void AdamWUpdate(float* params, const float* grads, float* m, float* v, int64_t n, float lr,
                   float beta1, float beta2, float eps, float weight_decay,
                   float bias_correction1, float bias_correction2) override;

 private:
  kernels::MesaOptions MesaOptionsFor(const MesaSolve& solve) const;
  CpuBackendOptions options_;
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_BACKEND_CPU_BACKEND_H_
