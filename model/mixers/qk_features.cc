#include "model/mixers/qk_features.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"

namespace mesa::model {

ConvTails::ConvTails(Backend& backend, int rows, int64_t width, int64_t channels)
    : backend_(backend),
      rows_(rows),
      width_(width),
      channels_(channels),
      tails_{DeviceFloats(backend, std::max<int64_t>(1, rows * (width - 1) * channels)),
             DeviceFloats(backend, std::max<int64_t>(1, rows * (width - 1) * channels))} {}

absl::Status ConvTails::Convolve(Act q_in, const float* q_weight, Act q_out, Act k_in,
                                 const float* k_weight, Act k_out, int batch, int64_t t,
                                 int first_row) {
  if (first_row < 0 || batch < 0 || first_row + batch > rows_) {
    return absl::InvalidArgumentError(absl::StrCat("rows [", first_row, ", ", first_row + batch,
                                                   ") outside the state's ", rows_));
  }
  if (!ok()) return absl::ResourceExhaustedError("convolution tails");
  const int64_t offset = first_row * (width_ - 1) * channels_;
  backend_.CausalConvAppendPair(q_in, q_weight, tails_[0].get() + offset, q_out, k_in, k_weight,
                                tails_[1].get() + offset, k_out, batch, t, channels_, width_);
  return absl::OkStatus();
}

void QkFeatures::Plan(BufferPlan& plan, int64_t bt) {
  const int64_t hd = config_.qk_dim(), h = config_.n_heads;
  planned_bt_ = bt;
  plan.acts.insert(plan.acts.end(), {{&q_pre_, bt * hd},
                                     {&k_pre_, bt * hd},
                                     {&q_conv_, bt * hd},
                                     {&k_conv_, bt * hd},
                                     {&q_, bt * hd},
                                     {&k_, bt * hd},
                                     {&v_, bt * hd},
                                     {&qkv1_, 3 * hd},
                                     {&a_pre_, bt * h},
                                     {&b_pre_, bt * h}});
  plan.floats.insert(plan.floats.end(), {{&beta_, bt * h}, {&log_gamma_, bt * h}});
}

void QkFeatures::PlanScratch(BufferPlan& plan, int64_t bt) {
  const int64_t hd = config_.qk_dim(), h = config_.n_heads;
  QkGrads& s = grads_;
  plan.acts.insert(plan.acts.end(), {{&s.d_q, bt * hd},
                                     {&s.d_k, bt * hd},
                                     {&s.d_v, bt * hd},
                                     {&s.d_conv, bt * hd},
                                     {&s.d_pre, bt * hd},
                                     {&s.d_a_pre, bt * h},
                                     {&s.d_b_pre, bt * h}});
  plan.floats.insert(plan.floats.end(), {{&s.d_log_gamma, bt * h}, {&s.d_beta, bt * h}});
}

absl::Status QkFeatures::Forward(const MixerCall& call, Act ln, ConvTails* tails, int first_row) {
  Backend& be = *call.backend;
  const float* p = call.params;
  const MixerWeights& w = *call.weights;
  const int64_t bt = int64_t{call.batch} * call.seq_len;
  const int64_t c = config_.d_model, hd = config_.qk_dim(), h = config_.n_heads,
                d = config_.head_dim;
  q_out_ = q_;
  k_out_ = k_;
  v_out_ = v_;
  Act q_pre = q_pre_, k_pre = k_pre_;
  if (tails != nullptr && bt == 1 && w[kKProj] == w[kQProj] + hd * c &&
      w[kVProj] == w[kKProj] + hd * c) {
    // One decoding token: the three projections (adjacent in the parameters) as one GEMM whose
    // output row is q | k | v; at M = 1 a GEMM costs about its launch.
    be.LinearForward(ln, p + w[kQProj], qkv1_, 1, c, 3 * hd, false);
    q_pre = qkv1_;
    k_pre = be.ActAt(qkv1_, hd);
    v_out_ = be.ActAt(qkv1_, 2 * hd);
  } else {
    be.LinearForward(ln, p + w[kQProj], q_pre_, bt, c, hd, false);
    be.LinearForward(ln, p + w[kKProj], k_pre_, bt, c, hd, false);
    be.LinearForward(ln, p + w[kVProj], v_, bt, c, hd, false);
  }
  if (tails == nullptr && (call.carry_in != nullptr || call.carry_out != nullptr)) {
    if (call.carry_out == nullptr) {
      return absl::InvalidArgumentError("a context-parallel slice needs a carry_out buffer");
    }
    // The slice continues from the carried tails: they go to carry_out, which the convolution
    // advances past the slice.
    const int64_t n = CarryElems(call.batch);
    if (call.carry_in != nullptr) {
      be.Copy(call.carry_out, call.carry_in, n);
    } else {
      be.Zero(call.carry_out, n);
    }
    for (auto [which, pre, conv, weight] :
         {std::tuple{0, q_pre_, q_conv_, w[kQConv]}, std::tuple{1, k_pre_, k_conv_, w[kKConv]}}) {
      be.CausalConvAppend(pre, p + weight, call.carry_out + which * n / 2, conv, call.batch,
                          call.seq_len, hd, config_.conv_width);
    }
  } else if (tails == nullptr) {
    be.CausalConvForward(q_pre_, p + w[kQConv], q_conv_, call.batch, call.seq_len, hd,
                         config_.conv_width, call.doc_start);
    be.CausalConvForward(k_pre_, p + w[kKConv], k_conv_, call.batch, call.seq_len, hd,
                         config_.conv_width, call.doc_start);
  }
  // Decoding (no backward follows) with room for both in q_conv_ and q_ (each planned_bt_ rows):
  // the two convolutions into adjacent halves and one feature map over both.
  const bool joint = tails != nullptr && 2 * bt <= planned_bt_;
  const Act k_conv = joint ? be.ActAt(q_conv_, bt * hd) : k_conv_;
  if (tails != nullptr) {
    if (absl::Status s = tails->Convolve(q_pre, p + w[kQConv], q_conv_, k_pre, p + w[kKConv],
                                         k_conv, call.batch, call.seq_len, first_row);
        !s.ok()) {
      return s;
    }
  }
  if (!normalise_) {  // mlstm: q and k are the convolutions' outputs
    q_out_ = q_conv_;
    k_out_ = k_conv;
  } else if (joint) {
    be.SiluL2NormForward(q_conv_, q_, 2 * bt * h, d);
    k_out_ = be.ActAt(q_, bt * hd);
  } else {
    be.SiluL2NormForward(q_conv_, q_, bt * h, d);
    be.SiluL2NormForward(k_conv_, k_, bt * h, d);
  }
  be.GateProjectionsForward(
      ln, forget_gate_ ? p + w[kAWeight] : nullptr, forget_gate_ ? p + w[kABias] : nullptr,
      input_gate_ ? p + w[kBWeight] : nullptr, input_gate_ ? p + w[kBBias] : nullptr, a_pre_,
      input_gate_ ? b_pre_ : Act{}, beta_, log_gamma_, bt, c, h, config_.gamma_cap);
  if (call.doc_start != nullptr) {
    if (tails != nullptr || call.carry_in != nullptr || call.carry_out != nullptr) {
      return absl::InvalidArgumentError(
          "document starts apply to whole sequences only (not decoding or context parallelism)");
    }
    // A reset is γ = 0 at the document's first token (docs/math.md §8.6).
    if (!forget_gate_) be.Zero(log_gamma_, bt * h);
    be.FillAtDocumentStarts(log_gamma_, call.doc_start, call.batch, call.seq_len, h,
                            kResetLogGamma);
  }
  return absl::OkStatus();
}

absl::Status QkFeatures::Backward(const MixerCall& call, Act ln, Act d_ln) {
  const QkGrads& s = grads_;
  Backend& be = *call.backend;
  const float* p = call.params;
  float* g = call.grads;
  const MixerWeights& w = *call.weights;
  const int64_t bt = int64_t{call.batch} * call.seq_len;
  const int64_t c = config_.d_model, hd = config_.qk_dim(), h = config_.n_heads,
                d = config_.head_dim;
  // Without a forget gate γ is not an input of the operator: nothing flows back through it.
  if (!forget_gate_) be.Zero(s.d_log_gamma, bt * h);
  // Nor through a reset's constant log γ.
  if (call.doc_start != nullptr) {
    be.FillAtDocumentStarts(s.d_log_gamma, call.doc_start, call.batch, call.seq_len, h, 0.f);
  }
  // Without normalisation (mlstm) the operator wrote d_a_pre and d_b_pre itself.
  if (normalise_) {
    be.GatesBackward(a_pre_, input_gate_ ? b_pre_ : Act{}, s.d_beta, s.d_log_gamma, s.d_a_pre,
                     input_gate_ ? s.d_b_pre : Act{}, bt * h, config_.gamma_cap);
  }
  // The first product into d_ln overwrites it; the later ones accumulate.
  if (forget_gate_) {
    be.LinearBackward(ln, p + w[kAWeight], s.d_a_pre, d_ln, g + w[kAWeight], bt, c, h,
                      /*accumulate_d_in=*/false);
    be.BiasBackward(s.d_a_pre, g + w[kABias], bt, h);
  }
  if (input_gate_) {
    be.LinearBackward(ln, p + w[kBWeight], s.d_b_pre, d_ln, g + w[kBWeight], bt, c, h,
                      /*accumulate_d_in=*/forget_gate_);
    be.BiasBackward(s.d_b_pre, g + w[kBBias], bt, h);
  }
  struct QkPath {
    Act pre, conv, d_normed;
    int64_t conv_w, proj;
  };
  const bool context =
      call.carry_in != nullptr || call.d_carry_out != nullptr || call.d_carry_in != nullptr;
  const int64_t tail_elems = CarryElems(call.batch) / 2;
  int which = 0;
  for (const QkPath& path : {QkPath{q_pre_, q_conv_, s.d_q, w[kQConv], w[kQProj]},
                             QkPath{k_pre_, k_conv_, s.d_k, w[kKConv], w[kKProj]}}) {
    Act d_conv = path.d_normed;  // without normalisation the conv's output is q (k) itself
    if (normalise_) {
      be.ZeroActivations(s.d_conv, bt * hd);
      be.SiluL2NormBackward(path.conv, path.d_normed, s.d_conv, bt * h, d);
      d_conv = s.d_conv;
    }
    be.ZeroActivations(s.d_pre, bt * hd);
    be.CausalConvBackward(path.pre, p + path.conv_w, d_conv, s.d_pre, g + path.conv_w, call.batch,
                          call.seq_len, hd, config_.conv_width, call.doc_start);
    if (context) {
      const int64_t off = which * tail_elems;
      if (absl::Status st = be.CausalConvTailBackward(
              call.carry_in != nullptr ? call.carry_in + off : nullptr,
              call.d_carry_out != nullptr ? call.d_carry_out + off : nullptr, p + path.conv_w,
              d_conv, s.d_pre, call.d_carry_in != nullptr ? call.d_carry_in + off : nullptr,
              g + path.conv_w, call.batch, call.seq_len, hd, config_.conv_width);
          !st.ok()) {
        return st;
      }
    }
    be.LinearBackward(ln, p + path.proj, s.d_pre, d_ln, g + path.proj, bt, c, hd);
    ++which;
  }
  be.LinearBackward(ln, p + w[kVProj], s.d_v, d_ln, g + w[kVProj], bt, c, hd);
  return absl::OkStatus();
}

}  // namespace mesa::model
