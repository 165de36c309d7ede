#include "model/mixers/deltanet/deltanet_layer.h"

#include <cstdint>
#include <memory>

#include "absl/strings/str_cat.h"

namespace mesa::model {

void DeltaNetLayer::Plan(BufferPlan& plan, int64_t bt) { features_.Plan(plan, bt); }

void DeltaNetLayer::PlanScratch(BufferPlan& plan, int64_t bt) { features_.PlanScratch(plan, bt); }

DeltaActs DeltaNetLayer::OperatorInputs(const MixerCall& call) const {
  // Context parallelism: S follows the convolution tails in the carries.
  const int64_t tails = features_.CarryElems(call.batch);
  return {.dims = {call.batch, call.seq_len, config_.n_heads, config_.head_dim},
          .q = features_.q(),
          .k = features_.k(),
          .v = features_.v(),
          .beta = features_.beta(),
          // Ungated with document starts: the gated path, log γ = 0 but at resets (QkFeatures).
          .log_gamma = gated_ || call.doc_start != nullptr ? features_.log_gamma() : nullptr,
          .s0 = call.carry_in != nullptr ? call.carry_in + tails : nullptr,
          .s_final = call.carry_out != nullptr ? call.carry_out + tails : nullptr,
          .ds_final = call.d_carry_out != nullptr ? call.d_carry_out + tails : nullptr};
}

absl::StatusOr<double> DeltaNetLayer::Forward(const MixerCall& call, Act ln, Act o,
                                              const MesaSolve& /*solve*/) {
  absl::StatusOr<DeltaNetOps*> ops = ops_.For(*call.backend);
  if (!ops.ok()) return ops.status();
  if (absl::Status s = features_.Forward(call, ln); !s.ok()) return s;
  if (absl::Status s = (*ops)->Forward(OperatorInputs(call), o); !s.ok()) {
    return s;
  }
  return 0.0;  // no solve
}

namespace {

// S per sequence and head (carried in place) and the convolution tails.
struct DeltaState final : MixerState {
  DeltaState(Backend& backend, int rows, const ModelConfig& config)
      : state_elems(int64_t{config.n_heads} * config.head_dim * config.head_dim),
        s(backend, rows * state_elems),
        tails(backend, rows, config.conv_width, config.qk_dim()) {}
  void CopyRows(const std::vector<int32_t>& from, int first_to) override {
    s.CopyRows(state_elems, from, first_to);
    tails.CopyRows(from, first_to);
  }
  int64_t RowBytes() const override { return 4 * state_elems + tails.RowBytes(); }
  const int64_t state_elems;
  DeviceFloats s;
  ConvTails tails;
};

}  // namespace

absl::StatusOr<std::unique_ptr<MixerState>> DeltaNetLayer::NewState(Backend& backend, int rows) {
  auto state = std::make_unique<DeltaState>(backend, rows, config_);
  if (state->s.get() == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("DeltaNet decoding state for ", rows, " sequences does not fit"));
  }
  return state;
}

absl::StatusOr<double> DeltaNetLayer::ForwardFrom(const MixerCall& call, Act ln, Act o,
                                                  const MesaSolve& /*solve*/, MixerState& state,
                                                  int first_row) {
  absl::StatusOr<DeltaNetOps*> ops = ops_.For(*call.backend);
  if (!ops.ok()) return ops.status();
  auto& s = static_cast<DeltaState&>(state);
  if (absl::Status st = features_.Forward(call, ln, &s.tails, first_row); !st.ok()) return st;
  DeltaActs in = OperatorInputs({.batch = call.batch, .seq_len = call.seq_len});
  in.s0 = s.s.get() + first_row * s.state_elems;
  in.s_final = s.s.get() + first_row * s.state_elems;
  if (absl::Status st = (*ops)->Forward(in, o); !st.ok()) return st;
  return 0.0;  // no solve
}

absl::StatusOr<double> DeltaNetLayer::Backward(const MixerCall& call, Act ln, Act d_o, Act d_ln,
                                               const MesaSolve& /*solve*/) {
  const QkGrads& s = features_.grads();
  const DeltaActGrads grads{
      .dq = s.d_q,
      .dk = s.d_k,
      .dv = s.d_v,
      .dbeta = s.d_beta,
      .dlog_gamma = gated_ || call.doc_start != nullptr ? s.d_log_gamma : nullptr,
      .ds0 = call.d_carry_in != nullptr ? call.d_carry_in + features_.CarryElems(call.batch)
                                        : nullptr};
  absl::StatusOr<DeltaNetOps*> ops = ops_.For(*call.backend);
  if (!ops.ok()) return ops.status();
  if (absl::Status st = (*ops)->Backward(OperatorInputs(call), d_o, grads); !st.ok()) return st;
  if (absl::Status st = features_.Backward(call, ln, d_ln); !st.ok()) return st;
  return 0.0;
}

double DeltaNetLayer::SolveFlopsPerToken(int /*cg_steps*/) const {
  // The chunkwise delta rule per head and token, chunk C = 64: the UT transform and the intra-
  // chunk products (~2 C D) and the state updates and readouts (~3 D^2), twice each as
  // multiply-adds; the backward about twice the forward. An estimate for MFU, not a count.
  const double d = config_.head_dim;
  return 3.0 * 2.0 * (2.0 * 64 * d + 3.0 * d * d) * config_.n_heads;
}

namespace {

// Registered with the layer factory (mixer_layer.h); the library is alwayslink.
const bool kRegisteredDeltaNet = RegisterMixerLayer(
    MixerKind::kDeltaNet, [](const ModelConfig& config) -> std::unique_ptr<MixerLayer> {
      return std::make_unique<DeltaNetLayer>(config, /*gated=*/false);
    });
const bool kRegisteredGatedDeltaNet = RegisterMixerLayer(
    MixerKind::kGatedDeltaNet, [](const ModelConfig& config) -> std::unique_ptr<MixerLayer> {
      return std::make_unique<DeltaNetLayer>(config, /*gated=*/true);
    });

}  // namespace

}  // namespace mesa::model
