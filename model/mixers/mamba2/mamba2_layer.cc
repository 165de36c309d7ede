#include "model/mixers/mamba2/mamba2_layer.h"

#include <algorithm>
#include <cstdint>
#include <memory>

#include "absl/strings/str_cat.h"
#include "model/mixers/mamba2/mamba2_params.h"

namespace mesa::model {

void Mamba2Layer::Plan(BufferPlan& plan, int64_t bt) {
  const int64_t inner = config_.ssm_inner, k = config_.ssm_conv_channels(), h = config_.ssm_heads();
  plan.acts.insert(plan.acts.end(), {{&z_, bt * inner},
                                     {&xbc_pre_, bt * k},
                                     {&xbc_conv_, bt * k},
                                     {&xbc_, bt * k},
                                     {&dt_pre_, bt * h},
                                     {&y_, bt * inner},
                                     {&g_, bt * inner},
                                     {&normed_, bt * inner}});
  plan.floats.push_back({&rstd_, bt});
}

void Mamba2Layer::PlanScratch(BufferPlan& plan, int64_t bt) {
  const int64_t inner = config_.ssm_inner, k = config_.ssm_conv_channels(), h = config_.ssm_heads();
  plan.acts.insert(plan.acts.end(), {{&d_normed_, bt * inner},
                                     {&d_g_, bt * inner},
                                     {&d_z_, bt * inner},
                                     {&d_y_, bt * inner},
                                     {&d_xbc_, bt * k},
                                     {&d_conv_, bt * k},
                                     {&d_xbc_pre_, bt * k},
                                     {&d_dt_, bt * h}});
}

void Mamba2Layer::Inputs(const MixerCall& call, Act ln, float* tail) {
  Backend& be = *call.backend;
  const float* p = call.params;
  const MixerWeights& w = *call.weights;
  const int64_t bt = int64_t{call.batch} * call.seq_len;
  const int64_t c = config_.d_model, inner = config_.ssm_inner, k = config_.ssm_conv_channels(),
                h = config_.ssm_heads();
  // The in-projection's row blocks [z | x B C | dt], one GEMM each.
  const float* in_proj = p + w[kSsmInProj];
  be.LinearForward(ln, in_proj, z_, bt, c, inner, false);
  be.LinearForward(ln, in_proj + inner * c, xbc_pre_, bt, c, k, false);
  be.LinearForward(ln, in_proj + (inner + k) * c, dt_pre_, bt, c, h, false);
  if (tail != nullptr) {
    be.CausalConvAppend(xbc_pre_, p + w[kSsmConvWeight], tail, xbc_conv_, call.batch, call.seq_len,
                        k, config_.conv_width);
  } else {
    be.CausalConvForward(xbc_pre_, p + w[kSsmConvWeight], xbc_conv_, call.batch, call.seq_len, k,
                         config_.conv_width, call.doc_start);
  }
  be.BiasForward(xbc_conv_, p + w[kSsmConvBias], bt, k);
  be.SiluForward(xbc_conv_, xbc_, bt * k);
}

SsdActs Mamba2Layer::OperatorInputs(const MixerCall& call) const {
  const int64_t tails = int64_t{call.batch} * TailElems();
  const float* p = call.params;
  const MixerWeights& w = *call.weights;
  return {.batch = call.batch,
          .seq_len = call.seq_len,
          .heads = config_.ssm_heads(),
          .head_dim = config_.ssm_head_dim,
          .state = config_.ssm_state,
          .xbc = xbc_,
          .dt_pre = dt_pre_,
          .a_log = p + w[kSsmALog],
          .dt_bias = p + w[kSsmDtBias],
          .d = p + w[kSsmSkip],
          .doc_start = call.doc_start,
          .s0 = call.carry_in != nullptr ? call.carry_in + tails : nullptr,
          .s_final = call.carry_out != nullptr ? call.carry_out + tails : nullptr,
          .ds_final = call.d_carry_out != nullptr ? call.d_carry_out + tails : nullptr};
}

void Mamba2Layer::Output(const MixerCall& call, Act o) {
  Backend& be = *call.backend;
  const float* p = call.params;
  const MixerWeights& w = *call.weights;
  const int64_t bt = int64_t{call.batch} * call.seq_len;
  const int64_t c = config_.d_model, inner = config_.ssm_inner;
  be.SwiGluForward(z_, y_, g_, bt * inner);  // y ⊙ SiLU(z): the gate before the norm
  be.RmsNormForward(g_, p + w[kSsmNormWeight], normed_, rstd_, bt, inner, kSsmNormEps);
  be.LinearForward(normed_, p + w[kSsmOutProj], o, bt, inner, c, /*accumulate=*/true);
}

absl::StatusOr<double> Mamba2Layer::Forward(const MixerCall& call, Act ln, Act o,
                                            const MesaSolve& /*solve*/) {
  absl::StatusOr<SsdOps*> ops = ops_.For(*call.backend);
  if (!ops.ok()) return ops.status();
  Backend& be = *call.backend;
  const int64_t tails = int64_t{call.batch} * TailElems();
  const bool context = call.carry_in != nullptr || call.carry_out != nullptr;
  if (context && call.doc_start != nullptr) {
    return absl::InvalidArgumentError(
        "document starts apply to whole sequences only (not context parallelism)");
  }
  if (context && call.carry_out == nullptr) {
    return absl::InvalidArgumentError("a context-parallel slice needs a carry_out buffer");
  }
  float* tail = nullptr;
  if (context) {
    // The convolution continues from the carried tail, which it advances in carry_out.
    if (call.carry_in != nullptr) {
      be.Copy(call.carry_out, call.carry_in, tails);
    } else {
      be.Zero(call.carry_out, tails);
    }
    tail = call.carry_out;
  }
  Inputs(call, ln, tail);
  if (absl::Status s = (*ops)->Forward(OperatorInputs(call), y_); !s.ok()) return s;
  Output(call, o);
  return 0.0;  // no solve
}

absl::StatusOr<double> Mamba2Layer::Backward(const MixerCall& call, Act ln, Act d_o, Act d_ln,
                                             const MesaSolve& /*solve*/) {
  absl::StatusOr<SsdOps*> ops = ops_.For(*call.backend);
  if (!ops.ok()) return ops.status();
  Backend& be = *call.backend;
  const float* p = call.params;
  float* g = call.grads;
  const MixerWeights& w = *call.weights;
  const int64_t bt = int64_t{call.batch} * call.seq_len;
  const int64_t c = config_.d_model, inner = config_.ssm_inner, k = config_.ssm_conv_channels(),
                h = config_.ssm_heads(), tails = int64_t{call.batch} * TailElems();
  // Output projection, gated norm, gate.
  be.LinearBackward(normed_, p + w[kSsmOutProj], d_o, d_normed_, g + w[kSsmOutProj], bt, inner, c,
                    /*accumulate_d_in=*/false);
  be.ZeroActivations(d_g_, bt * inner);
  be.RmsNormBackward(g_, p + w[kSsmNormWeight], rstd_, d_normed_, d_g_, g + w[kSsmNormWeight], bt,
                     inner);
  be.SwiGluBackward(z_, y_, d_g_, d_z_, d_y_, bt * inner);
  // The scan.
  const SsdActGrads grads{.d_xbc = d_xbc_,
                          .d_dt_pre = d_dt_,
                          .d_a_log = g + w[kSsmALog],
                          .d_dt_bias = g + w[kSsmDtBias],
                          .d_d = g + w[kSsmSkip],
                          .ds0 = call.d_carry_in != nullptr ? call.d_carry_in + tails : nullptr};
  if (absl::Status s = (*ops)->Backward(OperatorInputs(call), d_y_, grads); !s.ok()) return s;
  // SiLU, bias and the convolution.
  be.SiluBackward(xbc_conv_, d_xbc_, d_conv_, bt * k);
  be.BiasBackward(d_conv_, g + w[kSsmConvBias], bt, k);
  be.ZeroActivations(d_xbc_pre_, bt * k);
  be.CausalConvBackward(xbc_pre_, p + w[kSsmConvWeight], d_conv_, d_xbc_pre_, g + w[kSsmConvWeight],
                        call.batch, call.seq_len, k, config_.conv_width, call.doc_start);
  if (call.carry_in != nullptr || call.d_carry_out != nullptr || call.d_carry_in != nullptr) {
    if (absl::Status s =
            be.CausalConvTailBackward(call.carry_in, call.d_carry_out, p + w[kSsmConvWeight],
                                      d_conv_, d_xbc_pre_, call.d_carry_in, g + w[kSsmConvWeight],
                                      call.batch, call.seq_len, k, config_.conv_width);
        !s.ok()) {
      return s;
    }
  }
  // The in-projection's three row blocks; the first product into d_ln overwrites it.
  const float* in_proj = p + w[kSsmInProj];
  float* d_in_proj = g + w[kSsmInProj];
  be.LinearBackward(ln, in_proj, d_z_, d_ln, d_in_proj, bt, c, inner, /*accumulate_d_in=*/false);
  be.LinearBackward(ln, in_proj + inner * c, d_xbc_pre_, d_ln, d_in_proj + inner * c, bt, c, k);
  be.LinearBackward(ln, in_proj + (inner + k) * c, d_dt_, d_ln, d_in_proj + (inner + k) * c, bt, c,
                    h);
  return 0.0;
}

namespace {

// Per row: the convolution tail (the last W-1 pre-convolution rows) and S, float32.
struct Mamba2State final : MixerState {
  Mamba2State(Backend& backend, int rows, int64_t tail_elems, int64_t state_elems)
      : tail_elems(tail_elems),
        state_elems(state_elems),
        tails(backend, std::max<int64_t>(1, rows * tail_elems)),
        s(backend, rows * state_elems),
        rows(rows) {}
  void CopyRows(const std::vector<int32_t>& from, int first_to) override {
    tails.CopyRows(tail_elems, from, first_to);
    s.CopyRows(state_elems, from, first_to);
  }
  int64_t RowBytes() const override { return 4 * (tail_elems + state_elems); }
  const int64_t tail_elems, state_elems;
  DeviceFloats tails, s;
  const int rows;
};

}  // namespace

absl::StatusOr<std::unique_ptr<MixerState>> Mamba2Layer::NewState(Backend& backend, int rows) {
  auto state = std::make_unique<Mamba2State>(backend, rows, TailElems(), StateElems());
  if (state->tails.get() == nullptr || state->s.get() == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("Mamba-2 decoding state for ", rows, " sequences does not fit"));
  }
  return state;
}

absl::StatusOr<double> Mamba2Layer::ForwardFrom(const MixerCall& call, Act ln, Act o,
                                                const MesaSolve& /*solve*/, MixerState& state,
                                                int first_row) {
  absl::StatusOr<SsdOps*> ops = ops_.For(*call.backend);
  if (!ops.ok()) return ops.status();
  auto& s = static_cast<Mamba2State&>(state);
  if (first_row < 0 || first_row + call.batch > s.rows) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rows [", first_row, ", ", first_row + call.batch, ") outside the state's ", s.rows));
  }
  MixerCall own = call;
  own.doc_start = nullptr;
  own.carry_in = nullptr;
  own.carry_out = nullptr;
  own.d_carry_out = nullptr;
  Inputs(own, ln, s.tails.get() + first_row * s.tail_elems);
  SsdActs in = OperatorInputs(own);
  in.s0 = in.s_final = s.s.get() + first_row * s.state_elems;
  if (absl::Status st = (*ops)->Forward(in, y_); !st.ok()) return st;
  Output(own, o);
  return 0.0;
}

double Mamba2Layer::SolveFlopsPerToken(int /*cg_steps*/) const {
  // The projections are in the parameter count the model's 6 FLOPs per parameter covers; the
  // scan per head and token updates and reads P x N (4 P N FLOPs forward), the backward about
  // twice that.
  return 12.0 * config_.ssm_inner * config_.ssm_state;
}

namespace {

// Registered with the layer factory (mixer_layer.h); the library is alwayslink.
const bool kRegisteredMamba2 = RegisterMixerLayer(
    MixerKind::kMamba2, [](const ModelConfig& config) -> std::unique_ptr<MixerLayer> {
      return std::make_unique<Mamba2Layer>(config);
    });

}  // namespace

}  // namespace mesa::model
