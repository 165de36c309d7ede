// MesaNet: tied embedding (scaled by sqrt(d_model)), N pre-norm blocks
//   x += MesaMixer(RMSNorm(x)); x += SwiGLU(RMSNorm(x))
// final RMSNorm, tied unembedding, logits soft-capped, cross entropy that skips BOS targets.
//
// llm.c style: hand-written forward and backward over one contiguous parameter buffer and one
// contiguous gradient buffer; every activation the backward needs is planned and allocated once
// in Create() for the largest micro-batch. All math goes through a Backend (CPU or CUDA):
// activations are in the backend's ActivationType (Act), everything else is float32.
#ifndef MESANET_MODEL_NET_MESANET_H_
#define MESANET_MODEL_NET_MESANET_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "model/backend/backend.h"
#include "model/comm/communicator.h"
#include "model/config/job_config.h"
#include "model/mixers/mixer_layer.h"
#include "model/net/param_layout.h"

namespace mesa::model {

struct ForwardStats {
  double loss_sum = 0;       // Sum of per-token losses over non-BOS targets.
  int64_t loss_tokens = 0;   // Number of non-BOS targets.
  double cg_steps_mean = 0;  // Mean CG steps per token, averaged over layers (forward solve).
  bool finite = true;        // False when a non-finite value was met (step must be skipped).
  // Mean CG steps per token of each layer's forward solve (0 for mixers without a solve).
  std::vector<double> layer_cg_steps;
  // Advance of one token: per layer, the CG steps per (sequence, head) [batch, H] where the
  // layer's operator counted them (empty for the others, and for fixed steps on CUDA).
  std::vector<std::vector<int32_t>> layer_head_cg_steps;
};

// Every layer's recurrent state for decoding (MixerState), for up to `rows` sequences. Made by
// MesaNet::NewDecodeState; its size does not grow with the tokens it has seen (global attention
// layers excepted: their KV cache does).
class DecodeState {
 public:
  int rows() const { return rows_; }
  // Device bytes of one row over every layer, now (global attention's KV cache grows).
  int64_t RowBytes() const;

 private:
  friend class MesaNet;
  uint64_t id_ = 0;  // unique per state made (recorded steps name its buffers)
  int rows_ = 0;
  std::vector<std::unique_ptr<MixerState>> layers_;
  // CG steps of the last single-token step, [layers, rows, H] int32 on the backend: where
  // recorded tolerance steps leave them for one read-back.
  struct Freer {
    Backend* backend;
    void operator()(int32_t* p) const { backend->Free(p); }
  };
  std::unique_ptr<int32_t, Freer> cg_steps_{nullptr, Freer{nullptr}};
};

// Context parallelism (docs/distributed.md): the model's sequences are slices along time of
// longer ones, each slice on its own rank. Before each mixer layer's forward the slice receives the
// layer's final recurrent state from the previous slice's rank and afterwards sends its own to the
// next; the backward sends the gradient of each initial state back the same way. Ranks are in
// `comm`; -1: no such neighbour (the first or the last slice).
struct ContextParallel {
  Communicator* comm = nullptr;
  int prev = -1;
  int next = -1;
};

class MesaNet {
 public:
  // Plans and allocates parameters, gradients and activations for micro-batches of up to
  // `max_batch` sequences of `seq_len` tokens. ResourceExhausted when the plan does not fit.
  // With `share_params` (a net of the same config on the same backend, which must outlive this
  // one): this net uses that net's parameter buffer and has no gradients — for decoding beside it
  // with another plan (mesa-serve's prefill pieces and its decoding step); Backward refuses.
  static absl::StatusOr<std::unique_ptr<MesaNet>> Create(const ModelConfig& config,
                                                         Backend* backend, int max_batch,
                                                         int seq_len,
                                                         MesaNet* share_params = nullptr);
  ~MesaNet();
  MesaNet(const MesaNet&) = delete;
  MesaNet& operator=(const MesaNet&) = delete;

  const ModelConfig& config() const { return config_; }
  // ModelConfig::reset_at_bos from the next Forward on (a resumed run takes its checkpoint's).
  void set_reset_at_bos(bool on) { config_.reset_at_bos = on; }
  const ParamLayout& layout() const { return layout_; }
  int64_t num_params() const { return layout_.total(); }
  Backend* backend() const { return backend_; }
  // Device buffers.
  float* params() { return params_; }
  float* grads() { return grads_; }
  // Bytes of the two activation pools: activations (Backend::activation_bytes() per element)
  // plus the float32 buffers (norms' rstd, gates, lambda, q*, losses and their gradients).
  int64_t activation_bytes_total() const {
    return activation_elements_ * backend_->activation_bytes() + 4 * float_elements_;
  }
  // The same in float32 equivalents (activation_bytes_total() / 4), for callers sizing in floats.
  int64_t activation_floats() const { return activation_bytes_total() / 4; }
  // Row stride of the logits buffer and width of the tied-unembedding GEMMs: the padded
  // vocabulary (ParamLayout::padded_vocab(): 50257 -> 50304, as llm.c), so the lm_head runs as
  // aligned GEMMs. The extra columns hold x . 0 = 0 (the zero rows
  // after the embedding tensor) and the cross-entropy never reads or writes them, so their
  // gradient rows stay 0. Parameters, gradients and checkpoints keep [vocab, d_model].
  int64_t logits_ld() const { return layout_.padded_vocab(); }

  void InitializeParams(uint64_t seed);
  void SetParamsFromHost(const float* host);
  void GetParamsToHost(float* host) const;
  void GetGradsToHost(float* host) const;
  void ZeroGrads();

  // Runs the forward for `batch` sequences (host tokens/targets, [batch, seq_len]). Keeps the
  // activations for Backward. `solve` picks fixed-step (training) or tolerance CG (evaluation).
  absl::StatusOr<ForwardStats> Forward(const int32_t* tokens, const int32_t* targets, int batch,
                                       const MesaSolve& solve);
  // Called by Backward with [offset, offset + n) of grads() as soon as the backward has queued
  // its last write to that range (on the backend's stream), so data-parallel training can start
  // reducing it while the rest of the backward runs. The ranges are disjoint, cover the whole
  // buffer, and come in the same order on every rank: the final norm, then each layer from the
  // last to the first, then the (tied) embedding. An error stops the backward and is returned.
  using GradsReadyFn = std::function<absl::Status(int64_t offset, int64_t n)>;

  // Accumulates d(loss_scale * loss_sum)/d(params) into grads() for the last Forward.
  // Returns the mean CG steps of the backward solve, or NaN (with a NaN in grads(), so that the
  // step is skipped) when the Mesa operator met a non-finite input; every range is still reported.
  absl::StatusOr<double> Backward(float loss_scale, const GradsReadyFn& on_grads_ready = nullptr);
  // Decoding. A state for `rows` sequences, each empty.
  absl::StatusOr<std::unique_ptr<DecodeState>> NewDecodeState(int rows);
  // The forward for `t` (1..seq_len) new tokens of each of `batch` sequences (host tokens
  // [batch, t]), which are the rows [first_row, first_row + batch) of `state`: continues from
  // those rows' states and leaves them past the new tokens. A prompt may come in pieces of any
  // length, one token at a time or in one call; the logits are those of the whole sequence's
  // forward at the same positions. The parameters must not change between Advance calls except
  // through SetParamsFromHost / InitializeParams (the backend's converted weights are reused).
  // Computes no loss and keeps nothing for Backward; the logits
  // ([batch * t, vocab]) are read with CopyLogitsToHost. stats.loss_* stay 0. With
  // `logits` false the final norm and the head are skipped (a prefill that only needs the
  // state); the logits are then not those of these tokens, and LossesOfLastAdvance refuses.
  absl::StatusOr<ForwardStats> Advance(const int32_t* tokens, int batch, int t,
                                       const MesaSolve& solve, DecodeState& state, int first_row,
                                       bool logits = true);
  // Row first_to + j of `state` becomes a copy of row from[j] in every layer (task scoring: several
  // continuations resume from one context's state). Every row must be the state's, and no source
  // among the destinations.
  absl::Status CopyDecodeRows(DecodeState& state, const std::vector<int32_t>& from, int first_to);
  // The losses of the last Advance's logits against host `targets` ([batch * t]; BOS targets are
  // not scored, 0): -log p of each target, on the backend, read back into `losses`.
  absl::Status LossesOfLastAdvance(const int32_t* targets, std::vector<float>* losses);
  // Whether single-token Advances may be recorded and replayed (on by default; tests compare).
  void set_record_steps(bool on) { record_steps_ = on; }

  // Evaluation (eval.cg_sweep): whether later Forwards keep each token's forward CG steps in
  // every layer that solves with CG (off by default: nothing is counted per token then).
  absl::Status KeepTokenCgSteps(bool on);
  // Those of the last Forward, [layers, batch, seq_len, H] (0 in layers without a solve).
  void CopyTokenCgStepsToHost(std::vector<int32_t>* steps) const;

  // eval.internals: layer `l`'s operator inputs of the last Forward (false: it has none).
  // With document resets also the Forward's document starts (SolveInputs::doc_start).
  bool CopySolveInputsToHost(int l, SolveInputs* out) const;

  // Per-position losses of the last Forward ([batch, seq_len], 0 on BOS targets).
  void CopyLossesToHost(std::vector<float>* losses) const;
  // Logits of the last Forward as float32 ([batch * seq_len, vocab_size], row padding dropped).
  // After Backward they hold d(loss)/d(logits) instead.
  void CopyLogitsToHost(std::vector<float>* logits) const;

  // Greedy choice for each logits row of the last Forward or Advance, on the backend (the logits
  // stay there): the token with the largest soft-capped logit and its log-probability.
  void GreedyFromLogits(std::vector<int32_t>* tokens, std::vector<float>* logprobs) const;
  // Sampling the same way: per logits row, the token `params[row]` draws (Backend::SoftcapSample;
  // params.size() must be the rows of the last Forward or Advance).
  void SampleFromLogits(const std::vector<SamplingRow>& params, std::vector<int32_t>* tokens,
                        std::vector<float>* logprobs) const;

  // FLOPs of one training token (forward + backward), without and with the CG iterations, for MFU.
  double TrainFlopsPerToken(int cg_steps) const;

  // Makes every later Forward and Backward a slice of context-parallel sequences (Advance is
  // unaffected). Every rank of the group must then call them in the same order with the same
  // batch. FailedPrecondition on backends without the state-passing kernels (CUDA, for now).
  absl::Status SetContextParallel(const ContextParallel& cp);

 private:
  // Per-layer tensors kept for the backward: activations (Act) and float32 buffers; the mixer
  // keeps its own.
  struct LayerActs {
    std::unique_ptr<MixerLayer> mixer;
    Act res_in, ln1, o, o_normed, res_mid, ln2, gate, up, h;
    float *ln1_rstd, *o_rstd, *ln2_rstd;
  };
  MesaNet(const ModelConfig& config, Backend* backend, int max_batch, int seq_len);
  absl::Status Plan();
  MixerCall CallFor(int layer, int batch, int t);
  // Embedding, every block and the logits of `batch` x `t` tokens already in tokens_; the mixers
  // continue from `state` rows [first_row, ...) when it is given.
  absl::Status RunLayers(int batch, int t, const MesaSolve& solve, DecodeState* state,
                         int first_row, ForwardStats* stats, bool logits = true);
  absl::Status CheckTokens(const int32_t* tokens, int64_t n) const;
  bool context_parallel() const { return cp_.comm != nullptr; }
  // Context parallelism, around layer l's mixer (mesanet_context.cc): receive the carried state
  // (gradient) before it and fill in the call; send the slice's own after it.
  absl::Status ReceiveCarry(int l, int batch, MixerCall& call);
  absl::Status SendCarry(int l, int batch);
  absl::Status ReceiveCarryGrad(int l, int batch, MixerCall& call);
  absl::Status SendCarryGrad(int l, int batch);
  // A slice whose layer `l` met a non-finite input still takes part in every later hand-over
  // (NaN states), so that no rank waits for one that never comes.
  absl::Status DrainForward(int l, int batch);
  absl::Status DrainBackward(int l, int batch);
  // A single-token Advance on a backend that records (CUDA graphs): the first call for (state,
  // rows, CG steps, tolerance) runs directly, the second is recorded and replayed, later ones
  // replay; in tolerance mode the CG counts are read back after each replay (one copy).
  // Returns false when the step ran the direct way (the caller runs it).
  absl::StatusOr<bool> AdvanceRecorded(int batch, const MesaSolve& solve, DecodeState& state,
                                       int first_row, ForwardStats* stats);
  // The CG stats of the last (replayed) step from state's counts: one copy to the host.
  void ReadBackCgSteps(int batch, const DecodeState& state, int first_row,
                       ForwardStats* stats) const;

  ModelConfig config_;
  ParamLayout layout_;
  Backend* backend_;
  int max_batch_, seq_len_;
  bool logits_current_ = false;  // the logits buffer holds the last Forward's or Advance's
  int batch_ = 0;                // of the last Forward or Advance
  int t_ = 0;                    // its tokens per sequence
  bool advanced_ = false;        // the last call was an Advance (no Backward may follow)
  // The backend's weight cache holds params() as they are: set by an Advance, cleared by a
  // Forward (an optimizer step may follow) and by SetParamsFromHost.
  bool weights_cached_ = false;
  // Recorded decoding steps by (state id, first row, batch, CG steps, tolerance): the recording
  // (-1 while seen once) and the stats of the recorded call. Off after a recording failed.
  struct RecordedStep {
    int recording = -1;
    ForwardStats stats;
  };
  std::map<std::tuple<uint64_t, int, int, int, float>, RecordedStep> recorded_steps_;
  bool record_steps_ = true;
  // Every layer's single-token step may be recorded (MixerLayer::StepRecordable), fixed at Create.
  bool steps_recordable_ = true;
  MesaSolve solve_;
  float* params_ = nullptr;
  float* grads_ = nullptr;  // null when the parameters are another net's
  MesaNet* share_params_ = nullptr;
  // The two planned pools, each sub-buffer starting 256-byte aligned.
  Act activations_;
  int64_t activation_elements_ = 0;
  float* floats_ = nullptr;
  int64_t float_elements_ = 0;
  int32_t* tokens_ = nullptr;
  int32_t* targets_ = nullptr;
  // config_.reset_at_bos: the last Forward's document starts (DocumentStarts of tokens_),
  // which its Backward also uses; none after an Advance (a prompt is one document). The host
  // copy they were computed in serves CopySolveInputsToHost without a read-back.
  int32_t* doc_start_ = nullptr;
  std::vector<int32_t> doc_start_host_;
  bool doc_starts_set_ = false;
  // KeepTokenCgSteps: [layers, max_batch, seq_len, H] int32 on the backend, or null.
  int32_t* token_cg_steps_ = nullptr;
  std::vector<LayerActs> acts_;
  Act res_final_, lnf_, logits_;
  float *lnf_rstd_ = nullptr, *losses_ = nullptr;
  // Backward scratch, reused by every layer.
  Act d_res_, d_ln_, d_h_, d_gate_, d_up_, d_onorm_, d_o_;
  // Context parallelism: each layer's received state (kept for its backward), and one buffer
  // each for the state sent on, the received gradient and the gradient sent back.
  ContextParallel cp_;
  std::vector<std::unique_ptr<DeviceFloats>> carry_in_;
  std::unique_ptr<DeviceFloats> carry_out_, d_carry_out_, d_carry_in_;
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_NET_MESANET_H_
