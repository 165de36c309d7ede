// A layer's sequence mixer as a module: from the block's normalised input `ln` [B*T, d_model] to
// the per-head outputs `o` [B*T, H*D] that the block then normalises per head and projects back
// (model/net/mesanet.cc). Adding a mixer is adding one implementation of this interface that
// registers itself (RegisterMixerLayer), a row in spec/mixers.h and its operator under kernels/;
// the block, the residual stream and the MLP stay as they are.
#ifndef MESANET_MODEL_MIXERS_MIXER_LAYER_H_
#define MESANET_MODEL_MIXERS_MIXER_LAYER_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/common/limits.h"
#include "model/backend/backend.h"
#include "model/config/job_config.h"
#include "model/params/param_tensor.h"

namespace mesa::model {

// The test-time compute of the mixers that solve (Mesa): fixed CG steps (training) or a tolerance
// with a maximum (evaluation). Mixers without a solve ignore it.
struct MesaSolve {
  int max_steps = kernels::kDefaultCgSteps;
  float tolerance = 0.0f;
};

// Buffers to carve out of the model's two pools, planned once for the largest micro-batch.
struct BufferPlan {
  std::vector<std::pair<Act*, int64_t>> acts;       // activation type, element counts
  std::vector<std::pair<float**, int64_t>> floats;  // float32
};

// What one call works on.
struct MixerCall {
  Backend* backend = nullptr;
  const float* params = nullptr;  // the model's parameter buffer
  float* grads = nullptr;         // the model's gradient buffer (backward)
  // Offsets of this layer's mixer tensors in params and grads (the mixer's own slots).
  const MixerWeights* weights = nullptr;
  int batch = 0;
  int seq_len = 0;
  // Packed documents (data.reset_at_bos; docs/math.md §8.6): per position, [batch * seq_len] int32
  // on the backend, the in-row index of the first token of its document (DocumentStarts).
  // Every mixer then behaves at a document's first token as at a sequence's first: recurrent
  // states reset, convolutions and attention see nothing of the earlier documents. Null: each row
  // is one sequence. Training and evaluation forwards only (not ForwardFrom, not with carries).
  const int32_t* doc_start = nullptr;
  // Context parallelism (training): the sequences are slices of longer ones. Forward: `carry_in`
  // is the recurrent state the slice continues from (the previous slice's final: the operator's
  // state and the short convolutions' last inputs; null: zero) and `carry_out` receives the
  // slice's own (null: not wanted). Backward: the same `carry_in` as the forward, `d_carry_out`
  // the gradient of the final state (null: zero), `d_carry_in` receives the gradient of
  // carry_in. Float32 [MixerLayer::CarryElems(batch)], distinct buffers.
  const float* carry_in = nullptr;
  float* carry_out = nullptr;
  const float* d_carry_out = nullptr;
  float* d_carry_in = nullptr;
  // A decoding step's CG steps per (sequence, head), [batch, H] int32 on the backend, where the
  // layer's operator counts them (optional; MesaNet reads them back after a recorded step).
  int32_t* head_cg_steps = nullptr;
  // Evaluation: where a layer that solves with CG writes each token's forward CG steps, [batch,
  // seq_len, H] int32 on the backend (optional; nothing is counted per token without it).
  int32_t* token_cg_steps = nullptr;
  // Decoding: the parameters are those of this layer's previous call, so tensors derived from
  // them alone (Mesa's λ) are still valid and need not be recomputed.
  bool params_as_before = false;
  // Decoding: the head norm that follows the mixer (RMSNorm over each head's D outputs with
  // weight [D] and eps into out), for a layer that can fuse it into its operator (the CUDA Mesa
  // step at one token); such a layer sets *done, and the caller runs the norm otherwise.
  struct HeadNorm {
    const float* weight = nullptr;
    float eps = 0.f;
    Act out;
    bool* done = nullptr;
  };
  HeadNorm head_norm;
};

// A layer's recurrent state for decoding, per sequence ("row"): what its operator carries from
// one token to the next (Mesa: H and G per head; DeltaNet: S per head) and the last inputs of the
// short convolutions. Its size does not depend on how many tokens it has seen, except for global
// attention's KV cache (model/mixers/attention/), which grows with the context.
class MixerState {
 public:
  virtual ~MixerState() = default;
  // Row first_to + j becomes what row from[j] is: the state after the same tokens (task scoring
  // continues several rows from one context's state). No source may lie among the destinations.
  // On the backend, one gather per buffer (Backend::GatherRows), no host round trip.
  virtual void CopyRows(const std::vector<int32_t>& from, int first_to) = 0;
  // Device bytes one row of this state takes now (attention's KV cache grows with the context).
  virtual int64_t RowBytes() const = 0;
};

// Zero-filled float32 device memory owned by a decoding state.
class DeviceFloats {
 public:
  DeviceFloats(Backend& backend, int64_t n) : backend_(backend), ptr_(backend.AllocateFloats(n)) {}
  ~DeviceFloats() {
    if (ptr_ != nullptr) backend_.Free(ptr_);
  }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  float* get() const { return ptr_; }
  // Of rows of `row_elems` values each: row first_to + j becomes a copy of row from[j].
  void CopyRows(int64_t row_elems, const std::vector<int32_t>& from, int first_to) {
    if (row_elems > 0 && !from.empty()) {
      backend_.GatherRows(ptr_, row_elems, from.data(), first_to,
                          static_cast<int64_t>(from.size()));
    }
  }

 private:
  Backend& backend_;
  float* ptr_;
};

// eval.internals: the operator inputs of a layer's last full-sequence Forward, on the host
// (kernels/mesa/mesa_types.h layouts).
struct SolveInputs {
  int64_t batch = 0, seq_len = 0, heads = 0, head_dim = 0;
  std::vector<float> k;                // [B,T,H,D]
  std::vector<float> log_gamma, beta;  // [B,T,H]
  std::vector<float> lambda;           // [H,D]
  // With document resets (data.reset_at_bos): each position's in-row document start, [B,T]
  // (DocumentStarts); empty when each row is one sequence.
  std::vector<int32_t> doc_start;
};

class MixerLayer {
 public:
  virtual ~MixerLayer() = default;
  // The buffers this layer keeps from its forward for its backward.
  virtual void Plan(BufferPlan& plan, int64_t bt) = 0;
  // The buffers its backward needs only while it runs (gradients w.r.t. its intermediate
  // tensors). The model lays every layer's scratch over the same memory: one layer's backward
  // runs at a time, and nothing in them survives it.
  virtual void PlanScratch(BufferPlan& plan, int64_t bt) {}
  // ln → o. Returns the mean CG steps per token (0 for mixers without a solve). InvalidArgument
  // with "non-finite" in the message when an input is not finite (the step is to be skipped).
  virtual absl::StatusOr<double> Forward(const MixerCall& call, Act ln, Act o,
                                         const MesaSolve& solve) = 0;
  // d_o → d_ln (overwritten) and this layer's parameter gradients (accumulated), for the last
  // Forward. Returns the mean CG steps of the backward solve.
  virtual absl::StatusOr<double> Backward(const MixerCall& call, Act ln, Act d_o, Act d_ln,
                                          const MesaSolve& solve) = 0;
  // Decoding. A state for `rows` sequences, each as before its first token (zero states, zero
  // convolution inputs).
  virtual absl::StatusOr<std::unique_ptr<MixerState>> NewState(Backend& backend, int rows) = 0;
  // ln → o for call.seq_len new tokens of call.batch sequences, which are the rows
  // [first_row, first_row + call.batch) of `state`: continues from those rows and leaves them
  // advanced past the new tokens (prefill of a prompt, in pieces of any length, or one decoding
  // step). Nothing is kept for a Backward. Returns the mean CG steps per token.
  virtual absl::StatusOr<double> ForwardFrom(const MixerCall& call, Act ln, Act o,
                                             const MesaSolve& solve, MixerState& state,
                                             int first_row) = 0;
  // Whether a one-token ForwardFrom may be recorded once and replayed (Backend::BeginRecording):
  // false when it keeps host-side bookkeeping that a replay would skip, or changes its buffers
  // (attention: the KV cache's lengths, and global attention's growing cache).
  virtual bool StepRecordable() const { return true; }
  // The CG steps per (sequence, head), [batch, H], of the last ForwardFrom of one token when its
  // operator counted them (empty for mixers without a solve, or when not counted).
  virtual std::vector<int32_t> LastHeadCgSteps() const { return {}; }
  // FLOPs per token of the layer's solve beyond its projections (forward + backward), for MFU.
  virtual double SolveFlopsPerToken(int cg_steps) const = 0;
  // Floats of the state a slice of `batch` sequences carries to the next (MixerCall::carry_in);
  // -1 for mixers that cannot run context-parallel (attention: its state is the keys and values).
  virtual int64_t CarryElems(int batch) const { return -1; }
  // eval.internals: copies the gates, keys and Λ of the last Forward of `batch` x `seq_len` tokens
  // to `out`; false for mixers without them (only the Mesa operator's layers have them).
  virtual bool CopySolveInputsToHost(Backend& backend, int batch, int seq_len,
                                     SolveInputs* out) const {
    return false;
  }
};

// Each mixer's own library registers its layer from a static initialiser (alwayslink), so this
// file names no mixer: RegisterMixerLayer(MixerKind::kX, &MakeX) at namespace scope.
using MixerLayerFactory = std::unique_ptr<MixerLayer> (*)(const ModelConfig& config);
bool RegisterMixerLayer(MixerKind kind, MixerLayerFactory factory);

// The layer for `kind` in a model of `config`; nullptr when no linked library registered one.
std::unique_ptr<MixerLayer> MakeMixerLayer(MixerKind kind, const ModelConfig& config);

}  // namespace mesa::model

#endif  // MESANET_MODEL_MIXERS_MIXER_LAYER_H_
