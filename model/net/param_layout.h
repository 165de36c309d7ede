// Where every model parameter lives in the one contiguous parameter buffer: the block's own
// tensors (embeddings, norms, output projection, MLP, head) laid out here, each layer's mixer
// tensors as its mixer declares them (model/mixers/mixer_params.h).
//
// Gradients and the AdamW moments use the same offsets in their own buffers. Tensor names and
// shapes are those of the public MesaNet Hugging Face checkpoints (docs/design.md §8); weights are
// nn.Linear's [out, in].
#ifndef MESANET_MODEL_NET_PARAM_LAYOUT_H_
#define MESANET_MODEL_NET_PARAM_LAYOUT_H_

#include <cstdint>
#include <vector>

#include "absl/strings/string_view.h"
#include "model/config/job_config.h"
#include "model/params/param_builder.h"
#include "model/params/param_tensor.h"

namespace mesa::model {

// Offsets of one layer's tensors in the parameter buffer: the block's, and its mixer's in the
// mixer's own slots.
struct LayerOffsets {
  int64_t attn_norm = -1, o_norm = -1, o_proj = -1, mlp_norm = -1, gate_proj = -1, up_proj = -1,
          down_proj = -1;
  MixerWeights mixer;
};

class ParamLayout {
 public:
  explicit ParamLayout(const ModelConfig& config);

  static constexpr int64_t kTensorAlign = ParamBuilder::kTensorAlign;
  // The buffer size including the gaps between tensors, and the number of parameters proper.
  int64_t total() const { return params_.total(); }
  int64_t num_values() const { return params_.num_values(); }
  const std::vector<ParamTensor>& tensors() const { return params_.tensors(); }
  int64_t embeddings() const { return embeddings_; }
  // The unembedding (lm_head) matrix: the embedding itself when tied (model.tie_embeddings),
  // else lm_head.weight, the last tensor.
  int64_t head() const { return head_; }
  // Rows of the unembedding GEMM: vocab_size rounded up to a multiple of 64 (50257 -> 50304, as
  // llm.c: cuBLASLt runs the lm_head ~5x faster on an H200 than with the ragged width), or of 8
  // for small vocabularies (16-byte rows, little extra work). The rows past vocab_size follow the
  // embedding tensor in the buffer as zeros that belong to no tensor (never initialised, updated
  // or saved), so the lm_head runs as one aligned GEMM whose extra logits are exactly 0. They
  // follow the head: the embedding when tied, lm_head.weight when not.
  static int64_t PaddedVocab(int64_t vocab_size) {
    const int64_t align = vocab_size >= 8192 ? 64 : 8;
    return (vocab_size + align - 1) / align * align;
  }
  int64_t padded_vocab() const { return padded_vocab_; }
  int64_t final_norm() const { return final_norm_; }
  const LayerOffsets& layer(int i) const { return layers_[i]; }
  // The offset of the tensor named `name`, or -1 when the model has none.
  int64_t OffsetOf(absl::string_view name) const;

  // Fills host memory with the initial values (docs/math.md §4), deterministically from `seed`.
  void Initialize(uint64_t seed, float* params) const;

 private:
  ParamBuilder params_;
  std::vector<LayerOffsets> layers_;
  int64_t embeddings_ = 0, head_ = 0, final_norm_ = 0, padded_vocab_ = 0;
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_NET_PARAM_LAYOUT_H_
