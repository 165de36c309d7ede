// Small valid job specs for tests (testonly).
#ifndef MESANET_SPEC_TESTING_H_
#define MESANET_SPEC_TESTING_H_

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "gtest/gtest.h"
#include "mesa/v1/job.pb.h"

namespace mesa::spec {

// A tiny training job on `gpus` GPUs (0: one CPU rank) that the validator accepts.
inline mesa::v1::JobSpec ValidTrainSpec(const std::string& name = "tiny", int gpus = 1) {
  mesa::v1::JobSpec s;
  s.set_name(name);
  s.set_type(mesa::v1::JOB_TYPE_TRAIN);
  s.mutable_resources()->set_gpus(gpus);
  auto* m = s.mutable_model();
  m->set_vocab_size(257);
  m->set_d_model(64);
  m->set_n_layers(2);
  m->set_n_heads(2);
  m->set_head_dim(32);
  s.mutable_data()->set_train_path("/data/train_*.bin");
  s.mutable_data()->set_seq_len(128);
  s.mutable_data()->set_batch_size(8);
  s.mutable_optimizer()->set_lr(1e-3f);
  s.mutable_training()->set_steps(100);
  return s;
}

// The evaluation of that model's checkpoint.
inline mesa::v1::JobSpec ValidEvalSpec(const std::string& name = "tiny-eval") {
  mesa::v1::JobSpec s = ValidTrainSpec(name);
  s.set_type(mesa::v1::JOB_TYPE_EVAL);
  s.mutable_data()->clear_train_path();
  s.mutable_data()->set_val_path("/data/val_*.bin");
  s.mutable_optimizer()->clear_lr();
  s.mutable_training()->clear_steps();
  s.mutable_eval()->set_checkpoint("/ckpt/tiny");
  return s;
}

// Text from that model's checkpoint.
inline mesa::v1::JobSpec ValidGenerateSpec(const std::string& name = "tiny-generate") {
  mesa::v1::JobSpec s;
  s.set_name(name);
  s.set_type(mesa::v1::JOB_TYPE_GENERATE);
  s.mutable_resources()->set_gpus(1);
  s.mutable_generate()->set_checkpoint("/ckpt/tiny");
  s.mutable_generate()->add_prompts("Once upon a time");
  return s;
}

// The valid spec of the job type a numeric limit is walked with.
inline mesa::v1::JobSpec ValidSpecFor(unsigned applies_to) {
  return applies_to == 2   ? ValidEvalSpec()
         : applies_to == 4 ? ValidGenerateSpec()
                           : ValidTrainSpec();
}

// Sets a numeric field by dotted path to `value` (rounded for integer fields).
inline void SetNumeric(google::protobuf::Message& root, const std::string& path, double value) {
  using ::google::protobuf::FieldDescriptor;
  google::protobuf::Message* message = &root;
  std::vector<std::string> parts = absl::StrSplit(path, '.');
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    const FieldDescriptor* field = message->GetDescriptor()->FindFieldByName(parts[i]);
    ASSERT_NE(field, nullptr) << path;
    message = message->GetReflection()->MutableMessage(message, field);
  }
  const FieldDescriptor* field = message->GetDescriptor()->FindFieldByName(parts.back());
  ASSERT_NE(field, nullptr) << path;
  const auto* r = message->GetReflection();
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      r->SetInt32(message, field, static_cast<int32_t>(std::llround(value)));
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      r->SetInt64(message, field, std::llround(value));
      break;
    case FieldDescriptor::CPPTYPE_FLOAT:
      r->SetFloat(message, field, static_cast<float>(value));
      break;
    default:
      FAIL() << path << " is not an int32, int64 or float field";
  }
}

}  // namespace mesa::spec

#endif  // MESANET_SPEC_TESTING_H_
