#include "model/mixers/hawk/hawk_layer.h"

#include <cstdint>
#include <memory>

#include "absl/strings/str_cat.h"
#include "model/mixers/hawk/hawk_params.h"

namespace mesa::model {

void HawkLayer::Plan(BufferPlan& plan, int64_t bt) {
  const int64_t r = config_.rnn_width;
  plan.acts.insert(plan.acts.end(), {{&x_pre_, bt * r},
                                     {&y_pre_, bt * r},
                                     {&u_, bt * r},
                                     {&rho_, bt * r},
                                     {&iota_, bt * r},
                                     {&h_, bt * r},
                                     {&g_, bt * r}});
}

void HawkLayer::PlanScratch(BufferPlan& plan, int64_t bt) {
  const int64_t r = config_.rnn_width;
  plan.acts.insert(plan.acts.end(), {{&d_g_, bt * r},
                                     {&d_h_, bt * r},
                                     {&d_y_, bt * r},
                                     {&d_u_, bt * r},
                                     {&d_rho_, bt * r},
                                     {&d_iota_, bt * r},
                                     {&d_x_, bt * r}});
}

absl::Status HawkLayer::Branches(const MixerCall& call, Act ln, float* tail) {
  Backend& be = *call.backend;
  const float* p = call.params;
  const MixerWeights& w = *call.weights;
  const int64_t bt = int64_t{call.batch} * call.seq_len;
  const int64_t c = config_.d_model, r = config_.rnn_width, blocks = config_.n_heads,
                block = r / blocks;
  be.LinearForward(ln, p + w[kHawkXWeight], x_pre_, bt, c, r, false);
  be.BiasForward(x_pre_, p + w[kHawkXBias], bt, r);
  be.LinearForward(ln, p + w[kHawkYWeight], y_pre_, bt, c, r, false);
  be.BiasForward(y_pre_, p + w[kHawkYBias], bt, r);
  if (tail != nullptr) {
    be.CausalConvAppend(x_pre_, p + w[kHawkConvWeight], tail, u_, call.batch, call.seq_len, r,
                        config_.conv_width);
  } else {
    be.CausalConvForward(x_pre_, p + w[kHawkConvWeight], u_, call.batch, call.seq_len, r,
                         config_.conv_width, call.doc_start);
  }
  be.BiasForward(u_, p + w[kHawkConvBias], bt, r);
  // The gates read the convolution's output u, not the layer's input.
  be.BlockDiagonalLinearForward(u_, p + w[kHawkAGateWeight], rho_, bt, blocks, block, false);
  be.BiasForward(rho_, p + w[kHawkAGateBias], bt, r);
  be.BlockDiagonalLinearForward(u_, p + w[kHawkInputGateWeight], iota_, bt, blocks, block, false);
  be.BiasForward(iota_, p + w[kHawkInputGateBias], bt, r);
  return absl::OkStatus();
}

void HawkLayer::Output(const MixerCall& call, Act o) {
  Backend& be = *call.backend;
  const float* p = call.params;
  const MixerWeights& w = *call.weights;
  const int64_t bt = int64_t{call.batch} * call.seq_len;
  const int64_t c = config_.d_model, r = config_.rnn_width;
  be.GeluGateForward(y_pre_, h_, g_, bt * r);
  be.LinearForward(g_, p + w[kHawkOutWeight], o, bt, r, c, /*accumulate=*/true);
  be.BiasForward(o, p + w[kHawkOutBias], bt, c);
}

absl::StatusOr<double> HawkLayer::Forward(const MixerCall& call, Act ln, Act o,
                                          const MesaSolve& /*solve*/) {
  absl::StatusOr<RgLruOps*> ops = ops_.For(*call.backend);
  if (!ops.ok()) return ops.status();
  Backend& be = *call.backend;
  const int64_t r = config_.rnn_width, tails = int64_t{call.batch} * TailElems();
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
  if (absl::Status s = Branches(call, ln, tail); !s.ok()) return s;
  const float* state_in = call.carry_in != nullptr ? call.carry_in + tails : nullptr;
  RgLruActs in{.batch = call.batch,
               .seq_len = call.seq_len,
               .width = r,
               .u = u_,
               .rho = rho_,
               .iota = iota_,
               .p = call.params + (*call.weights)[kHawkDecay],
               .h0 = state_in,
               .h_final = context ? call.carry_out + tails : nullptr,
               .started = state_in != nullptr ? state_in + call.batch * r : nullptr,
               .started_out = context ? call.carry_out + tails + call.batch * r : nullptr,
               .doc_start = call.doc_start};
  if (absl::Status s = (*ops)->Forward(in, h_); !s.ok()) return s;
  Output(call, o);
  return 0.0;  // no solve
}

absl::StatusOr<double> HawkLayer::Backward(const MixerCall& call, Act ln, Act d_o, Act d_ln,
                                           const MesaSolve& /*solve*/) {
  absl::StatusOr<RgLruOps*> ops = ops_.For(*call.backend);
  if (!ops.ok()) return ops.status();
  Backend& be = *call.backend;
  const float* p = call.params;
  float* g = call.grads;
  const MixerWeights& w = *call.weights;
  const int64_t bt = int64_t{call.batch} * call.seq_len;
  const int64_t c = config_.d_model, r = config_.rnn_width, blocks = config_.n_heads,
                block = r / blocks, tails = int64_t{call.batch} * TailElems();
  // Output projection and the GeLU gate.
  be.BiasBackward(d_o, g + w[kHawkOutBias], bt, c);
  be.LinearBackward(g_, p + w[kHawkOutWeight], d_o, d_g_, g + w[kHawkOutWeight], bt, r, c,
                    /*accumulate_d_in=*/false);
  be.GeluGateBackward(y_pre_, h_, d_g_, d_y_, d_h_, bt * r);
  // The recurrence.
  const float* state_in = call.carry_in != nullptr ? call.carry_in + tails : nullptr;
  RgLruActs in{.batch = call.batch,
               .seq_len = call.seq_len,
               .width = r,
               .u = u_,
               .rho = rho_,
               .iota = iota_,
               .p = p + w[kHawkDecay],
               .h0 = state_in,
               .started = state_in != nullptr ? state_in + call.batch * r : nullptr,
               .doc_start = call.doc_start,
               .dh_final = call.d_carry_out != nullptr ? call.d_carry_out + tails : nullptr};
  const RgLruActGrads grads{.du = d_u_,
                            .drho = d_rho_,
                            .diota = d_iota_,
                            .dp = g + w[kHawkDecay],
                            .dh0 = call.d_carry_in != nullptr ? call.d_carry_in + tails : nullptr};
  if (absl::Status s = (*ops)->Backward(in, d_h_, grads); !s.ok()) return s;
  if (call.d_carry_in != nullptr) {  // the started flags are not differentiable
    be.Zero(call.d_carry_in + tails + call.batch * r, call.batch);
  }
  // The gates, into d_u (which holds the recurrence's direct part).
  be.BiasBackward(d_rho_, g + w[kHawkAGateBias], bt, r);
  be.BlockDiagonalLinearBackward(u_, p + w[kHawkAGateWeight], d_rho_, d_u_, g + w[kHawkAGateWeight],
                                 bt, blocks, block, true);
  be.BiasBackward(d_iota_, g + w[kHawkInputGateBias], bt, r);
  be.BlockDiagonalLinearBackward(u_, p + w[kHawkInputGateWeight], d_iota_, d_u_,
                                 g + w[kHawkInputGateWeight], bt, blocks, block, true);
  // The convolution.
  be.BiasBackward(d_u_, g + w[kHawkConvBias], bt, r);
  be.ZeroActivations(d_x_, bt * r);
  be.CausalConvBackward(x_pre_, p + w[kHawkConvWeight], d_u_, d_x_, g + w[kHawkConvWeight],
                        call.batch, call.seq_len, r, config_.conv_width, call.doc_start);
  if (call.carry_in != nullptr || call.d_carry_out != nullptr || call.d_carry_in != nullptr) {
    if (absl::Status s = be.CausalConvTailBackward(
            call.carry_in, call.d_carry_out, p + w[kHawkConvWeight], d_u_, d_x_, call.d_carry_in,
            g + w[kHawkConvWeight], call.batch, call.seq_len, r, config_.conv_width);
        !s.ok()) {
      return s;
    }
  }
  // The two input branches; the first product into d_ln overwrites it.
  be.BiasBackward(d_x_, g + w[kHawkXBias], bt, r);
  be.LinearBackward(ln, p + w[kHawkXWeight], d_x_, d_ln, g + w[kHawkXWeight], bt, c, r,
                    /*accumulate_d_in=*/false);
  be.BiasBackward(d_y_, g + w[kHawkYBias], bt, r);
  be.LinearBackward(ln, p + w[kHawkYWeight], d_y_, d_ln, g + w[kHawkYWeight], bt, c, r);
  return 0.0;
}

namespace {

// Per row: the convolution tail (the last W-1 inputs ũ), h and the started flag, float32.
struct HawkState final : MixerState {
  HawkState(Backend& backend, int rows, const ModelConfig& config)
      : tail_elems(int64_t{config.conv_width - 1} * config.rnn_width),
        width(config.rnn_width),
        tails(backend, std::max<int64_t>(1, rows * tail_elems)),
        h(backend, int64_t{rows} * config.rnn_width),
        started(backend, rows),
        rows(rows) {}
  void CopyRows(const std::vector<int32_t>& from, int first_to) override {
    tails.CopyRows(tail_elems, from, first_to);
    h.CopyRows(width, from, first_to);
    started.CopyRows(1, from, first_to);
  }
  int64_t RowBytes() const override { return 4 * (tail_elems + width + 1); }
  const int64_t tail_elems, width;
  DeviceFloats tails, h, started;
  const int rows;
};

}  // namespace

absl::StatusOr<std::unique_ptr<MixerState>> HawkLayer::NewState(Backend& backend, int rows) {
  auto state = std::make_unique<HawkState>(backend, rows, config_);
  if (state->tails.get() == nullptr || state->h.get() == nullptr ||
      state->started.get() == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("Hawk decoding state for ", rows, " sequences does not fit"));
  }
  return state;
}

absl::StatusOr<double> HawkLayer::ForwardFrom(const MixerCall& call, Act ln, Act o,
                                              const MesaSolve& /*solve*/, MixerState& state,
                                              int first_row) {
  absl::StatusOr<RgLruOps*> ops = ops_.For(*call.backend);
  if (!ops.ok()) return ops.status();
  auto& s = static_cast<HawkState&>(state);
  if (first_row < 0 || first_row + call.batch > s.rows) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rows [", first_row, ", ", first_row + call.batch, ") outside the state's ", s.rows));
  }
  MixerCall own = call;
  own.doc_start = nullptr;
  if (absl::Status st = Branches(own, ln, s.tails.get() + first_row * s.tail_elems); !st.ok()) {
    return st;
  }
  float* h = s.h.get() + first_row * s.width;
  float* started = s.started.get() + first_row;
  RgLruActs in{.batch = call.batch,
               .seq_len = call.seq_len,
               .width = s.width,
               .u = u_,
               .rho = rho_,
               .iota = iota_,
               .p = call.params + (*call.weights)[kHawkDecay],
               .h0 = h,
               .h_final = h,
               .started = started,
               .started_out = started};
  if (absl::Status st = (*ops)->Forward(in, h_); !st.ok()) return st;
  Output(own, o);
  return 0.0;
}

double HawkLayer::SolveFlopsPerToken(int /*cg_steps*/) const {
  // Every matrix of the layer (the branches, the block-diagonal gates, the output) is in the
  // parameter count the model's 6 FLOPs per parameter covers; beyond them only the scan's
  // elementwise gate arithmetic, about 30 FLOPs per channel forward and backward.
  return 30.0 * config_.rnn_width;
}

namespace {

// Registered with the layer factory (mixer_layer.h); the library is alwayslink.
const bool kRegisteredHawk = RegisterMixerLayer(
    MixerKind::kHawk, [](const ModelConfig& config) -> std::unique_ptr<MixerLayer> {
      return std::make_unique<HawkLayer>(config);
    });

}  // namespace

}  // namespace mesa::model
