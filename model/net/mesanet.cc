#include "model/net/mesanet.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace mesa::model {
namespace {

constexpr float kResidualNormEps = 1e-6f;
constexpr float kHeadNormEps = 1e-5f;

// The Mesa op refuses non-finite inputs; for the trainer that is a step to skip, not a failure.
bool IsNonFiniteInput(const absl::Status& status) {
  return status.code() == absl::StatusCode::kInvalidArgument &&
         absl::StrContains(status.message(), "non-finite");
}

}  // namespace

MesaNet::MesaNet(const ModelConfig& config, Backend* backend, int max_batch, int seq_len)
    : config_(config),
      layout_(config),
      backend_(backend),
      max_batch_(max_batch),
      seq_len_(seq_len) {}

MesaNet::~MesaNet() {
  backend_->Free(params_);
  backend_->Free(grads_);
  backend_->Free(activations_);
  backend_->Free(floats_);
  backend_->Free(tokens_);
  backend_->Free(targets_);
}

absl::StatusOr<std::unique_ptr<MesaNet>> MesaNet::Create(const ModelConfig& config,
                                                         Backend* backend, int max_batch,
                                                         int seq_len) {
  if (absl::Status s = ValidateModelConfig(config); !s.ok()) return s;
  if (max_batch < 1 || seq_len < 1) {
    return absl::InvalidArgumentError("micro-batch and sequence length must be positive");
  }
  std::unique_ptr<MesaNet> net(new MesaNet(config, backend, max_batch, seq_len));
  if (absl::Status s = net->Plan(); !s.ok()) return s;
  return net;
}

absl::Status MesaNet::Plan() {
  Backend& be = *backend_;
  const int64_t bt = int64_t{max_batch_} * seq_len_;
  const int64_t c = config_.d_model, hd = config_.qk_dim(), h = config_.n_heads,
                f = config_.mlp_hidden;
  std::vector<std::pair<Act*, int64_t>> act_plan;
  std::vector<std::pair<float**, int64_t>> float_plan;
  acts_.resize(config_.n_layers);
  for (LayerActs& a : acts_) {
    act_plan.insert(act_plan.end(), {{&a.res_in, bt * c},
                                     {&a.ln1, bt * c},
                                     {&a.q_pre, bt * hd},
                                     {&a.k_pre, bt * hd},
                                     {&a.q_conv, bt * hd},
                                     {&a.k_conv, bt * hd},
                                     {&a.q, bt * hd},
                                     {&a.k, bt * hd},
                                     {&a.v, bt * hd},
                                     {&a.a_pre, bt * h},
                                     {&a.b_pre, bt * h},
                                     {&a.o, bt * hd},
                                     {&a.o_normed, bt * hd},
                                     {&a.res_mid, bt * c},
                                     {&a.ln2, bt * c},
                                     {&a.gate, bt * f},
                                     {&a.up, bt * f},
                                     {&a.h, bt * f}});
    float_plan.insert(float_plan.end(), {{&a.ln1_rstd, bt},
                                         {&a.beta, bt * h},
                                         {&a.log_gamma, bt * h},
                                         {&a.lambda, hd},
                                         {&a.q_star, bt * hd},
                                         {&a.o_rstd, bt * h},
                                         {&a.ln2_rstd, bt}});
  }
  act_plan.insert(act_plan.end(), {{&res_final_, bt * c},
                                   {&lnf_, bt * c},
                                   {&logits_, bt * logits_ld()},
                                   {&d_res_, bt * c},
                                   {&d_ln_, bt * c},
                                   {&d_h_, bt * f},
                                   {&d_gate_, bt * f},
                                   {&d_up_, bt * f},
                                   {&d_onorm_, bt * hd},
                                   {&d_o_, bt * hd},
                                   {&d_q_, bt * hd},
                                   {&d_k_, bt * hd},
                                   {&d_v_, bt * hd},
                                   {&d_conv_, bt * hd},
                                   {&d_pre_, bt * hd},
                                   {&d_a_pre_, bt * h},
                                   {&d_b_pre_, bt * h}});
  float_plan.insert(float_plan.end(), {{&lnf_rstd_, bt},
                                       {&losses_, bt},
                                       {&d_log_gamma_, bt * h},
                                       {&d_beta_, bt * h},
                                       {&d_lambda_, hd}});
  // Every buffer starts 256-byte aligned for the GEMM and vector kernels: round each one up to
  // a whole number of 256-byte blocks of its pool's element size.
  constexpr int64_t kAlignBytes = 256;
  const int64_t act_align = kAlignBytes / be.activation_bytes();
  constexpr int64_t kFloatAlign = kAlignBytes / sizeof(float);
  activation_elements_ = 0;
  for (auto& [ptr, n] : act_plan) {
    n = (n + act_align - 1) / act_align * act_align;
    activation_elements_ += n;
  }
  float_elements_ = 0;
  for (auto& [ptr, n] : float_plan) {
    n = (n + kFloatAlign - 1) / kFloatAlign * kFloatAlign;
    float_elements_ += n;
  }

  // Refuse plans that cannot fit before touching memory (CPU: physical RAM). Parameters,
  // gradients and the two AdamW moments are float32.
  const double bytes = static_cast<double>(activation_bytes_total()) + 4.0 * 4.0 * layout_.total();
  const double ram = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
  if (be.Name() == "cpu" && bytes > 0.9 * ram) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the model needs about ", static_cast<int64_t>(bytes / (1 << 20)),
        " MiB for parameters, optimizer state and activations (micro-batch ", max_batch_, " x ",
        seq_len_, "), more than this machine's ", static_cast<int64_t>(ram / (1 << 20)),
        " MiB; lower data.batch_size or raise data.grad_accum_steps"));
  }
  params_ = be.AllocateFloats(layout_.total());
  grads_ = be.AllocateFloats(layout_.total());
  activations_ = be.AllocateActivations(activation_elements_);
  floats_ = be.AllocateFloats(float_elements_);
  tokens_ = be.AllocateInts(bt);
  targets_ = be.AllocateInts(bt);
  if (params_ == nullptr || grads_ == nullptr || !activations_ || floats_ == nullptr ||
      tokens_ == nullptr || targets_ == nullptr) {
    return absl::ResourceExhaustedError("out of memory allocating the model");
  }
  int64_t act_cursor = 0;
  for (auto& [ptr, n] : act_plan) {
    *ptr = be.ActAt(activations_, act_cursor);
    act_cursor += n;
  }
  float* cursor = floats_;
  for (auto& [ptr, n] : float_plan) {
    *ptr = cursor;
    cursor += n;
  }
  return absl::OkStatus();
}

void MesaNet::InitializeParams(uint64_t seed) {
  std::vector<float> host(layout_.total());
  layout_.Initialize(seed, host.data());
  SetParamsFromHost(host.data());
}

void MesaNet::SetParamsFromHost(const float* host) {
  backend_->CopyToDevice(params_, host, sizeof(float) * layout_.total());
  // The unembedding's padding rows must be zero whatever the caller passed: they make the padding
  // logits (and so their gradients) exactly 0 (logits_ld()).
  const int64_t c = config_.d_model, vocab = config_.vocab_size;
  backend_->Zero(params_ + layout_.embeddings() + vocab * c, (layout_.padded_vocab() - vocab) * c);
}

void MesaNet::GetParamsToHost(float* host) const {
  backend_->CopyToHost(host, params_, sizeof(float) * layout_.total());
}

void MesaNet::GetGradsToHost(float* host) const {
  backend_->CopyToHost(host, grads_, sizeof(float) * layout_.total());
}

void MesaNet::ZeroGrads() { backend_->Zero(grads_, layout_.total()); }

MesaSolve MesaNet::LayerSolve(int layer, const MesaSolve& solve) const {
  // A GLA layer is the Mesa operator with 0 CG steps (its readout is G_t q_t).
  return config_.LayerMixer(layer) == MixerKind::kGla ? MesaSolve{0, 0.0f} : solve;
}

MesaActs MesaNet::MesaActsFor(const LayerActs& a, int batch) const {
  return {.dims = {batch, seq_len_, config_.n_heads, config_.head_dim},
          .q = a.q,
          .k = a.k,
          .v = a.v,
          .log_gamma = a.log_gamma,
          .beta = a.beta,
          .lambda = a.lambda};
}

absl::StatusOr<ForwardStats> MesaNet::Forward(const int32_t* tokens, const int32_t* targets,
                                              int batch, const MesaSolve& solve) {
  if (batch < 1 || batch > max_batch_) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch ", batch, " outside [1, ", max_batch_, "]"));
  }
  batch_ = batch;
  solve_ = solve;
  const int64_t bt = int64_t{batch} * seq_len_;
  const int64_t c = config_.d_model, hd = config_.qk_dim(), h = config_.n_heads,
                d = config_.head_dim, f = config_.mlp_hidden, v = config_.vocab_size;
  for (int64_t i = 0; i < bt; ++i) {
    if (tokens[i] < 0 || tokens[i] >= v || targets[i] < 0 || targets[i] >= v) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token id ", tokens[i] < 0 || tokens[i] >= v ? tokens[i] : targets[i],
          " is outside the vocabulary [0, ", v, "); do the shards match model.vocab_size?"));
    }
  }
  Backend& be = *backend_;
  be.CopyToDevice(tokens_, tokens, sizeof(int32_t) * bt);
  be.CopyToDevice(targets_, targets, sizeof(int32_t) * bt);
  const float* p = params_;
  // Parameters change after every optimizer step; a low-precision backend re-converts them here.
  be.CacheWeights(params_, layout_.total());
  ForwardStats stats;

  be.EmbeddingForward(tokens_, p + layout_.embeddings(), acts_[0].res_in, bt, c,
                      std::sqrt(static_cast<float>(c)));
  for (int l = 0; l < config_.n_layers; ++l) {
    const LayerOffsets& w = layout_.layer(l);
    LayerActs& a = acts_[l];
    // Mixer branch.
    be.RmsNormForward(a.res_in, p + w.attn_norm, a.ln1, a.ln1_rstd, bt, c, kResidualNormEps);
    be.LinearForward(a.ln1, p + w.q_proj, a.q_pre, bt, c, hd, false);
    be.LinearForward(a.ln1, p + w.k_proj, a.k_pre, bt, c, hd, false);
    be.LinearForward(a.ln1, p + w.v_proj, a.v, bt, c, hd, false);
    be.CausalConvForward(a.q_pre, p + w.q_conv, a.q_conv, batch, seq_len_, hd, config_.conv_width);
    be.CausalConvForward(a.k_pre, p + w.k_conv, a.k_conv, batch, seq_len_, hd, config_.conv_width);
    be.SiluL2NormForward(a.q_conv, a.q, bt * h, d);
    be.SiluL2NormForward(a.k_conv, a.k, bt * h, d);
    be.LinearForward(a.ln1, p + w.a_weight, a.a_pre, bt, c, h, false);
    be.BiasForward(a.a_pre, p + w.a_bias, bt, h);
    be.LinearForward(a.ln1, p + w.b_weight, a.b_pre, bt, c, h, false);
    be.BiasForward(a.b_pre, p + w.b_bias, bt, h);
    be.GatesForward(a.a_pre, a.b_pre, a.beta, a.log_gamma, bt * h, config_.gamma_cap);
    be.LambdaForward(p + w.lambda, a.lambda, hd, config_.lambda_floor);
    absl::StatusOr<double> cg =
        be.MesaForward(MesaActsFor(a, batch), LayerSolve(l, solve), a.o, a.q_star);
    if (!cg.ok()) {
      if (IsNonFiniteInput(cg.status())) {
        stats.finite = false;
        return stats;
      }
      return cg.status();
    }
    stats.cg_steps_mean += *cg / config_.n_layers;
    be.RmsNormForward(a.o, p + w.o_norm, a.o_normed, a.o_rstd, bt * h, d, kHeadNormEps);
    be.CopyActivations(a.res_mid, a.res_in, bt * c);
    be.LinearForward(a.o_normed, p + w.o_proj, a.res_mid, bt, hd, c, true);
    // MLP branch.
    const Act next = l + 1 < config_.n_layers ? acts_[l + 1].res_in : res_final_;
    be.RmsNormForward(a.res_mid, p + w.mlp_norm, a.ln2, a.ln2_rstd, bt, c, kResidualNormEps);
    be.LinearForward(a.ln2, p + w.gate_proj, a.gate, bt, c, f, false);
    be.LinearForward(a.ln2, p + w.up_proj, a.up, bt, c, f, false);
    be.SwiGluForward(a.gate, a.up, a.h, bt * f);
    be.CopyActivations(next, a.res_mid, bt * c);
    be.LinearForward(a.h, p + w.down_proj, next, bt, f, c, true);
  }
  be.RmsNormForward(res_final_, p + layout_.final_norm(), lnf_, lnf_rstd_, bt, c, kResidualNormEps);
  // Tied lm_head over the padded vocabulary (logits_ld() rows of the embedding buffer, the last
  // ones zero): one aligned GEMM; the cross-entropy reads only the first v columns.
  be.LinearForward(lnf_, p + layout_.embeddings(), logits_, bt, c, logits_ld(), false);
  stats.loss_sum = be.SoftcapCrossEntropyForward(logits_, targets_, losses_, bt, v, logits_ld(),
                                                 config_.logit_softcap, config_.bos_token);
  for (int64_t i = 0; i < bt; ++i) stats.loss_tokens += targets[i] != config_.bos_token;
  stats.finite = std::isfinite(stats.loss_sum);
  return stats;
}

absl::StatusOr<double> MesaNet::Backward(float loss_scale, const GradsReadyFn& on_grads_ready) {
  auto ready = [&](int64_t begin, int64_t end) {
    return on_grads_ready ? on_grads_ready(begin, end - begin) : absl::OkStatus();
  };
  // Layer l's tensors sit between its attn_norm and the next layer's (or the final norm).
  auto layer_end = [&](int l) {
    return l + 1 < config_.n_layers ? layout_.layer(l + 1).attn_norm : layout_.final_norm();
  };
  Backend& be = *backend_;
  const int batch = batch_;
  const int64_t bt = int64_t{batch} * seq_len_;
  const int64_t c = config_.d_model, hd = config_.qk_dim(), h = config_.n_heads,
                d = config_.head_dim, f = config_.mlp_hidden, v = config_.vocab_size;
  const float* p = params_;
  float* g = grads_;
  double cg_mean = 0;

  be.SoftcapCrossEntropyBackward(logits_, targets_, losses_, bt, v, logits_ld(),
                                 config_.logit_softcap, config_.bos_token, loss_scale);
  // The padding columns of d_logits are the forward's zeros (the CE backward leaves them), so
  // they add nothing to d_ln and the padding rows' gradients stay 0. The first product into an
  // activation gradient overwrites it (no zeroing pass); later ones accumulate.
  be.LinearBackward(lnf_, p + layout_.embeddings(), logits_, d_ln_, g + layout_.embeddings(), bt, c,
                    logits_ld(), /*accumulate_d_in=*/false);
  be.ZeroActivations(d_res_, bt * c);
  be.RmsNormBackward(res_final_, p + layout_.final_norm(), lnf_rstd_, d_ln_, d_res_,
                     g + layout_.final_norm(), bt, c);
  if (absl::Status s = ready(layout_.final_norm(), layout_.total()); !s.ok()) return s;
  for (int l = config_.n_layers - 1; l >= 0; --l) {
    const LayerOffsets& w = layout_.layer(l);
    const LayerActs& a = acts_[l];
    // MLP branch; d_res holds dL/d(block output) and flows through the residual unchanged.
    be.LinearBackward(a.h, p + w.down_proj, d_res_, d_h_, g + w.down_proj, bt, f, c,
                      /*accumulate_d_in=*/false);
    be.SwiGluBackward(a.gate, a.up, d_h_, d_gate_, d_up_, bt * f);
    be.LinearBackward(a.ln2, p + w.gate_proj, d_gate_, d_ln_, g + w.gate_proj, bt, c, f,
                      /*accumulate_d_in=*/false);
    be.LinearBackward(a.ln2, p + w.up_proj, d_up_, d_ln_, g + w.up_proj, bt, c, f);
    be.RmsNormBackward(a.res_mid, p + w.mlp_norm, a.ln2_rstd, d_ln_, d_res_, g + w.mlp_norm, bt, c);
    // Mixer branch.
    be.LinearBackward(a.o_normed, p + w.o_proj, d_res_, d_onorm_, g + w.o_proj, bt, hd, c,
                      /*accumulate_d_in=*/false);
    be.ZeroActivations(d_o_, bt * hd);
    be.RmsNormBackward(a.o, p + w.o_norm, a.o_rstd, d_onorm_, d_o_, g + w.o_norm, bt * h, d);
    const MesaActGrads mg{.dq = d_q_,
                          .dk = d_k_,
                          .dv = d_v_,
                          .dlog_gamma = d_log_gamma_,
                          .dbeta = d_beta_,
                          .dlambda = d_lambda_};
    absl::StatusOr<double> cg =
        be.MesaBackward(MesaActsFor(a, batch), a.q_star, d_o_, LayerSolve(l, solve_), mg);
    if (!cg.ok()) {
      if (!IsNonFiniteInput(cg.status())) return cg.status();
      // Poison the gradients so that the trainer skips the step: the NaN goes into a range not
      // yet handed out, and the rest are still reported in order, so ranks reducing ranges as
      // they come keep issuing the same collectives and all see the NaN.
      const float nan = NAN;
      be.CopyToDevice(g + w.attn_norm, &nan, sizeof(float));
      for (int rest = l; rest >= 0; --rest) {
        if (absl::Status s = ready(layout_.layer(rest).attn_norm, layer_end(rest)); !s.ok()) {
          return s;
        }
      }
      if (absl::Status s = ready(layout_.embeddings(), layout_.layer(0).attn_norm); !s.ok()) {
        return s;
      }
      return NAN;
    }
    cg_mean += *cg / config_.n_layers;
    be.LambdaBackward(p + w.lambda, d_lambda_, g + w.lambda, hd);
    be.GatesBackward(a.a_pre, a.b_pre, d_beta_, d_log_gamma_, d_a_pre_, d_b_pre_, bt * h,
                     config_.gamma_cap);
    be.LinearBackward(a.ln1, p + w.a_weight, d_a_pre_, d_ln_, g + w.a_weight, bt, c, h,
                      /*accumulate_d_in=*/false);
    be.BiasBackward(d_a_pre_, g + w.a_bias, bt, h);
    be.LinearBackward(a.ln1, p + w.b_weight, d_b_pre_, d_ln_, g + w.b_weight, bt, c, h);
    be.BiasBackward(d_b_pre_, g + w.b_bias, bt, h);
    struct QkPath {
      Act pre, conv, d_normed;
      int64_t conv_w, proj;
    };
    for (const QkPath& path : {QkPath{a.q_pre, a.q_conv, d_q_, w.q_conv, w.q_proj},
                               QkPath{a.k_pre, a.k_conv, d_k_, w.k_conv, w.k_proj}}) {
      be.ZeroActivations(d_conv_, bt * hd);
      be.SiluL2NormBackward(path.conv, path.d_normed, d_conv_, bt * h, d);
      be.ZeroActivations(d_pre_, bt * hd);
      be.CausalConvBackward(path.pre, p + path.conv_w, d_conv_, d_pre_, g + path.conv_w, batch,
                            seq_len_, hd, config_.conv_width);
      be.LinearBackward(a.ln1, p + path.proj, d_pre_, d_ln_, g + path.proj, bt, c, hd);
    }
    be.LinearBackward(a.ln1, p + w.v_proj, d_v_, d_ln_, g + w.v_proj, bt, c, hd);
    be.RmsNormBackward(a.res_in, p + w.attn_norm, a.ln1_rstd, d_ln_, d_res_, g + w.attn_norm, bt,
                       c);
    if (absl::Status s = ready(w.attn_norm, layer_end(l)); !s.ok()) return s;
  }
  be.EmbeddingBackward(tokens_, d_res_, g + layout_.embeddings(), bt, c,
                       std::sqrt(static_cast<float>(c)));
  if (absl::Status s = ready(layout_.embeddings(), layout_.layer(0).attn_norm); !s.ok()) return s;
  return cg_mean;
}

void MesaNet::CopyLossesToHost(std::vector<float>* losses) const {
  losses->resize(int64_t{batch_} * seq_len_);
  backend_->CopyToHost(losses->data(), losses_, sizeof(float) * losses->size());
}

void MesaNet::CopyLogitsToHost(std::vector<float>* logits) const {
  const int64_t rows = int64_t{batch_} * seq_len_, v = config_.vocab_size, ld = logits_ld();
  // One transfer of the padded rows (the padding is zero-filled at allocation), then compact.
  logits->resize(rows * ld);
  backend_->ActivationsToHost(logits->data(), logits_, rows * ld);
  for (int64_t r = 1; r < rows; ++r) {
    std::copy_n(logits->data() + r * ld, v, logits->data() + r * v);
  }
  logits->resize(rows * v);
}

double MesaNet::TrainFlopsPerToken(int cg_steps) const {
  // 6 FLOPs per parameter per token for the GEMMs (forward 2, backward 4); the tied unembedding
  // counts again. CG: per head, one iteration ~ 2 (2 C D + D^2) MACs per token with chunk C = 64
  // (docs/math.md §6.5), forward solve + backward solve.
  const double c = config_.d_model, d = config_.head_dim;
  const double dense = 6.0 * (layout_.num_values() + config_.vocab_size * c);
  const double cg_iter = 2.0 * (2.0 * 64 * d + d * d) * config_.n_heads;
  return dense + config_.MesaLayers() * 2.0 * cg_steps * cg_iter;
}

}  // namespace mesa::model
