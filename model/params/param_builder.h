// Hands out the parameter buffer: each tensor added gets the next aligned offset.
#ifndef MESANET_MODEL_PARAMS_PARAM_BUILDER_H_
#define MESANET_MODEL_PARAMS_PARAM_BUILDER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "model/params/param_tensor.h"

namespace mesa::model {

class ParamBuilder {
 public:
  // Tensors start kTensorAlign floats apart at least: 256 bytes, so that bf16 copies of the
  // weights (128-byte aligned then) and the float32 weights both meet cuBLASLt's 16-byte
  // alignment for its fast kernels. The gaps are zero and belong to no tensor: never read,
  // decayed or saved.
  static constexpr int64_t kTensorAlign = 64;

  // A tensor whose entries start as `init` says; returns its offset.
  int64_t Add(std::string name, std::vector<int64_t> shape, bool weight_decay, InitKind init,
              int64_t fan_in = 1, float init_scale = 1.0f);
  // A tensor whose entries all start at `value`; returns its offset.
  int64_t AddConstant(std::string name, std::vector<int64_t> shape, bool weight_decay, float value);
  // A tensor whose entries run evenly from `from` to `to`; returns its offset.
  int64_t AddLinspace(std::string name, std::vector<int64_t> shape, bool weight_decay, float from,
                      float to);
  // `floats` after the last tensor that belong to none (the unembedding's padding rows).
  void AddUnowned(int64_t floats) { total_ += floats; }

  // The buffer size including gaps and unowned floats, and the number of parameters proper.
  int64_t total() const { return total_; }
  int64_t num_values() const { return values_; }
  const std::vector<ParamTensor>& tensors() const { return tensors_; }

 private:
  int64_t Append(ParamTensor tensor);

  std::vector<ParamTensor> tensors_;
  int64_t total_ = 0, values_ = 0;
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_PARAMS_PARAM_BUILDER_H_
