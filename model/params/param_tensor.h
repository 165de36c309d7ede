// One tensor of the model's parameters: its name, shape, place in the parameter buffer, whether
// AdamW decays it and how it starts (docs/math.md §4).
#ifndef MESANET_MODEL_PARAMS_PARAM_TENSOR_H_
#define MESANET_MODEL_PARAMS_PARAM_TENSOR_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace mesa::model {

enum class InitKind {
  kOnes,  // norm weights
  kZeros,
  kFanIn,      // N(0, init_scale^2 / fan_in)
  kConstant,   // every entry init_value (Mesa's λ parameters: λ = 1 at init)
  kGammaBias,  // sigmoid(bias) spread over [0.9, 0.99] across heads (slow forgetting at init)
  // The RG-LRU's decay parameter p (softplus(p) = -log a, docs/math.md §8.8), per channel:
  kRgLruDecay,       // a² uniform in [0.9², 0.999²] (the released recurrentgemma code)
  kRgLruDecayPaper,  // a^8 uniform in [0.9, 0.999] (the Griffin paper's text)
  kLinspace,         // init_value .. init_scale evenly over the entries (mLSTM's forget bias 3..6)
  // Mamba-2, per head: dt_bias = softplus^-1(dt0) with dt0 log-uniform in [1e-3, 1e-1] (at least
  // 1e-4), and A_log = log A with A uniform in [1, 16] (docs/math.md §8.10).
  kSsmDtBias,
  kSsmALog,
};

struct ParamTensor {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;
  int64_t size = 0;
  // Only matrices of projections decay (not embeddings, λ, biases, norms).
  bool weight_decay = false;
  InitKind init = InitKind::kZeros;
  int64_t fan_in = 1;
  float init_scale = 1.0f;
  float init_value = 0.0f;  // kConstant
};

// Offsets of a layer's mixer tensors in the parameter buffer, in slots that the mixer numbers
// itself (its own enum; model/mixers/<mixer>/); -1 in slots it does not fill.
class MixerWeights {
 public:
  static constexpr int kSlots = 16;
  MixerWeights() { offsets_.fill(-1); }
  int64_t operator[](int slot) const { return offsets_[slot]; }
  int64_t& operator[](int slot) { return offsets_[slot]; }

 private:
  std::array<int64_t, kSlots> offsets_;
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_PARAMS_PARAM_TENSOR_H_
