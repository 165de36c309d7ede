#include "coordinator/validation.h"

#include <cmath>

#include "coordinator/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mesa::coordinator {
namespace {

using ::testing::HasSubstr;

TEST(ValidationTest, ValidSpecsPass) {
  EXPECT_TRUE(ValidateJobSpec(ValidTrainSpec()).ok()) << ValidateJobSpec(ValidTrainSpec());
  mesa::v1::JobSpec eval;
  eval.set_name("eval-1");
  eval.set_type(mesa::v1::JOB_TYPE_EVAL);
  eval.mutable_eval()->set_checkpoint("/ckpt/latest");
  EXPECT_TRUE(ValidateJobSpec(eval).ok()) << ValidateJobSpec(eval);
}

TEST(ValidationTest, RangeErrorNamesFieldPathAndValue) {
  mesa::v1::JobSpec s = ValidTrainSpec();
  s.mutable_resources()->set_gpus(-3);
  absl::Status st = ValidateJobSpec(s);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "spec.resources.gpus: must be between 0 and 4096, got -3");
}

TEST(ValidationTest, SeveralProblemsAreJoined) {
  mesa::v1::JobSpec s = ValidTrainSpec();
  s.set_name("Bad_Name");
  s.set_priority(5000);
  s.mutable_training()->set_steps(0);
  s.mutable_data()->clear_train_path();
  s.mutable_model()->set_d_model(0);
  s.mutable_model()->set_mixer("transformer");
  s.mutable_optimizer()->set_beta2(1.5f);
  s.set_max_retries(101);
  std::string m(ValidateJobSpec(s).message());
  for (const char* path : {"spec.name:", "spec.priority:", "spec.training.steps:", "spec.data.train_path:",
                           "spec.model.d_model:", "spec.model.mixer:", "spec.optimizer.beta2:", "spec.max_retries:"}) {
    EXPECT_THAT(m, HasSubstr(path));
  }
  EXPECT_THAT(m, HasSubstr("; "));
  EXPECT_EQ(JobSpecProblems(s).size(), 8u) << m;
}

TEST(ValidationTest, TypeSpecificRequirements) {
  mesa::v1::JobSpec eval;
  eval.set_name("e");
  eval.set_type(mesa::v1::JOB_TYPE_EVAL);
  EXPECT_THAT(std::string(ValidateJobSpec(eval).message()), HasSubstr("spec.eval.checkpoint: required"));
  mesa::v1::JobSpec none = ValidTrainSpec();
  none.set_type(mesa::v1::JOB_TYPE_UNSPECIFIED);
  EXPECT_THAT(std::string(ValidateJobSpec(none).message()), HasSubstr("spec.type:"));
  mesa::v1::JobSpec cuda = ValidTrainSpec("c", 0);
  cuda.mutable_training()->set_device("cuda");
  EXPECT_THAT(std::string(ValidateJobSpec(cuda).message()), HasSubstr("spec.training.device:"));
  mesa::v1::JobSpec precision = ValidTrainSpec();
  precision.mutable_training()->set_precision("fp16");
  EXPECT_THAT(std::string(ValidateJobSpec(precision).message()),
              HasSubstr("spec.training.precision:"));
  mesa::v1::JobSpec bf16_cpu = ValidTrainSpec("c", 0);
  bf16_cpu.mutable_training()->set_precision("bf16");
  EXPECT_THAT(std::string(ValidateJobSpec(bf16_cpu).message()),
              HasSubstr("spec.training.precision: \"bf16\" needs a GPU"));
  mesa::v1::JobSpec fp32 = ValidTrainSpec("c", 0);
  fp32.mutable_training()->set_precision("fp32");
  EXPECT_TRUE(ValidateJobSpec(fp32).ok());
  mesa::v1::JobSpec labels = ValidTrainSpec();
  (*labels.mutable_labels())["-bad"] = "x";
  EXPECT_THAT(std::string(ValidateJobSpec(labels).message()), HasSubstr("spec.labels[\"-bad\"]"));
  mesa::v1::JobSpec nan = ValidTrainSpec();
  nan.mutable_optimizer()->set_lr(std::nanf(""));
  EXPECT_THAT(std::string(ValidateJobSpec(nan).message()), HasSubstr("spec.optimizer.lr:"));
}

TEST(ValidationTest, Names) {
  EXPECT_TRUE(IsValidName("a"));
  EXPECT_TRUE(IsValidName("mesa-small-2"));
  EXPECT_FALSE(IsValidName(""));
  EXPECT_FALSE(IsValidName("1abc"));
  EXPECT_FALSE(IsValidName("abc_d"));
  EXPECT_FALSE(IsValidName(std::string(64, 'a')));
  EXPECT_TRUE(IsValidName(std::string(63, 'a')));
  EXPECT_TRUE(IsValidIdentifier("node-1.example_2"));
  EXPECT_FALSE(IsValidIdentifier("a b"));
}

}  // namespace
}  // namespace mesa::coordinator
