// Where every MesaNet parameter lives in the one contiguous parameter buffer.
//
// Gradients and the AdamW moments use the same offsets in their own buffers. Tensor names and
// shapes are those of the public MesaNet Hugging Face checkpoints (docs/design.md §8); weights are
// nn.Linear's [out, in].
#ifndef MESANET_MODEL_NET_PARAM_LAYOUT_H_
#define MESANET_MODEL_NET_PARAM_LAYOUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "model/config/job_config.h"

namespace mesa::model {

enum class InitKind {
  kOnes,  // norm weights
  kZeros,
  kFanIn,      // N(0, scale^2 / fan_in)
  kLambda,     // lambda = 1 at init: p = log(expm1(1 - floor))
  kGammaBias,  // sigmoid(bias) spread over [0.9, 0.99] across heads (slow forgetting at init)
};

struct ParamTensor {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;
  int64_t size = 0;
  bool weight_decay =
      false;  // Only matrices of projections decay (not embedding, λ, biases, norms).
  InitKind init = InitKind::kZeros;
  int64_t fan_in = 1;
  float init_scale = 1.0f;
};

// Offsets of one block's tensors.
// Offsets of one layer's tensors in the parameter buffer; -1 for tensors its mixer does not have
// (λ outside Mesa and GLA, the γ projection in DeltaNet).
struct LayerOffsets {
  int64_t attn_norm = -1, q_proj = -1, k_proj = -1, v_proj = -1, q_conv = -1, k_conv = -1,
          a_weight = -1, a_bias = -1, b_weight = -1, b_bias = -1, lambda = -1, o_norm = -1,
          o_proj = -1, mlp_norm = -1, gate_proj = -1, up_proj = -1, down_proj = -1;
};

class ParamLayout {
 public:
  explicit ParamLayout(const ModelConfig& config);

  // Tensors start kTensorAlign floats apart at least (alignment for the GEMMs); total() is the
  // buffer size including the gaps, num_values() the number of parameters proper.
  static constexpr int64_t kTensorAlign = 64;
  int64_t total() const { return total_; }
  int64_t num_values() const { return values_; }
  const std::vector<ParamTensor>& tensors() const { return tensors_; }
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

  // Fills host memory with the initial values (docs/math.md §4), deterministically from `seed`.
  void Initialize(uint64_t seed, float* params) const;

 private:
  int64_t Add(std::string name, std::vector<int64_t> shape, bool decay, InitKind init,
              int64_t fan_in = 1, float scale = 1.0f);

  ModelConfig config_;
  std::vector<ParamTensor> tensors_;
  std::vector<LayerOffsets> layers_;
  int64_t embeddings_ = 0, head_ = 0, final_norm_ = 0, total_ = 0, values_ = 0, padded_vocab_ = 0;
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_NET_PARAM_LAYOUT_H_
