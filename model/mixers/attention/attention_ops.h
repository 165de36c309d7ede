// The attention operator (kernels/attention/attention_op.h) and the rotary position embeddings on
// one layer's device buffers, as each backend runs them. Implementations: attention_ops_cpu.cc
// (the float32 CPU operator, or the float64 reference) and attention_ops_cuda.cc, registered by
// backend name (model/mixers/mixer_ops.h).
#ifndef MESANET_MODEL_MIXERS_ATTENTION_ATTENTION_OPS_H_
#define MESANET_MODEL_MIXERS_ATTENTION_ATTENTION_OPS_H_

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "model/backend/backend.h"

namespace mesa::model {

struct AttnShape {
  int64_t batch = 0, seq_len = 0, heads = 0, head_dim = 0;
  int64_t TokenElems() const { return batch * seq_len * heads * head_dim; }
};

// One layer's attention tensors, [B, T, H, D] in the backend's activation type, q and k already
// rotated. `window`: 0 = global causal, W = each token sees itself and the W - 1 before it.
struct AttnActs {
  AttnShape shape;
  Act q, k, v;
  int64_t window = 0;
  // Packed documents: [B*T] int32 on the backend, each query's document's first token, below
  // which it sees no key (MixerCall::doc_start); null: none.
  const int32_t* doc_start = nullptr;
};

// A layer's KV cache for decoding, [rows, capacity, H, D] each for keys (rotated) and values, in
// the backend's activation type. Row r holds the keys of its last min(lengths[r], capacity) tokens:
// token p in slot p % capacity. A sliding window of W keeps capacity = W (a ring buffer); global
// attention keeps capacity >= every row's length (the layer grows it).
struct KvCacheView {
  Act k, v;
  int64_t capacity = 0;
  std::span<const int64_t> lengths;  // host, per row: tokens seen before this call
};

// One instance per layer: the backward may reuse what the same instance's last forward kept.
class AttentionOps {
 public:
  static constexpr const char* kName = "attention";
  virtual ~AttentionOps() = default;
  // Rotary position embeddings in place (docs/math.md §8.3): token t of row b is turned by
  // position starts[b] + t (starts empty: every row starts at 0); `inverse` turns back by the
  // same angles, which is the rotation's backward.
  virtual absl::Status Rotary(Act x, const AttnShape& shape, std::span<const int64_t> starts,
                              bool inverse) = 0;
  // o [B,T,H,D] = causal softmax attention of the whole sequences.
  virtual absl::Status Forward(const AttnActs& in, Act o) = 0;
  // d_o → dq, dk, dv (overwritten), for the last Forward of the same inputs, whose output o is
  // still in `o`.
  virtual absl::Status Backward(const AttnActs& in, Act o, Act d_o, Act dq, Act dk, Act dv) = 0;
  // Decoding: for `in.shape.batch` sequences, the rows [first_row, first_row + batch) of
  // `cache`, the new tokens' keys and values go into the cache and each new query attends to the
  // keys of its own and the earlier tokens within the window. The caller advances the lengths.
  virtual absl::Status ForwardCached(const AttnActs& in, const KvCacheView& cache, int first_row,
                                     Act o) = 0;
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_MIXERS_ATTENTION_ATTENTION_OPS_H_
