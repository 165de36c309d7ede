#include "model/net/mesanet.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <tuple>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/memory_limit.h"
#include "model/layers/document_starts.h"

namespace mesa::model {
namespace {

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
  if (share_params_ == nullptr) {
    backend_->Free(params_);
    backend_->Free(grads_);
  }
  backend_->Free(activations_);
  backend_->Free(floats_);
  backend_->Free(tokens_);
  backend_->Free(targets_);
  backend_->Free(doc_start_);
  if (token_cg_steps_ != nullptr) backend_->Free(token_cg_steps_);
}

absl::Status MesaNet::KeepTokenCgSteps(bool on) {
  if (!on) {
    if (token_cg_steps_ != nullptr) backend_->Free(token_cg_steps_);
    token_cg_steps_ = nullptr;
    return absl::OkStatus();
  }
  if (token_cg_steps_ != nullptr) return absl::OkStatus();
  token_cg_steps_ =
      backend_->AllocateInts(int64_t{config_.n_layers} * max_batch_ * seq_len_ * config_.n_heads);
  if (token_cg_steps_ == nullptr) return absl::ResourceExhaustedError("per-token CG steps");
  return absl::OkStatus();
}

void MesaNet::CopyTokenCgStepsToHost(std::vector<int32_t>* steps) const {
  steps->resize(int64_t{config_.n_layers} * batch_ * t_ * config_.n_heads);
  if (token_cg_steps_ == nullptr) {
    std::fill(steps->begin(), steps->end(), 0);
    return;
  }
  backend_->CopyToHost(steps->data(), token_cg_steps_, sizeof(int32_t) * steps->size());
}

bool MesaNet::CopySolveInputsToHost(int l, SolveInputs* out) const {
  if (!acts_[l].mixer->CopySolveInputsToHost(*backend_, batch_, t_, out)) return false;
  out->doc_start.clear();
  if (doc_starts_set_) {
    out->doc_start.assign(doc_start_host_.begin(), doc_start_host_.begin() + int64_t{batch_} * t_);
  }
  return true;
}

absl::StatusOr<std::unique_ptr<MesaNet>> MesaNet::Create(const ModelConfig& config,
                                                         Backend* backend, int max_batch,
                                                         int seq_len, MesaNet* share_params) {
  if (absl::Status s = ValidateModelConfig(config); !s.ok()) return s;
  if (max_batch < 1 || seq_len < 1) {
    return absl::InvalidArgumentError("micro-batch and sequence length must be positive");
  }
  if (share_params != nullptr && (share_params->backend_ != backend ||
                                  share_params->num_params() != ParamLayout(config).total())) {
    return absl::InvalidArgumentError("a net shares the parameters of a net of its own shape only");
  }
  std::unique_ptr<MesaNet> net(new MesaNet(config, backend, max_batch, seq_len));
  net->share_params_ = share_params;
  if (absl::Status s = net->Plan(); !s.ok()) return s;
  return net;
}

absl::Status MesaNet::Plan() {
  Backend& be = *backend_;
  const int64_t bt = int64_t{max_batch_} * seq_len_;
  const int64_t c = config_.d_model, hd = config_.qk_dim(), h = config_.n_heads,
                f = config_.mlp_hidden;
  BufferPlan plan;
  auto& act_plan = plan.acts;
  auto& float_plan = plan.floats;
  acts_.resize(config_.n_layers);
  for (int l = 0; l < config_.n_layers; ++l) {
    LayerActs& a = acts_[l];
    a.mixer = MakeMixerLayer(config_.LayerMixer(l), config_);
    if (a.mixer == nullptr) {
      return absl::InternalError(absl::StrCat("no layer registered for the mixer \"",
                                              MixerName(config_.LayerMixer(l)),
                                              "\" (link //model/mixers:mixers)"));
    }
    // A layer whose steps keep host-side bookkeeping (attention's KV lengths) is never replayed.
    if (!a.mixer->StepRecordable()) steps_recordable_ = false;
    act_plan.insert(act_plan.end(), {{&a.res_in, bt * c},
                                     {&a.ln1, bt * c},
                                     {&a.res_mid, bt * c},
                                     {&a.ln2, bt * c},
                                     {&a.gate, bt * f},
                                     {&a.up, bt * f},
                                     {&a.h, bt * f}});
    float_plan.insert(float_plan.end(), {{&a.ln1_rstd, bt}, {&a.ln2_rstd, bt}});
    // The head norm and o_proj's input, unless the mixer projects back itself (Hawk).
    if (!spec::TraitsOf(config_.LayerMixer(l)).owns_projections) {
      act_plan.insert(act_plan.end(), {{&a.o, bt * hd}, {&a.o_normed, bt * hd}});
      float_plan.push_back({&a.o_rstd, bt * h});
    }
    a.mixer->Plan(plan, bt);
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
                                   {&d_o_, bt * hd}});
  float_plan.insert(float_plan.end(), {{&lnf_rstd_, bt}, {&losses_, bt}});
  // Every buffer starts 256-byte aligned for the GEMM and vector kernels: round each one up to
  // a whole number of 256-byte blocks of its pool's element size.
  constexpr int64_t kAlignBytes = 256;
  const int64_t act_align = kAlignBytes / be.activation_bytes();
  constexpr int64_t kFloatAlign = kAlignBytes / sizeof(float);
  const auto round_up = [](BufferPlan& p, int64_t act_align, int64_t float_align) {
    std::pair<int64_t, int64_t> sizes{0, 0};
    for (auto& [ptr, n] : p.acts) sizes.first += n = (n + act_align - 1) / act_align * act_align;
    for (auto& [ptr, n] : p.floats) {
      sizes.second += n = (n + float_align - 1) / float_align * float_align;
    }
    return sizes;
  };
  std::tie(activation_elements_, float_elements_) = round_up(plan, act_align, kFloatAlign);
  // The layers' backward scratch, laid over one region of each pool (MixerLayer::PlanScratch):
  // as large as the largest layer's.
  std::vector<BufferPlan> scratch_plans(config_.n_layers);
  int64_t scratch_acts = 0, scratch_floats = 0;
  for (int l = 0; l < config_.n_layers; ++l) {
    acts_[l].mixer->PlanScratch(scratch_plans[l], bt);
    const auto [a, f] = round_up(scratch_plans[l], act_align, kFloatAlign);
    scratch_acts = std::max(scratch_acts, a);
    scratch_floats = std::max(scratch_floats, f);
  }
  const int64_t scratch_act_start = activation_elements_;
  const int64_t scratch_float_start = float_elements_;
  activation_elements_ += scratch_acts;
  float_elements_ += scratch_floats;

  // Refuse plans that cannot fit before touching memory (CPU: what this process may still take,
  // under its cgroup, RLIMIT_AS and the machine's available memory; the OOM killer would end it
  // as an infrastructure failure, retried to death). Parameters, gradients and the two AdamW
  // moments are float32.
  const double bytes = static_cast<double>(activation_bytes_total()) + 4.0 * 4.0 * layout_.total();
  if (be.Name() == "cpu") {
    // 10% of the headroom is left for everything that is not planned here (the data loader,
    // checkpoint buffers, the allocator's own overhead): the budget is the other 90%.
    const base::MemoryHeadroom headroom = base::AvailableMemory();
    const int64_t budget = static_cast<int64_t>(0.9 * static_cast<double>(headroom.bytes));
    if (bytes > static_cast<double>(budget)) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the model needs about ", static_cast<int64_t>(bytes / (1 << 20)),
          " MiB for parameters, optimizer state and activations (micro-batch ", max_batch_, " x ",
          seq_len_, "), more than its budget of ", budget >> 20, " MiB (90% of the ",
          headroom.bytes >> 20, " MiB this process may still take, limited by ", headroom.source,
          "); lower data.batch_size or raise data.grad_accum_steps"));
    }
  }
  if (share_params_ != nullptr) {
    params_ = share_params_->params_;
  } else {
    params_ = be.AllocateFloats(layout_.total());
    grads_ = be.AllocateFloats(layout_.total());
  }
  activations_ = be.AllocateActivations(activation_elements_);
  floats_ = be.AllocateFloats(float_elements_);
  tokens_ = be.AllocateInts(bt);
  targets_ = be.AllocateInts(bt);
  doc_start_ = be.AllocateInts(bt);
  if (params_ == nullptr || (grads_ == nullptr && share_params_ == nullptr) || !activations_ ||
      floats_ == nullptr || tokens_ == nullptr || targets_ == nullptr || doc_start_ == nullptr) {
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
  for (BufferPlan& scratch : scratch_plans) {
    int64_t act_at = scratch_act_start;
    for (auto& [ptr, n] : scratch.acts) {
      *ptr = be.ActAt(activations_, act_at);
      act_at += n;
    }
    float* float_at = floats_ + scratch_float_start;
    for (auto& [ptr, n] : scratch.floats) {
      *ptr = float_at;
      float_at += n;
    }
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
  weights_cached_ = false;
  // The unembedding's padding rows must be zero whatever the caller passed: they make the padding
  // logits (and so their gradients) exactly 0 (logits_ld()).
  const int64_t c = config_.d_model, vocab = config_.vocab_size;
  backend_->Zero(params_ + layout_.head() + vocab * c, (layout_.padded_vocab() - vocab) * c);
}

void MesaNet::GetParamsToHost(float* host) const {
  backend_->CopyToHost(host, params_, sizeof(float) * layout_.total());
}

void MesaNet::GetGradsToHost(float* host) const {
  if (grads_ != nullptr) backend_->CopyToHost(host, grads_, sizeof(float) * layout_.total());
}

void MesaNet::ZeroGrads() {
  if (grads_ != nullptr) backend_->Zero(grads_, layout_.total());
}

MixerCall MesaNet::CallFor(int layer, int batch, int t) {
  return {.backend = backend_,
          .params = params_,
          .grads = grads_,
          .weights = &layout_.layer(layer).mixer,
          .batch = batch,
          .seq_len = t,
          .doc_start = doc_starts_set_ ? doc_start_ : nullptr};
}

absl::Status MesaNet::CheckTokens(const int32_t* tokens, int64_t n) const {
  const int64_t v = config_.vocab_size;
  for (int64_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= v) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", tokens[i],
                                                     " is outside the vocabulary [0, ", v,
                                                     "); do the shards match model.vocab_size?"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ForwardStats> MesaNet::Forward(const int32_t* tokens, const int32_t* targets,
                                              int batch, const MesaSolve& solve) {
  if (batch < 1 || batch > max_batch_) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch ", batch, " outside [1, ", max_batch_, "]"));
  }
  const int64_t bt = int64_t{batch} * seq_len_;
  if (absl::Status s = CheckTokens(tokens, bt); !s.ok()) return s;
  if (absl::Status s = CheckTokens(targets, bt); !s.ok()) return s;
  solve_ = solve;
  Backend& be = *backend_;
  be.CopyToDevice(tokens_, tokens, sizeof(int32_t) * bt);
  be.CopyToDevice(targets_, targets, sizeof(int32_t) * bt);
  doc_starts_set_ = config_.reset_at_bos;
  if (doc_starts_set_ && context_parallel()) {
    // Also a run resumed under context parallelism from one that trained with resets.
    return absl::FailedPreconditionError(
        "data.reset_at_bos: document starts apply to whole rows, not context-parallel slices");
  }
  if (doc_starts_set_) {
    doc_start_host_.resize(bt);
    DocumentStarts(tokens, batch, seq_len_, config_.bos_token, doc_start_host_.data());
    be.CopyToDevice(doc_start_, doc_start_host_.data(), sizeof(int32_t) * bt);
  }
  ForwardStats stats;
  if (absl::Status s = RunLayers(batch, seq_len_, solve, nullptr, 0, &stats); !s.ok()) return s;
  if (!stats.finite) return stats;
  stats.loss_sum =
      be.SoftcapCrossEntropyForward(logits_, targets_, losses_, bt, config_.vocab_size, logits_ld(),
                                    config_.logit_softcap, config_.bos_token);
  for (int64_t i = 0; i < bt; ++i) stats.loss_tokens += targets[i] != config_.bos_token;
  stats.finite = std::isfinite(stats.loss_sum);
  return stats;
}

int64_t DecodeState::RowBytes() const {
  int64_t bytes = 0;
  for (const std::unique_ptr<MixerState>& layer : layers_) bytes += layer->RowBytes();
  return bytes;
}

absl::StatusOr<std::unique_ptr<DecodeState>> MesaNet::NewDecodeState(int rows) {
  if (rows < 1) return absl::InvalidArgumentError(absl::StrCat("decoding rows ", rows, " < 1"));
  static std::atomic<uint64_t> next_id{1};
  auto state = std::make_unique<DecodeState>();
  state->id_ = next_id.fetch_add(1);
  state->rows_ = rows;
  const int64_t counts = int64_t{config_.n_layers} * rows * config_.n_heads;
  state->cg_steps_ = {backend_->AllocateInts(counts), DecodeState::Freer{backend_}};
  if (state->cg_steps_ == nullptr) return absl::ResourceExhaustedError("decoding CG step counts");
  for (const LayerActs& a : acts_) {
    absl::StatusOr<std::unique_ptr<MixerState>> layer = a.mixer->NewState(*backend_, rows);
    if (!layer.ok()) return layer.status();
    state->layers_.push_back(*std::move(layer));
  }
  return state;
}

absl::StatusOr<ForwardStats> MesaNet::Advance(const int32_t* tokens, int batch, int t,
                                              const MesaSolve& solve, DecodeState& state,
                                              int first_row, bool logits) {
  if (batch < 1 || batch > max_batch_) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch ", batch, " outside [1, ", max_batch_, "]"));
  }
  if (t < 1 || t > seq_len_) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokens per sequence ", t, " outside [1, ", seq_len_, "]"));
  }
  if (first_row < 0 || first_row + batch > state.rows()) {
    return absl::InvalidArgumentError(absl::StrCat("rows [", first_row, ", ", first_row + batch,
                                                   ") outside the decoding state's ",
                                                   state.rows()));
  }
  const int64_t bt = int64_t{batch} * t;
  if (absl::Status s = CheckTokens(tokens, bt); !s.ok()) return s;
  backend_->CopyToDevice(tokens_, tokens, sizeof(int32_t) * bt);
  doc_starts_set_ = false;
  ForwardStats stats;
  if (t == 1 && logits && record_steps_ && steps_recordable_) {
    absl::StatusOr<bool> replayed = AdvanceRecorded(batch, solve, state, first_row, &stats);
    if (!replayed.ok()) return replayed.status();
    if (*replayed) return stats;
  }
  if (absl::Status s = RunLayers(batch, t, solve, &state, first_row, &stats, logits); !s.ok()) {
    return s;
  }
  return stats;
}

absl::StatusOr<bool> MesaNet::AdvanceRecorded(int batch, const MesaSolve& solve, DecodeState& state,
                                              int first_row, ForwardStats* stats) {
  const auto key = std::make_tuple(state.id_, first_row, batch, solve.max_steps, solve.tolerance);
  auto it = recorded_steps_.find(key);
  if (it == recorded_steps_.end()) {
    recorded_steps_.emplace(key, RecordedStep{});  // the first call runs directly
    return false;
  }
  // New parameters: the step runs directly, converting them and recomputing what derives from
  // them (recordings leave that out: they read the buffers it fills).
  if (!weights_cached_) return false;
  if (it->second.recording < 0) {
    if (!backend_->BeginRecording().ok()) {
      record_steps_ = false;  // this backend cannot record: every step runs directly
      return false;
    }
    ForwardStats recorded;
    const absl::Status ran = RunLayers(batch, 1, solve, &state, first_row, &recorded);
    absl::StatusOr<int> recording = backend_->EndRecording();
    if (!ran.ok()) return ran;
    if (!recording.ok() || !recorded.finite) {
      record_steps_ = false;  // a call could not be recorded: run directly from now on
      return false;
    }
    it->second = {*recording, recorded};
  }
  if (absl::Status s = backend_->Replay(it->second.recording); !s.ok()) return s;
  logits_current_ = true;  // the recording ends with the head
  batch_ = batch;
  t_ = 1;
  advanced_ = true;
  *stats = it->second.stats;
  if (solve.tolerance > 0) ReadBackCgSteps(batch, state, first_row, stats);
  return true;
}

void MesaNet::ReadBackCgSteps(int batch, const DecodeState& state, int first_row,
                              ForwardStats* stats) const {
  const int64_t h = config_.n_heads, rows = state.rows_;
  std::vector<int32_t> counts(config_.n_layers * rows * h);
  backend_->CopyToHost(counts.data(), state.cg_steps_.get(), sizeof(int32_t) * counts.size());
  stats->cg_steps_mean = 0;
  stats->layer_cg_steps.clear();
  stats->layer_head_cg_steps.clear();
  for (int l = 0; l < config_.n_layers; ++l) {
    std::vector<int32_t> heads;
    double mean = 0;
    if (spec::TraitsOf(config_.LayerMixer(l)).solves_with_cg) {
      const auto begin = counts.begin() + (l * rows + first_row) * h;
      heads.assign(begin, begin + batch * h);
      for (int32_t n : heads) mean += n;
      mean /= static_cast<double>(heads.size());
    }
    stats->cg_steps_mean += mean / config_.n_layers;
    stats->layer_cg_steps.push_back(mean);
    stats->layer_head_cg_steps.push_back(std::move(heads));
  }
}

absl::Status MesaNet::RunLayers(int batch, int t, const MesaSolve& solve, DecodeState* state,
                                int first_row, ForwardStats* stats, bool logits) {
  logits_current_ = false;
  batch_ = batch;
  t_ = t;
  advanced_ = state != nullptr;
  const int64_t bt = int64_t{batch} * t;
  const int64_t c = config_.d_model, hd = config_.qk_dim(), h = config_.n_heads,
                d = config_.head_dim, f = config_.mlp_hidden;
  Backend& be = *backend_;
  const float* p = params_;
  // Parameters change after every optimizer step, so a training forward makes the backend
  // re-convert them (low-precision backends); decoding changes none, so its steps convert them
  // once (until SetParamsFromHost or the next Forward).
  const bool params_as_before = state != nullptr && weights_cached_;
  if (!params_as_before) be.CacheWeights(params_, layout_.total());
  weights_cached_ = state != nullptr;

  // From a decoding state no backward follows, so the residual stream stays in one buffer that
  // every branch adds to in place (no copies); a training forward keeps each layer's.
  const bool in_place = state != nullptr;
  const Act stream = acts_[0].res_in;
  be.EmbeddingForward(tokens_, p + layout_.embeddings(), stream, bt, c, config_.EmbeddingScale());
  for (int l = 0; l < config_.n_layers; ++l) {
    const LayerOffsets& w = layout_.layer(l);
    LayerActs& a = acts_[l];
    const Act res_in = in_place ? stream : a.res_in, res_mid = in_place ? stream : a.res_mid;
    // Mixer branch.
    be.RmsNormForward(res_in, p + w.attn_norm, a.ln1, a.ln1_rstd, bt, c, kResidualNormEps);
    MixerCall call = CallFor(l, batch, t);
    call.params_as_before = params_as_before;
    if (state == nullptr && token_cg_steps_ != nullptr &&
        spec::TraitsOf(config_.LayerMixer(l)).solves_with_cg) {
      call.token_cg_steps = token_cg_steps_ + int64_t{l} * bt * h;
    }
    const bool owns_projections = spec::TraitsOf(config_.LayerMixer(l)).owns_projections;
    bool head_normed = false;
    if (state != nullptr && !owns_projections) {
      call.head_cg_steps = state->cg_steps_.get() + (int64_t{l} * state->rows_ + first_row) * h;
      call.head_norm = {
          .weight = p + w.o_norm, .eps = kHeadNormEps, .out = a.o_normed, .done = &head_normed};
    }
    const bool context = state == nullptr && context_parallel();
    if (context) {
      if (absl::Status s = ReceiveCarry(l, batch, call); !s.ok()) return s;
    }
    // A mixer that owns its projections adds its output to the residual stream itself.
    if (owns_projections && !in_place) be.CopyActivations(res_mid, res_in, bt * c);
    const Act mixer_out = owns_projections ? res_mid : a.o;
    absl::StatusOr<double> cg =
        state == nullptr
            ? a.mixer->Forward(call, a.ln1, mixer_out, solve)
            : a.mixer->ForwardFrom(call, a.ln1, mixer_out, solve, *state->layers_[l], first_row);
    if (!cg.ok()) {
      if (IsNonFiniteInput(cg.status())) {
        stats->finite = false;
        return context ? DrainForward(l, batch) : absl::OkStatus();
      }
      return cg.status();
    }
    if (context) {
      if (absl::Status s = SendCarry(l, batch); !s.ok()) return s;
    }
    stats->cg_steps_mean += *cg / config_.n_layers;
    stats->layer_cg_steps.push_back(*cg);
    if (state != nullptr) stats->layer_head_cg_steps.push_back(a.mixer->LastHeadCgSteps());
    if (!owns_projections) {
      if (!head_normed) {
        be.RmsNormForward(a.o, p + w.o_norm, a.o_normed, a.o_rstd, bt * h, d, kHeadNormEps);
      }
      if (!in_place) be.CopyActivations(res_mid, res_in, bt * c);
      be.LinearForward(a.o_normed, p + w.o_proj, res_mid, bt, hd, c, true);
    }
    // MLP branch.
    const Act next =
        in_place ? stream : (l + 1 < config_.n_layers ? acts_[l + 1].res_in : res_final_);
    be.RmsNormForward(res_mid, p + w.mlp_norm, a.ln2, a.ln2_rstd, bt, c, kResidualNormEps);
    if (in_place && 2 * bt <= int64_t{max_batch_} * seq_len_ && w.up_proj == w.gate_proj + f * c) {
      // Decoding with room for both in a.gate: gate and up (adjacent in the parameters) as one
      // GEMM whose output rows are gate | up.
      be.LinearForward(a.ln2, p + w.gate_proj, a.gate, bt, c, 2 * f, false);
      be.SwiGluRowsForward(a.gate, a.h, bt, f);
    } else {
      be.LinearForward(a.ln2, p + w.gate_proj, a.gate, bt, c, f, false);
      be.LinearForward(a.ln2, p + w.up_proj, a.up, bt, c, f, false);
      be.SwiGluForward(a.gate, a.up, a.h, bt * f);
    }
    if (!in_place) be.CopyActivations(next, res_mid, bt * c);
    be.LinearForward(a.h, p + w.down_proj, next, bt, f, c, true);
  }
  if (!logits) return absl::OkStatus();  // a prefill: the state is what it is for
  be.RmsNormForward(in_place ? stream : res_final_, p + layout_.final_norm(), lnf_, lnf_rstd_, bt,
                    c, kResidualNormEps);
  // lm_head (tied: the embedding) over the padded vocabulary (logits_ld() rows, the last
  // ones zero): one aligned GEMM; the cross-entropy reads only the first v columns.
  be.LinearForward(lnf_, p + layout_.head(), logits_, bt, c, logits_ld(), false);
  logits_current_ = true;
  return absl::OkStatus();
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
  if (advanced_) {
    return absl::FailedPreconditionError("Backward follows a Forward, not an Advance");
  }
  if (grads_ == nullptr) {
    return absl::FailedPreconditionError("this net shares another's parameters: no Backward");
  }
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
  be.LinearBackward(lnf_, p + layout_.head(), logits_, d_ln_, g + layout_.head(), bt, c,
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
    // Mixer branch (a mixer that owns its projections reads the residual gradient itself).
    const bool owns_projections = spec::TraitsOf(config_.LayerMixer(l)).owns_projections;
    if (!owns_projections) {
      be.LinearBackward(a.o_normed, p + w.o_proj, d_res_, d_onorm_, g + w.o_proj, bt, hd, c,
                        /*accumulate_d_in=*/false);
      be.ZeroActivations(d_o_, bt * hd);
      be.RmsNormBackward(a.o, p + w.o_norm, a.o_rstd, d_onorm_, d_o_, g + w.o_norm, bt * h, d);
    }
    MixerCall call = CallFor(l, batch, seq_len_);
    if (context_parallel()) {
      if (absl::Status s = ReceiveCarryGrad(l, batch, call); !s.ok()) return s;
    }
    absl::StatusOr<double> cg =
        a.mixer->Backward(call, a.ln1, owns_projections ? d_res_ : d_o_, d_ln_, solve_);
    if (!cg.ok()) {
      if (!IsNonFiniteInput(cg.status())) return cg.status();
      if (context_parallel()) {
        if (absl::Status s = DrainBackward(l, batch); !s.ok()) return s;
      }
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
    if (context_parallel()) {
      if (absl::Status s = SendCarryGrad(l, batch); !s.ok()) return s;
    }
    be.RmsNormBackward(a.res_in, p + w.attn_norm, a.ln1_rstd, d_ln_, d_res_, g + w.attn_norm, bt,
                       c);
    if (absl::Status s = ready(w.attn_norm, layer_end(l)); !s.ok()) return s;
  }
  be.EmbeddingBackward(tokens_, d_res_, g + layout_.embeddings(), bt, c, config_.EmbeddingScale());
  if (absl::Status s = ready(layout_.embeddings(), layout_.layer(0).attn_norm); !s.ok()) return s;
  return cg_mean;
}

absl::Status MesaNet::CopyDecodeRows(DecodeState& state, const std::vector<int32_t>& from,
                                     int first_to) {
  const int64_t last_to = int64_t{first_to} + static_cast<int64_t>(from.size());
  if (first_to < 0 || last_to > state.rows_) {
    return absl::InvalidArgumentError(
        absl::StrCat("decoding rows [", first_to, ", ", last_to, ") outside 0..", state.rows_ - 1));
  }
  for (int32_t row : from) {
    if (row < 0 || row >= state.rows_ || (row >= first_to && row < last_to)) {
      return absl::InvalidArgumentError(
          absl::StrCat("decoding row ", row, " copied to [", first_to, ", ", last_to, ")"));
    }
  }
  for (const std::unique_ptr<MixerState>& layer : state.layers_) layer->CopyRows(from, first_to);
  return absl::OkStatus();
}

absl::Status MesaNet::LossesOfLastAdvance(const int32_t* targets, std::vector<float>* losses) {
  if (!advanced_) return absl::FailedPreconditionError("no Advance to take the losses of");
  if (!logits_current_) {
    return absl::FailedPreconditionError("the last Advance computed no logits (logits = false)");
  }
  const int64_t bt = int64_t{batch_} * t_;
  if (absl::Status s = CheckTokens(targets, bt); !s.ok()) return s;
  backend_->CopyToDevice(targets_, targets, sizeof(int32_t) * bt);
  backend_->SoftcapCrossEntropyForward(logits_, targets_, losses_, bt, config_.vocab_size,
                                       logits_ld(), config_.logit_softcap, config_.bos_token);
  CopyLossesToHost(losses);
  return absl::OkStatus();
}

void MesaNet::CopyLossesToHost(std::vector<float>* losses) const {
  losses->resize(int64_t{batch_} * t_);
  backend_->CopyToHost(losses->data(), losses_, sizeof(float) * losses->size());
}

void MesaNet::CopyLogitsToHost(std::vector<float>* logits) const {
  const int64_t rows = int64_t{batch_} * t_, v = config_.vocab_size, ld = logits_ld();
  // One transfer of the padded rows (the padding is zero-filled at allocation), then compact.
  logits->resize(rows * ld);
  backend_->ActivationsToHost(logits->data(), logits_, rows * ld);
  for (int64_t r = 1; r < rows; ++r) {
    std::copy_n(logits->data() + r * ld, v, logits->data() + r * v);
  }
  logits->resize(rows * v);
}

void MesaNet::GreedyFromLogits(std::vector<int32_t>* tokens, std::vector<float>* logprobs) const {
  const int64_t rows = int64_t{batch_} * t_;
  tokens->resize(rows);
  logprobs->resize(rows);
  backend_->SoftcapArgmax(logits_, rows, config_.vocab_size, logits_ld(), config_.logit_softcap,
                          tokens->data(), logprobs->data());
}

void MesaNet::SampleFromLogits(const std::vector<SamplingRow>& params, std::vector<int32_t>* tokens,
                               std::vector<float>* logprobs) const {
  const int64_t rows = int64_t{batch_} * t_;
  tokens->assign(rows, -1);
  logprobs->assign(rows, 0.f);
  if (static_cast<int64_t>(params.size()) != rows) return;  // a programming error: tokens -1
  backend_->SoftcapSample(logits_, rows, config_.vocab_size, logits_ld(), config_.logit_softcap,
                          params.data(), tokens->data(), logprobs->data());
}

double MesaNet::TrainFlopsPerToken(int cg_steps) const {
  // 6 FLOPs per parameter per token for the GEMMs (forward 2, backward 4); the tied unembedding
  // counts again; each mixer adds its solve.
  const double c = config_.d_model;
  const double tied_head = config_.tie_embeddings ? config_.vocab_size * c : 0.0;
  double flops = 6.0 * (layout_.num_values() + tied_head);
  for (const LayerActs& a : acts_) flops += a.mixer->SolveFlopsPerToken(cg_steps);
  return flops;
}

}  // namespace mesa::model
