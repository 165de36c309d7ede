// MesaNet: tied embedding (scaled by sqrt(d_model)), N pre-norm blocks
//   x += MesaMixer(RMSNorm(x)); x += SwiGLU(RMSNorm(x))
// final RMSNorm, tied unembedding, logits soft-capped, cross entropy that skips BOS targets.
//
// llm.c style: hand-written forward and backward over one contiguous parameter buffer and one
// contiguous gradient buffer; every activation the backward needs is planned and allocated once
// in Create() for the largest micro-batch. All math goes through a Backend (CPU today).
#ifndef MESANET_MODEL_MODEL_MESANET_H_
#define MESANET_MODEL_MODEL_MESANET_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "model/backend/backend.h"
#include "model/config/job_config.h"
#include "model/model/param_layout.h"

namespace mesa::model {

struct ForwardStats {
  double loss_sum = 0;        // Sum of per-token losses over non-BOS targets.
  int64_t loss_tokens = 0;    // Number of non-BOS targets.
  double cg_steps_mean = 0;   // Mean CG steps per token, averaged over layers (forward solve).
  bool finite = true;         // False when a non-finite value was met (step must be skipped).
};

class MesaNet {
 public:
  // Plans and allocates parameters, gradients and activations for micro-batches of up to
  // `max_batch` sequences of `seq_len` tokens. ResourceExhausted when the plan does not fit.
  static absl::StatusOr<std::unique_ptr<MesaNet>> Create(const ModelConfig& config,
                                                         Backend* backend, int max_batch,
                                                         int seq_len);
  ~MesaNet();
  MesaNet(const MesaNet&) = delete;
  MesaNet& operator=(const MesaNet&) = delete;

  const ModelConfig& config() const { return config_; }
  const ParamLayout& layout() const { return layout_; }
  int64_t num_params() const { return layout_.total(); }
  Backend* backend() const { return backend_; }
  // Device buffers.
  float* params() { return params_; }
  float* grads() { return grads_; }
  int64_t activation_floats() const { return activation_floats_; }
  // Row stride of the logits buffer: vocab_size rounded up to kLogitRowAlign floats, so every
  // logit row starts 256-byte aligned and the tied-unembedding GEMMs get aligned leading
  // dimensions (vocab 50257 -> 50304; docs/perf_model_cuda.md). Columns [vocab_size, logits_ld)
  // are never read or written; parameters, gradients and checkpoints keep [vocab, d_model].
  static constexpr int64_t kLogitRowAlign = 64;
  int64_t logits_ld() const {
    return (int64_t{config_.vocab_size} + kLogitRowAlign - 1) / kLogitRowAlign * kLogitRowAlign;
  }

  void InitializeParams(uint64_t seed);
  void SetParamsFromHost(const float* host);
  void GetParamsToHost(float* host) const;
  void GetGradsToHost(float* host) const;
  void ZeroGrads();

  // Runs the forward for `batch` sequences (host tokens/targets, [batch, seq_len]). Keeps the
  // activations for Backward. `solve` picks fixed-step (training) or tolerance CG (evaluation).
  absl::StatusOr<ForwardStats> Forward(const int32_t* tokens, const int32_t* targets, int batch,
                                       const MesaSolve& solve);
  // Accumulates d(loss_scale * loss_sum)/d(params) into grads() for the last Forward.
  // Returns the mean CG steps of the backward solve.
  absl::StatusOr<double> Backward(float loss_scale);
  // Per-position losses of the last Forward ([batch, seq_len], 0 on BOS targets).
  void CopyLossesToHost(std::vector<float>* losses) const;

  // FLOPs of one training token (forward + backward), without and with the CG iterations, for MFU.
  double TrainFlopsPerToken(int cg_steps) const;

 private:
  struct LayerActs {
    float *res_in, *ln1, *ln1_rstd, *q_pre, *k_pre, *q_conv, *k_conv, *q, *k, *v, *a_pre, *b_pre,
        *beta, *log_gamma, *lambda, *q_star, *o, *o_normed, *o_rstd, *res_mid, *ln2, *ln2_rstd,
        *gate, *up, *h;
  };
  MesaNet(const ModelConfig& config, Backend* backend, int max_batch, int seq_len);
  absl::Status Plan();
  kernels::MesaInputs MesaInputsFor(const LayerActs& a, int batch) const;

  ModelConfig config_;
  ParamLayout layout_;
  Backend* backend_;
  int max_batch_, seq_len_;
  int batch_ = 0;  // of the last Forward
  MesaSolve solve_;
  float* params_ = nullptr;
  float* grads_ = nullptr;
  float* activations_ = nullptr;
  int64_t activation_floats_ = 0;
  int32_t* tokens_ = nullptr;
  int32_t* targets_ = nullptr;
  std::vector<LayerActs> acts_;
  float *res_final_ = nullptr, *lnf_ = nullptr, *lnf_rstd_ = nullptr, *logits_ = nullptr,
        *losses_ = nullptr;
  // Backward scratch, reused by every layer.
  float *d_res_, *d_ln_, *d_h_, *d_gate_, *d_up_, *d_onorm_, *d_o_, *d_q_, *d_k_, *d_v_,
      *d_conv_, *d_pre_, *d_log_gamma_, *d_beta_, *d_a_pre_, *d_b_pre_, *d_lambda_;
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_MODEL_MESANET_H_
