#include "model/mixers/attention/attention_layer.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace mesa::model {

void AttentionLayer::Plan(BufferPlan& plan, int64_t bt) {
  const int64_t hd = config_.qk_dim();
  plan.acts.insert(
      plan.acts.end(),
      {{&q_pre_, bt * hd}, {&k_pre_, bt * hd}, {&q_, bt * hd}, {&k_, bt * hd}, {&v_, bt * hd}});
}

AttnShape AttentionLayer::Shape(int batch, int seq_len) const {
  return {batch, seq_len, config_.n_heads, config_.head_dim};
}

absl::Status AttentionLayer::Project(const MixerCall& call, Act ln, ConvTails* tails,
                                     int first_row) {
  Backend& be = *call.backend;
  const float* p = call.params;
  const MixerWeights& w = *call.weights;
  const int64_t bt = int64_t{call.batch} * call.seq_len;
  const int64_t c = config_.d_model, hd = config_.qk_dim();
  be.LinearForward(ln, p + w[kQProj], q_pre_, bt, c, hd, false);
  be.LinearForward(ln, p + w[kKProj], k_pre_, bt, c, hd, false);
  be.LinearForward(ln, p + w[kVProj], v_, bt, c, hd, false);
  if (tails == nullptr) {
    be.CausalConvForward(q_pre_, p + w[kQConv], q_, call.batch, call.seq_len, hd,
                         config_.conv_width, call.doc_start);
    be.CausalConvForward(k_pre_, p + w[kKConv], k_, call.batch, call.seq_len, hd,
                         config_.conv_width, call.doc_start);
    return absl::OkStatus();
  }
  return tails->Convolve(q_pre_, p + w[kQConv], q_, k_pre_, p + w[kKConv], k_, call.batch,
                         call.seq_len, first_row);
}

void AttentionLayer::PlanScratch(BufferPlan& plan, int64_t bt) {
  const int64_t hd = config_.qk_dim();
  plan.acts.insert(plan.acts.end(), {{&scratch_.d_q, bt * hd},
                                     {&scratch_.d_k, bt * hd},
                                     {&scratch_.d_v, bt * hd},
                                     {&scratch_.d_pre, bt * hd}});
}

absl::StatusOr<double> AttentionLayer::Forward(const MixerCall& call, Act ln, Act o,
                                               const MesaSolve& /*solve*/) {
  absl::StatusOr<AttentionOps*> ops = ops_.For(*call.backend);
  if (!ops.ok()) return ops.status();
  if (absl::Status s = Project(call, ln, nullptr, 0); !s.ok()) return s;
  const AttnShape shape = Shape(call.batch, call.seq_len);
  for (Act x : {q_, k_}) {
    if (absl::Status s = (*ops)->Rotary(x, shape, {}, /*inverse=*/false); !s.ok()) return s;
  }
  if (absl::Status s = (*ops)->Forward({shape, q_, k_, v_, window_, call.doc_start}, o); !s.ok()) {
    return s;
  }
  o_ = o;
  last_seq_len_ = call.seq_len;
  return 0.0;  // no solve
}

absl::StatusOr<double> AttentionLayer::Backward(const MixerCall& call, Act ln, Act d_o, Act d_ln,
                                                const MesaSolve& /*solve*/) {
  const Scratch& s = scratch_;
  absl::StatusOr<AttentionOps*> ops = ops_.For(*call.backend);
  if (!ops.ok()) return ops.status();
  Backend& be = *call.backend;
  const float* p = call.params;
  float* g = call.grads;
  const MixerWeights& w = *call.weights;
  const int64_t bt = int64_t{call.batch} * call.seq_len;
  const int64_t c = config_.d_model, hd = config_.qk_dim();
  const AttnShape shape = Shape(call.batch, call.seq_len);
  if (absl::Status st = (*ops)->Backward({shape, q_, k_, v_, window_, call.doc_start}, o_, d_o,
                                         s.d_q, s.d_k, s.d_v);
      !st.ok()) {
    return st;
  }
  struct QkPath {
    Act pre, d_rotated;
    int64_t conv_w, proj;
  };
  bool first = true;  // the first product into d_ln overwrites it
  for (const QkPath& path :
       {QkPath{q_pre_, s.d_q, w[kQConv], w[kQProj]}, QkPath{k_pre_, s.d_k, w[kKConv], w[kKProj]}}) {
    // The rotation's backward is the inverse rotation: d(conv output) in place.
    if (absl::Status st = (*ops)->Rotary(path.d_rotated, shape, {}, /*inverse=*/true); !st.ok()) {
      return st;
    }
    be.ZeroActivations(s.d_pre, bt * hd);
    be.CausalConvBackward(path.pre, p + path.conv_w, path.d_rotated, s.d_pre, g + path.conv_w,
                          call.batch, call.seq_len, hd, config_.conv_width, call.doc_start);
    be.LinearBackward(ln, p + path.proj, s.d_pre, d_ln, g + path.proj, bt, c, hd,
                      /*accumulate_d_in=*/!first);
    first = false;
  }
  be.LinearBackward(ln, p + w[kVProj], s.d_v, d_ln, g + w[kVProj], bt, c, hd);
  return 0.0;
}

namespace {

// Zero-filled activations owned by a decoding state.
class DeviceActs {
 public:
  DeviceActs(Backend& backend, int64_t n)
      : backend_(backend), act_(backend.AllocateActivations(n)) {}
  ~DeviceActs() {
    if (act_) backend_.Free(act_.ptr);
  }
  DeviceActs(const DeviceActs&) = delete;
  DeviceActs& operator=(const DeviceActs&) = delete;
  Act get() const { return act_; }

 private:
  Backend& backend_;
  Act act_;
};

// Per sequence: the tokens seen, the KV cache and the convolution tails.
struct AttentionState final : MixerState {
  AttentionState(Backend& backend, int rows, const ModelConfig& config, int64_t capacity)
      : backend(backend),
        qk_dim(config.qk_dim()),
        capacity(capacity),
        k(std::make_unique<DeviceActs>(backend, rows * capacity * qk_dim)),
        v(std::make_unique<DeviceActs>(backend, rows * capacity * qk_dim)),
        tails(backend, rows, config.conv_width, config.qk_dim()),
        lengths(rows, 0) {}
  bool ok() const { return k->get() && v->get() && tails.ok(); }

  // Global attention: at least `need` slots per sequence, doubling, the cached rows kept.
  absl::Status Reserve(int64_t need) {
    if (need <= capacity) return absl::OkStatus();
    const int64_t grown = std::max(need, 2 * capacity);
    const int64_t rows = static_cast<int64_t>(lengths.size());
    auto new_k = std::make_unique<DeviceActs>(backend, rows * grown * qk_dim);
    auto new_v = std::make_unique<DeviceActs>(backend, rows * grown * qk_dim);
    if (!new_k->get() || !new_v->get()) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "attention KV cache of ", grown, " tokens for ", rows, " sequences does not fit"));
    }
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t n = std::min(lengths[r], capacity) * qk_dim;
      backend.CopyActivations(backend.ActAt(new_k->get(), r * grown * qk_dim),
                              backend.ActAt(k->get(), r * capacity * qk_dim), n);
      backend.CopyActivations(backend.ActAt(new_v->get(), r * grown * qk_dim),
                              backend.ActAt(v->get(), r * capacity * qk_dim), n);
    }
    k = std::move(new_k);
    v = std::move(new_v);
    capacity = grown;
    return absl::OkStatus();
  }

  // Rows [first_row, first_row + batch) hold no token yet: the last min(t, capacity) of the
  // `t` new keys and values of each row (k, v: [batch, t, H·D]) go to their slots, p % capacity.
  void StoreFresh(Act k_new, Act v_new, int batch, int64_t t, int first_row) {
    for (int r = 0; r < batch; ++r) {
      const int64_t row = first_row + r;
      // Tokens [first, t) in at most two runs of consecutive slots.
      for (int64_t p = std::max<int64_t>(0, t - capacity); p < t;) {
        const int64_t n = std::min(t - p, capacity - p % capacity);
        for (auto [cache, src] : {std::pair{k->get(), k_new}, std::pair{v->get(), v_new}}) {
          backend.CopyActivations(backend.ActAt(cache, (row * capacity + p % capacity) * qk_dim),
                                  backend.ActAt(src, (r * t + p) * qk_dim), n * qk_dim);
        }
        p += n;
      }
    }
  }

  // Per row, the slots its source uses (all of them once it has wrapped) and its length.
  void CopyRows(const std::vector<int32_t>& from, int first_to) override {
    for (size_t j = 0; j < from.size(); ++j) {
      const int64_t to = first_to + static_cast<int64_t>(j);
      const int64_t n = std::min(lengths[from[j]], capacity) * qk_dim;
      for (const auto& cache : {k.get(), v.get()}) {
        backend.CopyActivations(backend.ActAt(cache->get(), to * capacity * qk_dim),
                                backend.ActAt(cache->get(), from[j] * capacity * qk_dim), n);
      }
      lengths[to] = lengths[from[j]];
    }
    tails.CopyRows(from, first_to);
  }
  int64_t RowBytes() const override {
    return 2 * capacity * qk_dim * backend.activation_bytes() + tails.RowBytes();
  }

  Backend& backend;
  const int64_t qk_dim;
  int64_t capacity;  // slots per sequence: the window, or (global) what the longest row needs
  std::unique_ptr<DeviceActs> k, v;  // [rows, capacity, H, D], activation type
  ConvTails tails;
  std::vector<int64_t> lengths;  // tokens seen per sequence (the next token's position)
};

}  // namespace

absl::StatusOr<std::unique_ptr<MixerState>> AttentionLayer::NewState(Backend& backend, int rows) {
  auto state = std::make_unique<AttentionState>(
      backend, rows, config_, window_ > 0 ? int64_t{window_} : kInitialGlobalCapacity);
  if (!state->ok()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("attention KV cache for ", rows, " sequences does not fit"));
  }
  return state;
}

absl::StatusOr<double> AttentionLayer::ForwardFrom(const MixerCall& call, Act ln, Act o,
                                                   const MesaSolve& /*solve*/, MixerState& state,
                                                   int first_row) {
  absl::StatusOr<AttentionOps*> ops = ops_.For(*call.backend);
  if (!ops.ok()) return ops.status();
  auto& s = static_cast<AttentionState&>(state);
  if (absl::Status st = Project(call, ln, &s.tails, first_row); !st.ok()) return st;
  const std::span<int64_t> lengths = std::span(s.lengths).subspan(first_row, call.batch);
  const AttnShape shape = Shape(call.batch, call.seq_len);
  for (Act x : {q_, k_}) {
    if (absl::Status st = (*ops)->Rotary(x, shape, lengths, /*inverse=*/false); !st.ok()) {
      return st;
    }
  }
  if (window_ == 0) {
    const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
    if (absl::Status st = s.Reserve(longest + call.seq_len); !st.ok()) return st;
  }
  const AttnActs in{shape, q_, k_, v_, window_};
  if (std::all_of(lengths.begin(), lengths.end(), [](int64_t n) { return n == 0; })) {
    // A first piece (a prompt's prefill): the fused whole-sequence operator, then the keys and
    // values it leaves in the window into the cache.
    if (absl::Status st = (*ops)->Forward(in, o); !st.ok()) return st;
    s.StoreFresh(k_, v_, call.batch, call.seq_len, first_row);
  } else {
    const KvCacheView cache{
        .k = s.k->get(), .v = s.v->get(), .capacity = s.capacity, .lengths = s.lengths};
    if (absl::Status st = (*ops)->ForwardCached(in, cache, first_row, o); !st.ok()) return st;
  }
  for (int64_t& n : lengths) n += call.seq_len;
  return 0.0;  // no solve
}

double AttentionLayer::SolveFlopsPerToken(int /*cg_steps*/) const {
  // Per head and token, the forward's two products with the keys it sees (q k^T and P v, 2 D
  // multiply-adds each) and the backward's five (as FlashAttention-2 counts them): 7 * 2 * D
  // FLOPs per key seen, half the last sequence on average when causal, at most the window.
  const double t = static_cast<double>(last_seq_len_);
  const double keys = window_ > 0 ? std::min<double>(window_, (t + 1) / 2) : (t + 1) / 2;
  return 7.0 * 2.0 * config_.head_dim * keys * config_.n_heads;
}

namespace {

// Registered with the layer factory (mixer_layer.h); the library is alwayslink. Both spellings
// are this layer, with the window ModelConfig::AttentionWindow gives each.
const bool kRegisteredAttention = RegisterMixerLayer(
    MixerKind::kAttention, [](const ModelConfig& config) -> std::unique_ptr<MixerLayer> {
      return std::make_unique<AttentionLayer>(config,
                                              config.AttentionWindow(MixerKind::kAttention));
    });
const bool kRegisteredSwa = RegisterMixerLayer(
    MixerKind::kSwa, [](const ModelConfig& config) -> std::unique_ptr<MixerLayer> {
      return std::make_unique<AttentionLayer>(config, config.AttentionWindow(MixerKind::kSwa));
    });

}  // namespace

}  // namespace mesa::model
