#include "serve/engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <span>
#include <utility>

#include "absl/strings/str_cat.h"
#include "model/generate/generator.h"

namespace mesa::serve {

using model::MesaSolve;

std::optional<EngineEvent> RequestStream::Next(absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout), [&] { return !events_.empty(); })) {
    return std::nullopt;
  }
  EngineEvent e = std::move(events_.front());
  events_.pop_front();
  return e;
}

void RequestStream::Push(EngineEvent event) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(event));
  }
  cv_.notify_all();
}

void RequestStream::Cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_ = true;
}

bool RequestStream::cancelled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cancelled_;
}

// A request inside the engine.
struct Engine::Active {
  std::shared_ptr<RequestStream> stream;
  EngineRequest request;
  uint64_t draws = 0;  // tokens chosen so far: the sampler's draw index (model/inference/sampler.h)
  TextRelease release;
  // BOS and the prompt: the prefill runs seq[0, size - 1); the last prompt token is read by the
  // first decoding step.
  std::vector<int32_t> seq;
  int64_t prefilled = 0;
  int64_t cached = 0;  // positions resumed from a snapshot
  int slot = -1;
  int32_t next = 0;
  int64_t generated = 0;
  double cg_sum = 0;
  std::vector<std::vector<TopLogprob>> top;  // per generated token (top_logprobs > 0)
  size_t top_sent = 0;
  absl::Time last_token;
  int64_t prefill_length() const { return static_cast<int64_t>(seq.size()) - 1; }
};

namespace {

// The key of a solver setting in the prefix cache: states differ between settings.
uint64_t ModeKey(const MesaSolve& solve) {
  uint32_t tol_bits;
  std::memcpy(&tol_bits, &solve.tolerance, sizeof tol_bits);
  return (static_cast<uint64_t>(static_cast<uint32_t>(solve.max_steps)) << 32) | tol_bits;
}

bool SameSolve(const MesaSolve& a, const MesaSolve& b) {
  return a.max_steps == b.max_steps && a.tolerance == b.tolerance;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(
    const model::ModelConfig& config, const std::vector<float>& params, model::Backend* backend,
    const model::Tokenizer* tokenizer, const EngineOptions& options, ServeMetrics* metrics) {
  if (options.slots < 1 || options.chunk < 1 || options.max_queue < 0 || options.cache_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("slots ", options.slots, " and chunk ", options.chunk,
                     " must be >= 1, max_queue and prefix cache bytes >= 0"));
  }
  if (options.cache_stride < options.chunk || options.cache_stride % options.chunk != 0) {
    return absl::InvalidArgumentError(absl::StrCat("prefix cache stride ", options.cache_stride,
                                                   " must be a multiple of the chunk ",
                                                   options.chunk));
  }
  if (tokenizer == nullptr) return absl::InvalidArgumentError("the engine needs a tokenizer");
  // Two plans over one parameter buffer: the decoding step (every slot, one token) and the prefill
  // piece (one row, `chunk` tokens); activations for slots + chunk tokens, not slots x chunk.
  absl::StatusOr<std::unique_ptr<model::MesaNet>> net =
      model::MesaNet::Create(config, backend, options.slots, 1);
  if (!net.ok()) return net.status();
  if (static_cast<int64_t>(params.size()) != (*net)->num_params()) {
    return absl::InvalidArgumentError(absl::StrCat("parameters: ", params.size(), " values for a ",
                                                   (*net)->num_params(), "-parameter model"));
  }
  (*net)->SetParamsFromHost(params.data());
  absl::StatusOr<std::unique_ptr<model::MesaNet>> prefill_net =
      model::MesaNet::Create(config, backend, 1, options.chunk, net->get());
  if (!prefill_net.ok()) return prefill_net.status();
  // Snapshot rows: the cache's bytes over one row's (measured on a state of one row).
  absl::StatusOr<std::unique_ptr<model::DecodeState>> one_row = (*net)->NewDecodeState(1);
  if (!one_row.ok()) return one_row.status();
  const int64_t row_bytes = (*one_row)->RowBytes();
  const bool global_attention = config.LayersOf(model::MixerKind::kAttention) > 0 &&
                                config.AttentionWindow(model::MixerKind::kAttention) == 0;
  const int cache_rows =
      global_attention || row_bytes <= 0
          ? 0
          : static_cast<int>(std::min<int64_t>(options.cache_bytes / row_bytes, 1 << 16));
  std::unique_ptr<Engine> engine(
      new Engine(*std::move(net), tokenizer, options, cache_rows, metrics));
  engine->prefill_net_ = *std::move(prefill_net);
  engine->state_row_bytes_ = row_bytes;
  // Rows: the slots, the staging row, the snapshots, and one that stays clear (resets others).
  engine->staging_row_ = options.slots;
  engine->clear_row_ = options.slots + 1 + cache_rows;
  absl::StatusOr<std::unique_ptr<model::DecodeState>> state =
      engine->net_->NewDecodeState(engine->clear_row_ + 1);
  if (!state.ok()) return state.status();
  engine->state_ = *std::move(state);
  if (metrics != nullptr) metrics->slots.Set(options.slots);
  engine->thread_ = std::thread([e = engine.get()] { e->Run(); });
  return engine;
}

Engine::Engine(std::unique_ptr<model::MesaNet> net, const model::Tokenizer* tokenizer,
               const EngineOptions& options, int cache_rows, ServeMetrics* metrics)
    : net_(std::move(net)),
      tokenizer_(tokenizer),
      options_(options),
      metrics_(metrics),
      cache_(cache_rows, options.slots + 1),
      slots_(options.slots),
      idle_steps_(options.slots, 0) {
  if (metrics_ != nullptr) {
    for (const char* phase : {"admit", "prefill", "decode", "emit", "idle"}) {
      phase_seconds_.push_back(&metrics_->EngineSeconds(phase));
    }
  }
}

Engine::~Engine() { Stop(); }

void Engine::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Engine::Load Engine::load() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {static_cast<int>(queue_.size()), running_, options_.slots};
}

absl::StatusOr<std::shared_ptr<RequestStream>> Engine::Submit(EngineRequest request) {
  const model::ModelConfig& config = net_->config();
  if (request.prompt.empty()) return absl::InvalidArgumentError("the prompt is empty");
  for (int32_t t : request.prompt) {
    if (t < 0 || t >= config.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "prompt token ", t, " is outside the vocabulary [0, ", config.vocab_size, ")"));
    }
  }
  if (request.max_tokens < 0 || (request.max_tokens == 0 && !request.prompt_logprobs)) {
    return absl::InvalidArgumentError("max_tokens must be >= 1 (0 only with echo and logprobs)");
  }
  if (absl::Status s = model::ValidateSamplingOptions(request.sampling); !s.ok()) return s;
  absl::StatusOr<TextRelease> release = TextRelease::Create(request.stop);
  if (!release.ok()) return release.status();
  auto stream = std::make_shared<RequestStream>(absl::Now());
  auto active = std::unique_ptr<Active>(new Active{
      .stream = stream,
      .request = std::move(request),
      .release = *std::move(release),
  });
  active->seq.push_back(config.bos_token);
  active->seq.insert(active->seq.end(), active->request.prompt.begin(),
                     active->request.prompt.end());
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return absl::UnavailableError("the server is shutting down");
    if (static_cast<int>(queue_.size()) >= options_.max_queue) {
      return absl::ResourceExhaustedError(absl::StrCat("the queue is full (", options_.max_queue,
                                                       " requests wait for a slot); retry later"));
    }
    queue_.push_back(std::move(active));
    if (metrics_ != nullptr) metrics_->queue_depth.Set(static_cast<double>(queue_.size()));
  }
  cv_.notify_all();
  return stream;
}

void Engine::Run() {
  while (true) {
    bool worked = Round();
    std::unique_lock<std::mutex> lock(mu_);
    if (stopping_) break;
    if (!worked) {
      // Nothing runs: sleep until a request comes (or a cancelled one may be dropped).
      cv_.wait_for(lock, std::chrono::milliseconds(50));
      lock.unlock();
      Mark(Phase::kIdle);
    }
  }
  // Shutting down: every request still here ends with Unavailable.
  const absl::Status gone = absl::UnavailableError("the server is shutting down");
  std::deque<std::unique_ptr<Active>> queued;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queued.swap(queue_);
  }
  for (auto& a : queued) Fail(*a, gone);
  if (prefilling_ != nullptr) Fail(*prefilling_, gone);
  for (auto& a : slots_) {
    if (a != nullptr) Fail(*a, gone);
  }
}

void Engine::Finish(Active& a, const std::string& reason) {
  EngineEvent last;
  last.kind = EngineEvent::Kind::kText;
  last.piece = a.release.Flush();
  if (!last.piece.text.empty() || !last.piece.tokens.empty()) {
    for (size_t i = 0; i < last.piece.tokens.size() && a.top_sent < a.top.size(); ++i) {
      last.top.push_back(a.top[a.top_sent++]);
    }
    a.stream->Push(std::move(last));
  }
  EngineEvent done;
  done.kind = EngineEvent::Kind::kFinished;
  done.finish_reason = reason;
  done.completion_tokens = static_cast<int64_t>(a.release.tokens().size());
  done.cg_steps_mean = a.generated > 0 ? a.cg_sum / static_cast<double>(a.generated) : 0.0;
  done.cached_tokens = a.cached;
  a.stream->Push(std::move(done));
  if (metrics_ != nullptr) metrics_->Finished(reason).Increment();
}

void Engine::Fail(Active& a, const absl::Status& status) {
  EngineEvent e;
  e.kind = EngineEvent::Kind::kError;
  e.error = status;
  a.stream->Push(std::move(e));
  if (metrics_ != nullptr) metrics_->Finished("error").Increment();
}

std::vector<TopLogprob> Engine::TopOf(const float* row, int k) const {
  const int vocab = net_->config().vocab_size;
  std::vector<int32_t> ids(vocab);
  std::iota(ids.begin(), ids.end(), 0);
  k = std::min(k, vocab);
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
    return row[a] > row[b] || (row[a] == row[b] && a < b);
  });
  std::vector<TopLogprob> out;
  const std::span<const float> logits(row, vocab);
  for (int i = 0; i < k; ++i) out.push_back({ids[i], model::LogSoftmaxAt(logits, ids[i])});
  return out;
}

std::optional<PrefixCache::Hit> Engine::LookupPrefix(const Active& a, bool whole_only) {
  // Echo needs every position's logits: no snapshot.
  if (a.request.prompt_logprobs || cache_.rows() == 0) return std::nullopt;
  const int64_t length = a.prefill_length();
  std::vector<int64_t> lengths;
  if (whole_only) {
    if (length % options_.chunk == 0) lengths.push_back(length);
  } else {
    for (int64_t p = options_.chunk; p <= length; p += options_.chunk) lengths.push_back(p);
  }
  if (lengths.empty()) return std::nullopt;
  return cache_.Lookup(a.seq, lengths, ModeKey(a.request.solve));
}

absl::Status Engine::Resume(Active& a, const std::optional<PrefixCache::Hit>& hit, int row) {
  if (metrics_ != nullptr) {
    metrics_->prompt_tokens.Increment(static_cast<double>(a.request.prompt.size()));
    if (!a.request.prompt_logprobs && cache_.rows() > 0) {
      (hit ? metrics_->cache_hits : metrics_->cache_misses).Increment();
    }
    if (hit) metrics_->cached_prompt_tokens.Increment(static_cast<double>(hit->length));
  }
  a.prefilled = a.cached = hit ? hit->length : 0;
  return net_->CopyDecodeRows(*state_, {hit ? hit->row : clear_row_}, row);
}

absl::Status Engine::PrefillPiece(Active& a) {
  const int64_t length = a.prefill_length();
  const int64_t begin = a.prefilled;
  const int n = static_cast<int>(std::min<int64_t>(options_.chunk, length - begin));
  const bool logits = a.request.prompt_logprobs;
  absl::StatusOr<model::ForwardStats> s = prefill_net_->Advance(
      a.seq.data() + begin, 1, n, a.request.solve, *state_, staging_row_, logits);
  if (!s.ok()) return s.status();
  if (!s->finite) return absl::InternalError("non-finite values in the prefill");
  if (logits) {
    // Position j's logits give log p(seq[j + 1]): the prompt token at j.
    prefill_net_->CopyLogitsToHost(&logits_);
    const int vocab = net_->config().vocab_size;
    EngineEvent e;
    e.kind = EngineEvent::Kind::kPrompt;
    for (int j = 0; j < n; ++j) {
      float* row = logits_.data() + int64_t{j} * vocab;
      model::SoftCapLogits(net_->config().logit_softcap, std::span<float>(row, vocab));
      e.prompt_logprobs.push_back(
          model::LogSoftmaxAt(std::span<const float>(row, vocab), a.seq[begin + j + 1]));
      if (a.request.top_logprobs > 0) e.top.push_back(TopOf(row, a.request.top_logprobs));
    }
    a.stream->Push(std::move(e));
  }
  a.prefilled += n;
  // Snapshots at multiples of the stride and at the prompt's last multiple of the chunk.
  const int64_t p = a.prefilled;
  if (p % options_.chunk == 0 && (p % options_.cache_stride == 0 || p + options_.chunk > length)) {
    if (std::optional<int> row = cache_.Insert(a.seq, p, ModeKey(a.request.solve))) {
      if (absl::Status c = net_->CopyDecodeRows(*state_, {staging_row_}, *row); !c.ok()) return c;
      if (metrics_ != nullptr) metrics_->cache_entries.Set(cache_.entries());
    }
  }
  return absl::OkStatus();
}

absl::Status Engine::DecodeStep() {
  const model::ModelConfig& config = net_->config();
  const int rows = options_.slots;
  std::vector<int32_t> tokens(rows, config.bos_token);  // free slots read BOS
  // Every row's next token is chosen on the device (free slots: greedy, ignored); only requests
  // that want alternatives read their logits row back and choose on the host. Each row's choice
  // depends only on its own logits and settings, whatever the others are (batch invariance).
  std::vector<model::SamplingRow> sampling(rows);
  bool any_host = false;
  for (int r = 0; r < rows; ++r) {
    if (slots_[r] == nullptr) continue;
    const Active& a = *slots_[r];
    tokens[r] = a.next;
    const model::SamplingOptions& o = a.request.sampling;
    sampling[r] = {.temperature = o.temperature,
                   .top_k = o.top_k,
                   .top_p = o.top_p,
                   .seed = o.seed,
                   .draw = a.draws};
    any_host = any_host || a.request.top_logprobs > 0;
  }
  const absl::Time start = absl::Now();
  absl::StatusOr<model::ForwardStats> s =
      net_->Advance(tokens.data(), rows, 1, decode_solve_, *state_, 0);
  if (!s.ok()) return s.status();
  if (!s->finite) return absl::InternalError("non-finite values in a decoding step");
  std::vector<int32_t> device_tokens;
  std::vector<float> device_logprobs;
  net_->SampleFromLogits(sampling, &device_tokens, &device_logprobs);
  const int vocab = config.vocab_size;
  if (any_host) net_->CopyLogitsToHost(&logits_);
  const absl::Time now = absl::Now();
  if (metrics_ != nullptr) metrics_->decode_step.Observe(absl::ToDoubleSeconds(now - start));
  Mark(Phase::kDecode);

  // Each row's CG steps: the mean over the solving layers' heads.
  auto row_cg = [&](int r) {
    const std::vector<int32_t> by_head =
        model::RowHeadCgSteps(config, *s, r, decode_solve_.max_steps);
    return by_head.empty() ? 0.0
                           : std::accumulate(by_head.begin(), by_head.end(), 0.0) /
                                 static_cast<double>(by_head.size());
  };

  for (int r = 0; r < rows; ++r) {
    if (slots_[r] == nullptr) continue;
    Active& a = *slots_[r];
    model::SampledToken chosen{device_tokens[r], device_logprobs[r]};
    const float* row = any_host ? logits_.data() + int64_t{r} * vocab : nullptr;
    if (a.request.top_logprobs > 0) {
      model::SoftCapLogits(config.logit_softcap,
                           std::span<float>(logits_.data() + int64_t{r} * vocab, vocab));
      // With alternatives, the token and its log-probability come from the same host computation
      // as theirs (model::SampleToken).
      absl::StatusOr<model::SampledToken> sampled =
          model::SampleToken(std::span<const float>(row, vocab), a.request.sampling, a.draws);
      if (!sampled.ok()) return sampled.status();
      chosen = *sampled;
    }
    if (chosen.token < 0 || chosen.token >= vocab) {
      return absl::InternalError(absl::StrCat("the sampler chose token ", chosen.token));
    }
    ++a.draws;
    ++a.generated;
    a.cg_sum += row_cg(r);
    if (metrics_ != nullptr) {
      metrics_->generated_tokens.Increment();
      if (a.generated == 1) {
        metrics_->time_to_first_token.Observe(absl::ToDoubleSeconds(now - a.stream->submitted()));
      } else {
        metrics_->inter_token_latency.Observe(absl::ToDoubleSeconds(now - a.last_token));
      }
    }
    a.last_token = now;
    std::string reason;
    if (chosen.token == config.bos_token) {  // the document ends: so does the completion
      reason = "eos";
    } else {
      if (a.request.top_logprobs > 0) a.top.push_back(TopOf(row, a.request.top_logprobs));
      Released piece =
          a.release.Append(chosen.token, tokenizer_->Decode({chosen.token}), chosen.logprob);
      if (!piece.text.empty() || !piece.tokens.empty()) {
        EngineEvent e;
        e.kind = EngineEvent::Kind::kText;
        for (size_t i = 0; i < piece.tokens.size() && a.top_sent < a.top.size(); ++i) {
          e.top.push_back(a.top[a.top_sent++]);
        }
        e.piece = std::move(piece);
        a.stream->Push(std::move(e));
      }
      a.next = chosen.token;
      if (a.release.stopped()) {
        reason = "stop";
      } else if (a.generated >= a.request.max_tokens) {
        reason = "length";
      }
    }
    if (!reason.empty()) {
      Finish(a, reason);
      slots_[r].reset();
      idle_steps_[r] = 0;
    }
  }
  return absl::OkStatus();
}

void Engine::ResetIdleRows() {
  // A free slot still steps (on BOS); where a layer's state grows with the context (global
  // attention) it would grow without end, so free slots go back to the clear row now and then.
  constexpr int kIdleResetSteps = 64;
  for (int r = 0; r < options_.slots; ++r) {
    if (slots_[r] != nullptr) continue;
    if (++idle_steps_[r] >= kIdleResetSteps) {
      (void)net_->CopyDecodeRows(*state_, {clear_row_}, r);
      idle_steps_[r] = 0;
    }
  }
}

void Engine::Mark(Phase phase) {
  const absl::Time now = absl::Now();
  if (metrics_ != nullptr) {
    phase_seconds_[static_cast<int>(phase)]->Increment(absl::ToDoubleSeconds(now - phase_start_));
  }
  phase_start_ = now;
}

void Engine::Admit(int& decoding) {
  // The queue's head is admitted when a slot is free for it (or it needs none) and it solves as
  // the running requests do (one decoding step has one CG setting). One whose whole prompt is a
  // cached snapshot goes straight into its slot, and the next is looked at; any other starts its
  // prefill in the staging row, which holds one at a time (while it is taken, the queue waits).
  std::lock_guard<std::mutex> lock(mu_);
  while (!queue_.empty()) {
    if (queue_.front()->stream->cancelled()) {
      if (metrics_ != nullptr) metrics_->Finished("cancelled").Increment();
      queue_.pop_front();
      continue;
    }
    Active& head = *queue_.front();
    const bool needs_slot = head.request.max_tokens > 0;
    int free_slot = -1;
    for (int r = 0; r < options_.slots && free_slot < 0; ++r) {
      const bool held = prefilling_ != nullptr && prefilling_->slot == r;
      if (slots_[r] == nullptr && !held) free_slot = r;
    }
    if (needs_slot &&
        (free_slot < 0 || (decoding > 0 && !SameSolve(head.request.solve, decode_solve_)))) {
      break;
    }
    // One lookup per decision: while the staging row is taken only a whole-prompt snapshot can
    // admit the head (one prefix to hash), else the longest snapshot of any piece boundary.
    const std::optional<PrefixCache::Hit> hit = LookupPrefix(head, prefilling_ != nullptr);
    const bool whole = needs_slot && hit.has_value() && hit->length == head.prefill_length();
    if (!whole && prefilling_ != nullptr) break;
    std::unique_ptr<Active> a = std::move(queue_.front());
    queue_.pop_front();
    if (absl::Status s = Resume(*a, hit, whole ? free_slot : staging_row_); !s.ok()) {
      Fail(*a, s);
      continue;
    }
    if (whole) {
      StartDecoding(std::move(a), free_slot, decoding);
      continue;
    }
    prefilling_ = std::move(a);
    if (needs_slot) prefilling_->slot = free_slot;
  }
  if (metrics_ != nullptr) metrics_->queue_depth.Set(static_cast<double>(queue_.size()));
}

void Engine::StartDecoding(std::unique_ptr<Active> a, int slot, int& decoding) {
  if (decoding == 0) decode_solve_ = a->request.solve;
  a->slot = slot;
  a->next = a->request.prompt.back();
  idle_steps_[slot] = 0;
  slots_[slot] = std::move(a);
  ++decoding;
}

bool Engine::Round() {
  bool worked = false;
  // Requests whose client went away: dropped, their slots freed.
  for (int r = 0; r < options_.slots; ++r) {
    if (slots_[r] != nullptr && slots_[r]->stream->cancelled()) {
      if (metrics_ != nullptr) metrics_->Finished("cancelled").Increment();
      slots_[r].reset();
      worked = true;
    }
  }
  if (prefilling_ != nullptr && prefilling_->stream->cancelled()) {
    if (metrics_ != nullptr) metrics_->Finished("cancelled").Increment();
    prefilling_.reset();
  }
  int decoding = 0;
  for (int r = 0; r < options_.slots; ++r) decoding += slots_[r] != nullptr;
  Admit(decoding);
  Mark(Phase::kAdmit);
  // One piece of the prefill; a finished one moves into its slot.
  if (prefilling_ != nullptr) {
    worked = true;
    Active& a = *prefilling_;
    absl::Status s = a.prefilled < a.prefill_length() ? PrefillPiece(a) : absl::OkStatus();
    if (!s.ok()) {
      Fail(a, s);
      prefilling_.reset();
    } else if (a.prefilled >= a.prefill_length()) {
      if (a.request.max_tokens == 0) {
        Finish(a, "length");
        prefilling_.reset();
      } else if (absl::Status c = net_->CopyDecodeRows(*state_, {staging_row_}, a.slot); !c.ok()) {
        Fail(a, c);
        prefilling_.reset();
      } else {
        const int slot = a.slot;
        StartDecoding(std::move(prefilling_), slot, decoding);
      }
    }
  }
  Mark(Phase::kPrefill);
  if (decoding > 0) {
    worked = true;
    if (metrics_ != nullptr) metrics_->decode_rows.Observe(decoding);
    if (absl::Status s = DecodeStep(); !s.ok()) {
      // The step's state is not to be trusted: every decoding request fails.
      for (auto& a : slots_) {
        if (a != nullptr) {
          Fail(*a, s);
          a.reset();
        }
      }
    }
    ResetIdleRows();
    Mark(Phase::kEmit);
  }
  int in_slots = 0;
  for (const auto& a : slots_) in_slots += a != nullptr;
  const bool prefill_holds_slot = prefilling_ != nullptr && prefilling_->slot >= 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_ = in_slots + (prefilling_ != nullptr ? 1 : 0);
  }
  if (metrics_ != nullptr) metrics_->slots_in_use.Set(in_slots + (prefill_holds_slot ? 1 : 0));
  return worked;
}

}  // namespace mesa::serve
