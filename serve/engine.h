// The serving engine (docs/serving.md): continuous batching of completion requests over one
// MesaNet. A pool of `slots` decoding rows advances one token per step for every running request
// at once; between steps, waiting requests are admitted and their prompts prefilled in pieces of
// `chunk` tokens (one piece per step while others decode, so a long prompt never stalls them),
// in a staging row, then moved into a free slot. A prefix cache of state snapshots
// (serve/prefix_cache.h) lets a prompt resume after a prefix seen before.
//
// One thread (the engine's) owns the model; callers Submit requests from any thread and read each
// one's events from its RequestStream.
//
// Batch invariance: the decoding step always advances all `slots` rows with the same shapes, each
// row's arithmetic is its own (no reduction crosses rows), prompts are prefilled alone in pieces at
// fixed positions, and each row's token is chosen (on the device: Backend::SoftcapSample) from its
// own logits with its own settings and a draw that depends only on (seed, draw): a request's tokens
// do not depend on what else runs beside it.
#ifndef MESANET_SERVE_ENGINE_H_
#define MESANET_SERVE_ENGINE_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "model/backend/backend.h"
#include "model/config/job_config.h"
#include "model/inference/sampler.h"
#include "model/mixers/mixer_layer.h"
#include "model/net/mesanet.h"
#include "model/tokenizer/tokenizer.h"
#include "serve/prefix_cache.h"
#include "serve/serve_metrics.h"
#include "serve/text_release.h"

namespace mesa::serve {

struct EngineOptions {
  int slots = 8;       // requests decoded together
  int chunk = 1024;    // prefill piece (tokens)
  int max_queue = 64;  // requests waiting for a slot; more are refused (ResourceExhausted)
  // Bytes of prefix state snapshots (0: no cache), as rows of the decoding state. Models with
  // global attention get none: their KV caches grow with the context in every row, snapshots
  // included, so the bytes would not stay bounded.
  int64_t cache_bytes = 0;
  int cache_stride = 1024;  // snapshots at multiples of this (a multiple of chunk) ...
  // ... and at each prompt's last multiple of chunk.
};

struct EngineRequest {
  std::vector<int32_t> prompt;  // token ids without the leading BOS (added); not empty
  int max_tokens = 16;          // 0: score the prompt only (needs prompt_logprobs)
  model::SamplingOptions sampling;
  std::vector<std::string> stop;  // text; the completion ends before the first one it contains
  model::MesaSolve solve;
  bool prompt_logprobs = false;  // report log p of every prompt token (OpenAI's echo + logprobs)
  int top_logprobs = 0;          // also the most likely alternatives at each position (0..5)
};

struct TopLogprob {
  int32_t token = 0;
  double logprob = 0;
};

struct EngineEvent {
  enum class Kind { kPrompt, kText, kFinished, kError };
  Kind kind = Kind::kText;
  // kPrompt: per prompt token, log p(token | BOS and the tokens before it); kText: the released
  // tokens' log-probabilities (piece.logprobs). With top_logprobs, the alternatives per token.
  std::vector<double> prompt_logprobs;
  std::vector<std::vector<TopLogprob>> top;
  Released piece;                 // kText
  std::string finish_reason;      // kFinished: "stop" | "length" | "eos"
  int64_t completion_tokens = 0;  // kFinished
  double cg_steps_mean = 0;       // kFinished: per generated token, over solving layers' heads
  int64_t cached_tokens = 0;      // kFinished: prompt positions the snapshot covered
  absl::Status error;             // kError (the last event)
};

// One request's events, in order, ending with kFinished or kError.
class RequestStream {
 public:
  explicit RequestStream(absl::Time submitted) : submitted_(submitted) {}
  // The next event, or nullopt after `timeout` without one.
  std::optional<EngineEvent> Next(absl::Duration timeout);
  // The client went away: the engine drops the request (and frees its slot) before its next step.
  void Cancel();
  bool cancelled() const;
  absl::Time submitted() const { return submitted_; }

 private:
  friend class Engine;
  void Push(EngineEvent event);

  const absl::Time submitted_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<EngineEvent> events_;
  bool cancelled_ = false;
};

class Engine {
 public:
  // Plans the model twice on one parameter buffer — `slots` rows of one token (decoding) and one
  // row of `chunk` tokens (prefill) — and a decoding state of slots + 1 staging + snapshot rows + 1
  // clear rows; `params` are the model's (host). `tokenizer` and `metrics` (may
  // be null) must outlive the engine. Starts the engine's thread.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(
      const model::ModelConfig& config, const std::vector<float>& params, model::Backend* backend,
      const model::Tokenizer* tokenizer, const EngineOptions& options, ServeMetrics* metrics);
  ~Engine();  // Stop()s
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request (checked against the model: tokens in the vocabulary, options as the request
  // parser leaves them). ResourceExhausted when the queue is full, Unavailable once stopping.
  absl::StatusOr<std::shared_ptr<RequestStream>> Submit(EngineRequest request);
  // Ends every request still queued or running with Unavailable and joins the thread.
  void Stop();

  struct Load {
    int queued = 0, running = 0, slots = 0;
  };
  Load load() const;
  const EngineOptions& options() const { return options_; }
  // Bytes of one row of the decoding state (prefix snapshots cost this much each), and how many
  // snapshots the cache holds.
  int64_t state_row_bytes() const { return state_row_bytes_; }
  int cache_rows() const { return cache_.rows(); }

 private:
  struct Active;
  Engine(std::unique_ptr<model::MesaNet> net, const model::Tokenizer* tokenizer,
         const EngineOptions& options, int cache_rows, ServeMetrics* metrics);
  void Run();
  // One round: drop cancelled requests, admit one, run one prefill piece, one decoding step.
  // False when there was nothing to do.
  bool Round();
  void Finish(Active& a, const std::string& reason);
  void Fail(Active& a, const absl::Status& status);
  // Admits queued requests (see Admit's comment in engine.cc); `decoding` counts the slots in use.
  void Admit(int& decoding);
  // Moves `a` into `slot`, whose state row holds its prompt: it decodes from the next step.
  void StartDecoding(std::unique_ptr<Active> a, int slot, int& decoding);
  // The longest cached snapshot of a prefix of a's prompt at a piece boundary (so that the pieces
  // after it are those a run without the cache makes); `whole_only`: of the whole prompt only.
  std::optional<PrefixCache::Hit> LookupPrefix(const Active& a, bool whole_only);
  // Starts a's state in `row` from `hit` (or the clear row) and counts its admission.
  absl::Status Resume(Active& a, const std::optional<PrefixCache::Hit>& hit, int row);
  absl::Status PrefillPiece(Active& a);
  absl::Status DecodeStep();
  void ResetIdleRows();
  std::vector<TopLogprob> TopOf(const float* row, int k) const;
  // The engine thread's time since the last Mark goes to `phase` (ServeMetrics::EngineSeconds).
  enum class Phase { kAdmit, kPrefill, kDecode, kEmit, kIdle };
  void Mark(Phase phase);

  std::unique_ptr<model::MesaNet> net_;          // the decoding step: slots rows of one token
  std::unique_ptr<model::MesaNet> prefill_net_;  // prefill pieces: one row of `chunk` tokens,
                                                 // on net_'s parameters (declared after it)
  std::unique_ptr<model::DecodeState> state_;
  const model::Tokenizer* tokenizer_;
  const EngineOptions options_;
  ServeMetrics* metrics_;
  int staging_row_ = 0, clear_row_ = 0;
  int64_t state_row_bytes_ = 0;
  PrefixCache cache_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Active>> queue_;  // guarded by mu_
  bool stopping_ = false;                      // guarded by mu_
  int running_ = 0;                            // guarded by mu_ (prefilling + decoding)

  // The engine thread's own.
  std::unique_ptr<Active> prefilling_;
  std::vector<std::unique_ptr<Active>> slots_;  // [slots], null where free
  std::vector<int> idle_steps_;                 // per slot, steps run while free
  model::MesaSolve decode_solve_;
  std::vector<float> logits_;
  std::vector<prometheus::Counter*> phase_seconds_;  // by Phase (with metrics)
  absl::Time phase_start_ = absl::Now();
  std::thread thread_;
};

}  // namespace mesa::serve

#endif  // MESANET_SERVE_ENGINE_H_
