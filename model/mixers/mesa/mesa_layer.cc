#include "model/mixers/mesa/mesa_layer.h"

#include <cstdint>
#include <memory>

#include "absl/strings/str_cat.h"

namespace mesa::model {

void MesaLayer::Plan(BufferPlan& plan, int64_t bt) {
  features_.Plan(plan, bt);
  plan.floats.insert(plan.floats.end(),
                     {{&lambda_, config_.qk_dim()}, {&q_star_, bt * config_.qk_dim()}});
}

void MesaLayer::PlanScratch(BufferPlan& plan, int64_t bt) {
  features_.PlanScratch(plan, bt);
  plan.floats.push_back({&d_lambda_, config_.qk_dim()});
}

MesaActs MesaLayer::OperatorInputs(const MixerCall& call) const {
  MesaActs in{.dims = {call.batch, call.seq_len, config_.n_heads, config_.head_dim},
              .q = features_.q(),
              .k = features_.k(),
              .v = features_.v(),
              .log_gamma = features_.log_gamma(),
              .beta = features_.beta(),
              .lambda = lambda_,
              .token_cg_steps = call.token_cg_steps};
  // Context parallelism: H and G follow the convolution tails in the carries.
  const int64_t tails = features_.CarryElems(call.batch), n = StateElems(call.batch);
  if (call.carry_in != nullptr) {
    in.h0 = call.carry_in + tails;
    in.g0 = call.carry_in + tails + n;
  }
  if (call.carry_out != nullptr) {
    in.h_final = call.carry_out + tails;
    in.g_final = call.carry_out + tails + n;
  }
  if (call.d_carry_out != nullptr) {
    in.dh_final = call.d_carry_out + tails;
    in.dg_final = call.d_carry_out + tails + n;
  }
  return in;
}

void MesaLayer::ComputeLambda(const MixerCall& call) {
  const int64_t lambda_params = (*call.weights)[kLambdaParams];
  if (lambda_params >= 0) {
    call.backend->LambdaForward(call.params + lambda_params, lambda_, config_.qk_dim(),
                                config_.lambda_floor);
    return;
  }
  // No λ parameters (GLA readout only): the operator still takes a valid λ, floor + softplus(0).
  call.backend->Zero(lambda_, config_.qk_dim());
  call.backend->LambdaForward(lambda_, lambda_, config_.qk_dim(), config_.lambda_floor);
}

absl::StatusOr<double> MesaLayer::Forward(const MixerCall& call, Act ln, Act o,
                                          const MesaSolve& solve) {
  absl::StatusOr<MesaOps*> ops = ops_.For(*call.backend);
  if (!ops.ok()) return ops.status();
  if (absl::Status s = features_.Forward(call, ln); !s.ok()) return s;
  ComputeLambda(call);
  return (*ops)->Forward(OperatorInputs(call), LayerSolve(solve), o, q_star_);
}

namespace {

// H and G per sequence and head, their next values (the operator's finals may not overlap its
// initials), and the convolution tails.
struct MesaState final : MixerState {
  MesaState(Backend& backend, int rows, const ModelConfig& config)
      : rows(rows),
        state_elems(int64_t{config.n_heads} * config.head_dim * config.head_dim),
        h(backend, rows * state_elems),
        g(backend, rows * state_elems),
        h_next(backend, rows * state_elems),
        g_next(backend, rows * state_elems),
        tails(backend, rows, config.conv_width, config.qk_dim()) {}
  // h_next and g_next are scratch of a multi-token step (its finals, copied back to h and g).
  void CopyRows(const std::vector<int32_t>& from, int first_to) override {
    h.CopyRows(state_elems, from, first_to);
    g.CopyRows(state_elems, from, first_to);
    tails.CopyRows(from, first_to);
  }
  // h, g and the step's scratch h_next, g_next.
  int64_t RowBytes() const override { return 4 * 4 * state_elems + tails.RowBytes(); }
  const int rows;
  const int64_t state_elems;
  DeviceFloats h, g, h_next, g_next;
  ConvTails tails;
};

}  // namespace

absl::StatusOr<std::unique_ptr<MixerState>> MesaLayer::NewState(Backend& backend, int rows) {
  auto state = std::make_unique<MesaState>(backend, rows, config_);
  if (state->h.get() == nullptr || state->g.get() == nullptr || state->h_next.get() == nullptr ||
      state->g_next.get() == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("Mesa decoding state for ", rows, " sequences does not fit"));
  }
  return state;
}

absl::StatusOr<double> MesaLayer::ForwardFrom(const MixerCall& call, Act ln, Act o,
                                              const MesaSolve& solve, MixerState& state,
                                              int first_row) {
  absl::StatusOr<MesaOps*> ops = ops_.For(*call.backend);
  if (!ops.ok()) return ops.status();
  auto& s = static_cast<MesaState&>(state);
  if (absl::Status st = features_.Forward(call, ln, &s.tails, first_row); !st.ok()) return st;
  if (!call.params_as_before) ComputeLambda(call);
  const int64_t offset = first_row * s.state_elems, n = call.batch * s.state_elems;
  MesaActs in = OperatorInputs({.batch = call.batch, .seq_len = call.seq_len});
  in.h0 = s.h.get() + offset;
  in.g0 = s.g.get() + offset;
  // One token: the step carries the state in place; more: the chunkwise operator writes the
  // finals elsewhere and they are copied back.
  const bool in_place = call.seq_len == 1;
  in.h_final = in_place ? s.h.get() + offset : s.h_next.get() + offset;
  in.g_final = in_place ? s.g.get() + offset : s.g_next.get() + offset;
  in.cg_steps = call.head_cg_steps;
  const bool fuse_norm = in_place && call.head_norm.done != nullptr && (*ops)->FusesStepHeadNorm();
  if (fuse_norm) {
    in.o_normed = call.head_norm.out;
    in.norm_weight = call.head_norm.weight;
    in.norm_eps = call.head_norm.eps;
  }
  absl::StatusOr<double> steps = (*ops)->Forward(in, LayerSolve(solve), o, q_star_);
  if (fuse_norm && steps.ok()) *call.head_norm.done = true;
  if (!steps.ok() || in_place) return steps;
  call.backend->Copy(s.h.get() + offset, in.h_final, n);
  call.backend->Copy(s.g.get() + offset, in.g_final, n);
  return steps;
}

absl::StatusOr<double> MesaLayer::Backward(const MixerCall& call, Act ln, Act d_o, Act d_ln,
                                           const MesaSolve& solve) {
  const QkGrads& s = features_.grads();
  const int64_t tails = features_.CarryElems(call.batch);
  const MesaActGrads mg{.dq = s.d_q,
                        .dk = s.d_k,
                        .dv = s.d_v,
                        .dlog_gamma = s.d_log_gamma,
                        .dbeta = s.d_beta,
                        .dlambda = d_lambda_,
                        .dh0 = call.d_carry_in != nullptr ? call.d_carry_in + tails : nullptr,
                        .dg0 = call.d_carry_in != nullptr
                                   ? call.d_carry_in + tails + StateElems(call.batch)
                                   : nullptr};
  absl::StatusOr<MesaOps*> ops = ops_.For(*call.backend);
  if (!ops.ok()) return ops.status();
  absl::StatusOr<double> cg =
      (*ops)->Backward(OperatorInputs(call), q_star_, d_o, LayerSolve(solve), mg);
  if (!cg.ok()) return cg.status();
  // λ has no parameters where the layer has none (mamba2_mesa reads out with q* = q).
  if (const int64_t lambda_params = (*call.weights)[kLambdaParams]; lambda_params >= 0) {
    call.backend->LambdaBackward(call.params + lambda_params, d_lambda_, call.grads + lambda_params,
                                 config_.qk_dim());
  }
  if (absl::Status st = features_.Backward(call, ln, d_ln); !st.ok()) return st;
  return cg;
}

bool MesaLayer::CopySolveInputsToHost(Backend& backend, int batch, int seq_len,
                                      SolveInputs* out) const {
  const int64_t gates = int64_t{batch} * seq_len * config_.n_heads;
  out->batch = batch;
  out->seq_len = seq_len;
  out->heads = config_.n_heads;
  out->head_dim = config_.head_dim;
  out->k.resize(gates * config_.head_dim);
  out->log_gamma.resize(gates);
  out->beta.resize(gates);
  out->lambda.resize(int64_t{config_.n_heads} * config_.head_dim);
  backend.ActivationsToHost(out->k.data(), features_.k(), static_cast<int64_t>(out->k.size()));
  backend.CopyToHost(out->log_gamma.data(), features_.log_gamma(), sizeof(float) * gates);
  backend.CopyToHost(out->beta.data(), features_.beta(), sizeof(float) * gates);
  backend.CopyToHost(out->lambda.data(), lambda_, sizeof(float) * out->lambda.size());
  return true;
}

double MesaLayer::SolveFlopsPerToken(int cg_steps) const {
  if (gla_) return 0;
  // Per head, one CG iteration ~ 2 (2 C D + D^2) MACs per token with chunk C = 64
  // (docs/math.md §6.5), forward solve + backward solve.
  const double d = config_.head_dim;
  const double cg_iter = 2.0 * (2.0 * 64 * d + d * d) * config_.n_heads;
  return 2.0 * cg_steps * cg_iter;
}

namespace {

// Registered with the layer factory (mixer_layer.h); the library is alwayslink.
const bool kRegisteredMesa = RegisterMixerLayer(
    MixerKind::kMesa, [](const ModelConfig& config) -> std::unique_ptr<MixerLayer> {
      return std::make_unique<MesaLayer>(config, /*gla=*/false);
    });
const bool kRegisteredGla = RegisterMixerLayer(
    MixerKind::kGla, [](const ModelConfig& config) -> std::unique_ptr<MixerLayer> {
      return std::make_unique<MesaLayer>(config, /*gla=*/true);
    });
const bool kRegisteredMamba2Mesa = RegisterMixerLayer(
    MixerKind::kMamba2Mesa, [](const ModelConfig& config) -> std::unique_ptr<MixerLayer> {
      return std::make_unique<MesaLayer>(config, /*gla=*/true, /*input_gate=*/false);
    });

}  // namespace

}  // namespace mesa::model
