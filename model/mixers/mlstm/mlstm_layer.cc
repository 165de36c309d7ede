#include "model/mixers/mlstm/mlstm_layer.h"

#include <memory>

#include "absl/strings/str_cat.h"

namespace mesa::model {

MlstmActs MlstmLayer::OperatorInputs(const MixerCall& call) const {
  // Context parallelism: C', n', m follow the convolution tails in the carries.
  const int64_t tails = features_.CarryElems(call.batch), d = config_.head_dim,
                cs = int64_t{call.batch} * config_.n_heads * d * d,
                ns = int64_t{call.batch} * config_.n_heads * d;
  auto at = [&](auto* base, int64_t offset) { return base != nullptr ? base + offset : nullptr; };
  return {.batch = call.batch,
          .seq_len = call.seq_len,
          .heads = config_.n_heads,
          .head_dim = config_.head_dim,
          .q = features_.q(),
          .k = features_.k(),
          .v = features_.v(),
          .i_pre = features_.b_pre(),
          .f_pre = features_.a_pre(),
          .doc_start = call.doc_start,
          .c0 = at(call.carry_in, tails),
          .n0 = at(call.carry_in, tails + cs),
          .m0 = at(call.carry_in, tails + cs + ns),
          .c_final = at(call.carry_out, tails),
          .n_final = at(call.carry_out, tails + cs),
          .m_final = at(call.carry_out, tails + cs + ns),
          .dc_final = at(call.d_carry_out, tails),
          .dn_final = at(call.d_carry_out, tails + cs)};
}

absl::StatusOr<double> MlstmLayer::Forward(const MixerCall& call, Act ln, Act o,
                                           const MesaSolve& /*solve*/) {
  absl::StatusOr<MlstmOps*> ops = ops_.For(*call.backend);
  if (!ops.ok()) return ops.status();
  if (absl::Status s = features_.Forward(call, ln); !s.ok()) return s;
  if (absl::Status s = (*ops)->Forward(OperatorInputs(call), o); !s.ok()) return s;
  return 0.0;  // no solve
}

absl::StatusOr<double> MlstmLayer::Backward(const MixerCall& call, Act ln, Act d_o, Act d_ln,
                                            const MesaSolve& /*solve*/) {
  absl::StatusOr<MlstmOps*> ops = ops_.For(*call.backend);
  if (!ops.ok()) return ops.status();
  const QkGrads& s = features_.grads();
  const int64_t tails = features_.CarryElems(call.batch),
                cs = int64_t{call.batch} * config_.n_heads * config_.head_dim * config_.head_dim;
  const MlstmActGrads grads{
      .dq = s.d_q,
      .dk = s.d_k,
      .dv = s.d_v,
      .di_pre = s.d_b_pre,
      .df_pre = s.d_a_pre,
      .dc0 = call.d_carry_in != nullptr ? call.d_carry_in + tails : nullptr,
      .dn0 = call.d_carry_in != nullptr ? call.d_carry_in + tails + cs : nullptr};
  if (absl::Status st = (*ops)->Backward(OperatorInputs(call), d_o, grads); !st.ok()) return st;
  if (call.d_carry_in != nullptr) {  // m is a rescaling: not differentiated
    call.backend->Zero(call.d_carry_in + tails + cs + cs / config_.head_dim,
                       int64_t{call.batch} * config_.n_heads);
  }
  if (absl::Status st = features_.Backward(call, ln, d_ln); !st.ok()) return st;
  return 0.0;
}

namespace {

// Per row: C', n', m (separate arrays, row-major over rows) and the convolution tails.
struct MlstmState final : MixerState {
  MlstmState(Backend& backend, int rows, const ModelConfig& config)
      : c_elems(int64_t{config.n_heads} * config.head_dim * config.head_dim),
        n_elems(int64_t{config.n_heads} * config.head_dim),
        m_elems(config.n_heads),
        c(backend, rows * c_elems),
        n(backend, rows * n_elems),
        m(backend, rows * m_elems),
        tails(backend, rows, config.conv_width, config.qk_dim()),
        rows(rows) {}
  void CopyRows(const std::vector<int32_t>& from, int first_to) override {
    c.CopyRows(c_elems, from, first_to);
    n.CopyRows(n_elems, from, first_to);
    m.CopyRows(m_elems, from, first_to);
    tails.CopyRows(from, first_to);
  }
  int64_t RowBytes() const override { return 4 * (c_elems + n_elems + m_elems) + tails.RowBytes(); }
  const int64_t c_elems, n_elems, m_elems;
  DeviceFloats c, n, m;
  ConvTails tails;
  const int rows;
};

}  // namespace

absl::StatusOr<std::unique_ptr<MixerState>> MlstmLayer::NewState(Backend& backend, int rows) {
  auto state = std::make_unique<MlstmState>(backend, rows, config_);
  if (state->c.get() == nullptr || state->n.get() == nullptr || state->m.get() == nullptr ||
      !state->tails.ok()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("mLSTM decoding state for ", rows, " sequences does not fit"));
  }
  return state;
}

absl::StatusOr<double> MlstmLayer::ForwardFrom(const MixerCall& call, Act ln, Act o,
                                               const MesaSolve& /*solve*/, MixerState& state,
                                               int first_row) {
  absl::StatusOr<MlstmOps*> ops = ops_.For(*call.backend);
  if (!ops.ok()) return ops.status();
  auto& s = static_cast<MlstmState&>(state);
  if (first_row < 0 || first_row + call.batch > s.rows) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rows [", first_row, ", ", first_row + call.batch, ") outside the state's ", s.rows));
  }
  if (absl::Status st = features_.Forward(call, ln, &s.tails, first_row); !st.ok()) return st;
  MlstmActs in = OperatorInputs({.batch = call.batch, .seq_len = call.seq_len});
  in.c0 = in.c_final = s.c.get() + first_row * s.c_elems;
  in.n0 = in.n_final = s.n.get() + first_row * s.n_elems;
  in.m0 = in.m_final = s.m.get() + first_row * s.m_elems;
  if (absl::Status st = (*ops)->Forward(in, o); !st.ok()) return st;
  return 0.0;
}

double MlstmLayer::SolveFlopsPerToken(int /*cg_steps*/) const {
  // The recurrence per head and token: the state update and the readout (about 3 D^2
  // multiply-adds forward), the backward about twice that.
  const double d = config_.head_dim;
  return 3.0 * 2.0 * 3.0 * d * d * config_.n_heads;
}

namespace {

const bool kRegisteredMlstm = RegisterMixerLayer(
    MixerKind::kMlstm, [](const ModelConfig& config) -> std::unique_ptr<MixerLayer> {
      return std::make_unique<MlstmLayer>(config);
    });

}  // namespace

}  // namespace mesa::model
