#include "model/params/param_builder.h"

#include <utility>

namespace mesa::model {

int64_t ParamBuilder::Append(ParamTensor t) {
  t.size = 1;
  for (int64_t d : t.shape) t.size *= d;
  total_ = (total_ + kTensorAlign - 1) / kTensorAlign * kTensorAlign;
  t.offset = total_;
  total_ += t.size;
  values_ += t.size;
  tensors_.push_back(std::move(t));
  return tensors_.back().offset;
}

int64_t ParamBuilder::Add(std::string name, std::vector<int64_t> shape, bool weight_decay,
                          InitKind init, int64_t fan_in, float init_scale) {
  ParamTensor t;
  t.name = std::move(name);
  t.shape = std::move(shape);
  t.weight_decay = weight_decay;
  t.init = init;
  t.fan_in = fan_in;
  t.init_scale = init_scale;
  return Append(std::move(t));
}

int64_t ParamBuilder::AddConstant(std::string name, std::vector<int64_t> shape, bool weight_decay,
                                  float value) {
  ParamTensor t;
  t.name = std::move(name);
  t.shape = std::move(shape);
  t.weight_decay = weight_decay;
  t.init = InitKind::kConstant;
  t.init_value = value;
  return Append(std::move(t));
}

int64_t ParamBuilder::AddLinspace(std::string name, std::vector<int64_t> shape, bool weight_decay,
                                  float from, float to) {
  ParamTensor t;
  t.name = std::move(name);
  t.shape = std::move(shape);
  t.weight_decay = weight_decay;
  t.init = InitKind::kLinspace;
  t.init_value = from;
  t.init_scale = to;
  return Append(std::move(t));
}

}  // namespace mesa::model
