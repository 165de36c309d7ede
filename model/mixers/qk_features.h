// The part every mixer here shares (docs/math.md §2): from the block's normalised input, the
// projections q, k, v; a short causal convolution, SiLU and per-head L2 normalisation of q and k;
// the input gate β = sigmoid(b_proj(x)) and, where the mixer has one, the forget gate γ (with the
// γ cap). A mixer layer owns one, runs its Forward before its operator and its Backward after the
// operator's backward has filled the scratch gradients of q, k, v, β and log γ.
#ifndef MESANET_MODEL_MIXERS_QK_FEATURES_H_
#define MESANET_MODEL_MIXERS_QK_FEATURES_H_

#include <cstdint>

#include "absl/status/status.h"

#include "model/mixers/mixer_layer.h"
#include "model/mixers/qk_params.h"

namespace mesa::model {

// log γ at a document's first token (MixerCall::doc_start): γ = exp(-30) ~ 1e-13 keeps nothing of
// the earlier state that float32 could tell from zero, and, being finite, no chunked kernel forms
// inf - inf (their exponents are differences of cumulative log-gates, docs/math.md §9.5, §8.6).
inline constexpr float kResetLogGamma = -30.0f;

// Decoding state of the two short convolutions: per sequence, the last conv_width - 1 inputs of
// the q and k convolutions, float32 (zero before the first token, as the causal padding is).
class ConvTails {
 public:
  ConvTails(Backend& backend, int rows, int64_t width, int64_t channels);
  bool ok() const { return tails_[0].get() != nullptr && tails_[1].get() != nullptr; }

  // q_out, k_out rows of `batch` sequences of `t` tokens = the causal convolutions of q_in, k_in
  // continued from the q and k tails of rows [first_row, first_row + batch), whose tails then
  // hold the last inputs. One backend call (Backend::CausalConvAppendPair), no allocation.
  absl::Status Convolve(Act q_in, const float* q_weight, Act q_out, Act k_in, const float* k_weight,
                        Act k_out, int batch, int64_t t, int first_row);
  // Rows first_to + j of the tails become rows from[j] (MixerState::CopyRows).
  void CopyRows(const std::vector<int32_t>& from, int first_to) {
    for (DeviceFloats& tail : tails_) tail.CopyRows((width_ - 1) * channels_, from, first_to);
  }
  int64_t RowBytes() const { return 2 * 4 * (width_ - 1) * channels_; }

 private:
  Backend& backend_;
  const int rows_;
  const int64_t width_, channels_;
  DeviceFloats tails_[2];
};

// Backward scratch of the features: the gradients the operator's backward fills (d_q, d_k, d_v,
// d_beta, d_log_gamma: [B*T, H*D] or [B*T, H]) and the features' own work space.
struct QkGrads {
  Act d_q, d_k, d_v, d_conv, d_pre, d_a_pre, d_b_pre;
  float *d_log_gamma = nullptr, *d_beta = nullptr;
};

class QkFeatures {
 public:
  // `forget_gate` false (DeltaNet): no γ projection; a_pre stays zero so the shared gate kernels
  // compute β alone, and no gradient flows back through γ. With call.doc_start, log γ is 0 there
  // but kResetLogGamma at documents' first tokens (the operator then runs its gated path).
  // `input_gate` false (mamba2_mesa, the MesaNet paper's "Mamba2"): no b_proj, β ≡ 1.
  // `normalise` false (mlstm): q and k are the convolutions' outputs (no SiLU, no L2 norm), and
  // the operator reads the gates' biased pre-activations (a_pre(), b_pre()) itself: its backward
  // writes grads().d_a_pre and d_b_pre, which Backward then takes as they are.
  QkFeatures(const ModelConfig& config, bool forget_gate, bool input_gate = true,
             bool normalise = true)
      : config_(config),
        forget_gate_(forget_gate),
        input_gate_(input_gate),
        normalise_(normalise) {}

  void Plan(BufferPlan& plan, int64_t bt);
  // The QkGrads, for MixerLayer::PlanScratch.
  void PlanScratch(BufferPlan& plan, int64_t bt);
  // With `tails`, the convolutions continue from (and advance) rows [first_row, first_row +
  // call.batch) of it (decoding); without, every sequence starts from zero inputs (training), or,
  // under context parallelism, from the first CarryElems() floats of call.carry_in (null: zero),
  // and the slice's last inputs go to those of call.carry_out (which it then needs).
  absl::Status Forward(const MixerCall& call, Act ln, ConvTails* tails = nullptr,
                       int first_row = 0);
  // From grads().d_q, d_k, d_v, d_beta, d_log_gamma: d_ln (overwritten) and the parameter
  // gradients of the projections, convolutions and gates (accumulated). Uses grads().d_conv,
  // d_pre, d_a_pre, d_b_pre as work space.
  // Under context parallelism also the convolutions' part of call.d_carry_in from that of
  // call.d_carry_out (MixerCall).
  absl::Status Backward(const MixerCall& call, Act ln, Act d_ln);
  const QkGrads& grads() const { return grads_; }
  // Floats of the convolution tails in a context-parallel carry: the q then the k convolution's
  // last conv_width - 1 inputs, float32 [batch, conv_width - 1, qk_dim] each.
  int64_t CarryElems(int batch) const {
    return 2 * int64_t{batch} * (config_.conv_width - 1) * config_.qk_dim();
  }

  // The operator's inputs from the last Forward (decoding: k and v may be views, see Forward).
  Act q() const { return q_out_ ? q_out_ : q_; }
  Act k() const { return k_out_ ? k_out_ : k_; }
  Act v() const { return v_out_ ? v_out_ : v_; }
  float* beta() const { return beta_; }
  // The gates' pre-activations with their biases, [B*T, H] (f̃ and ĩ for mlstm).
  Act a_pre() const { return a_pre_; }
  Act b_pre() const { return b_pre_; }
  float* log_gamma() const { return log_gamma_; }

 private:
  const ModelConfig config_;
  const bool forget_gate_, input_gate_, normalise_;
  // Kept from the forward for the backward.
  Act q_pre_, k_pre_, q_conv_, k_conv_, q_, k_, v_, a_pre_, b_pre_;
  Act qkv1_;                   // [3 * qk_dim]: q | k | v of one decoding token (one GEMM)
  Act q_out_, k_out_, v_out_;  // q_, k_, v_ or views into q_ and qkv1_ (decoding)
  int64_t planned_bt_ = 0;     // the rows every [bt, ...] buffer above holds

  float *beta_ = nullptr, *log_gamma_ = nullptr;
  QkGrads grads_;  // scratch
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_MIXERS_QK_FEATURES_H_
