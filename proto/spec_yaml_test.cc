#include "proto/spec_yaml.h"
#include <cstdlib>

#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace mesa {
namespace {

using ::testing::HasSubstr;

TEST(SpecYamlTest, ParsesNestedSpecWithShortEnumsAndLabels) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(R"(
name: tiny
type: train
priority: 5
resources: {gpus: 0, cpu_threads: 2}
labels: {team: lm, run: "7"}
model:
  vocab_size: 257
  d_model: 64
  mlp_mult: 3
  mixer: mesa
data:
  train_path: data/train_*.bin
optimizer: {lr: 3e-3, warmupSteps: 20}
training: {steps: 200, seed: 42}
)");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name(), "tiny");
  EXPECT_EQ(spec->type(), v1::JOB_TYPE_TRAIN);
  EXPECT_EQ(spec->priority(), 5);
  EXPECT_EQ(spec->resources().cpu_threads(), 2);
  EXPECT_EQ(spec->labels().at("run"), "7");
  EXPECT_EQ(spec->model().d_model(), 64);
  EXPECT_FLOAT_EQ(spec->model().mlp_mult(), 3.0f);
  EXPECT_EQ(spec->data().train_path(), "data/train_*.bin");
  EXPECT_FLOAT_EQ(spec->optimizer().lr(), 3e-3f);
  EXPECT_EQ(spec->optimizer().warmup_steps(), 20);  // JSON (camelCase) name accepted.
  EXPECT_EQ(spec->training().seed(), 42u);
}

// weight_decay, grad_clip and min_lr_ratio have explicit presence, so a 0 written in a
// job file stays a 0 through the JSON job file the agent hands the trainer (unset stays unset).
TEST(SpecYamlTest, ExplicitZerosKeepTheirPresence) {
  absl::StatusOr<v1::JobSpec> spec =
      ParseJobSpecYaml("optimizer: {lr: 1e-3, weight_decay: 0, grad_clip: 0}\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->optimizer().has_weight_decay());
  EXPECT_TRUE(spec->optimizer().has_grad_clip());
  EXPECT_FALSE(spec->optimizer().has_min_lr_ratio());
  std::string json;
  google::protobuf::util::JsonPrintOptions print;
  print.preserve_proto_field_names = true;
  ASSERT_TRUE(google::protobuf::util::MessageToJsonString(*spec, &json, print).ok());
  absl::StatusOr<v1::JobSpec> again = ParseJobSpecYaml(json);
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << json;
  EXPECT_TRUE(again->optimizer().has_weight_decay()) << json;
  EXPECT_EQ(again->optimizer().weight_decay(), 0.0f);
  EXPECT_TRUE(again->optimizer().has_grad_clip()) << json;
  EXPECT_FALSE(again->optimizer().has_min_lr_ratio()) << json;
  // The binary form (the coordinator's store, the worker API) keeps presence too.
  v1::JobSpec parsed;
  ASSERT_TRUE(parsed.ParseFromString(spec->SerializeAsString()));
  EXPECT_TRUE(parsed.optimizer().has_weight_decay());
  EXPECT_FALSE(parsed.optimizer().has_min_lr_ratio());
}

TEST(SpecYamlTest, UnknownKeyIsNamedWithPathAndSuggestion) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml("name: x\nmodel:\n  d_modle: 64\n");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(), HasSubstr("model.d_modle: unknown field"));
  EXPECT_THAT(spec.status().message(), HasSubstr("did you mean d_model"));
}

// mesactl submit --set: overrides change, add and replace fields before the spec is checked.
TEST(SpecYamlTest, OverridesEditTheFileBeforeItIsChecked) {
  const std::string file = R"(
name: tiny
type: train
model: {d_model: 64, layer_mixers: [mesa]}
training: {steps: 200}
)";
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(
      file, {"training.steps=50", "optimizer.lr=3e-4", "model.layer_mixers=[mesa, gla]",
             "labels.sweep=lr-3e-4", "name=tiny-2", "training.steps=60"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->training().steps(), 60);         // in order: the last one wins
  EXPECT_FLOAT_EQ(spec->optimizer().lr(), 3e-4f);  // a section the file does not have
  ASSERT_EQ(spec->model().layer_mixers_size(), 2);
  EXPECT_EQ(spec->model().layer_mixers(1), "gla");
  EXPECT_EQ(spec->model().d_model(), 64);  // the rest of the mapping stays
  EXPECT_EQ(spec->labels().at("sweep"), "lr-3e-4");
  EXPECT_EQ(spec->name(), "tiny-2");
  // An empty file takes overrides too.
  absl::StatusOr<v1::JobSpec> from_empty = ParseJobSpecYaml("", {"training.steps=5"});
  ASSERT_TRUE(from_empty.ok()) << from_empty.status();
  EXPECT_EQ(from_empty->training().steps(), 5);
}

TEST(SpecYamlTest, BadOverridesAreRefusedNamingThem) {
  const std::string file = "name: tiny\ntraining: {steps: 200}\n";
  for (const auto& [override_text, message] : std::vector<std::pair<std::string, std::string>>{
           {"training.steps", "no '='"},
           {"training..steps=3", "an empty key"},
           {"=3", "an empty key"},
           {"training.steps=[1, 2", "not valid YAML"},
           {"name.first=x", "name is not a mapping"},
           {"training.steps=ten", "training.steps"},  // the type check of a whole file
           {"training.stepz=10", "did you mean steps"},
           {"training.steps=\xff", "not valid UTF-8"}}) {
    absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(file, {override_text});
    ASSERT_FALSE(spec.ok()) << override_text;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << override_text;
    EXPECT_THAT(std::string(spec.status().message()), HasSubstr(message)) << override_text;
  }
}

TEST(SpecYamlTest, WrongScalarTypeNamesField) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml("training:\n  steps: ten\n");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr("training.steps: expected an integer"));

  spec = ParseJobSpecYaml("model: {n_heads: 99999999999}\n");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr("model.n_heads: out of range"));
}

TEST(SpecYamlTest, BadEnumListsChoices) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml("type: finetune\n");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr("type: unknown value \"finetune\""));
  EXPECT_THAT(spec.status().message(), HasSubstr("JOB_TYPE_EVAL"));
}

TEST(SpecYamlTest, MalformedYamlAndWrongShapesAreErrors) {
  EXPECT_FALSE(ParseJobSpecYaml("name: [unclosed\n").ok());
  EXPECT_THAT(ParseJobSpecYaml("- a\n- b\n").status().message(), HasSubstr("expected a mapping"));
  EXPECT_THAT(ParseJobSpecYaml("model: 3\n").status().message(),
              HasSubstr("model: expected a mapping"));
  EXPECT_THAT(ParseJobSpecYaml("name: a\nname: b\n").status().message(), HasSubstr("twice"));
}

TEST(SpecYamlTest, EmptyFileIsEmptySpec) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml("");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name(), "");
}

TEST(SpecYamlTest, MissingFileIsNotFound) {
  EXPECT_EQ(LoadJobSpecFile("/nonexistent/job.yaml").status().code(), absl::StatusCode::kNotFound);
}

TEST(SpecYamlTest, RelativePathsBecomeAbsolute) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(R"(
data: {train_path: "data/a.bin, ./data/b.bin,/abs/c.bin", val_path: data/val.bin}
checkpoint: {dir: ckpt}
eval: {checkpoint: /runs/x, tasks: [{name: t, path: ./tasks/t.jsonl}]}
)");
  ASSERT_TRUE(spec.ok()) << spec.status();
  MakeSpecPathsAbsolute("/home/u/proj/", *spec);
  EXPECT_EQ(spec->eval().tasks(0).path(), "/home/u/proj/tasks/t.jsonl");
  EXPECT_EQ(spec->data().train_path(),
            "/home/u/proj/data/a.bin,/home/u/proj/data/b.bin,/abs/c.bin");
  EXPECT_EQ(spec->data().val_path(), "/home/u/proj/data/val.bin");
  EXPECT_EQ(spec->checkpoint().dir(), "/home/u/proj/ckpt");
  EXPECT_EQ(spec->checkpoint().init_from(), "");  // Unset stays unset.
  EXPECT_EQ(spec->eval().checkpoint(), "/runs/x");
  EXPECT_FALSE(spec->has_model());  // Nothing else is touched.
  // A pipeline's reference to another job's checkpoint is not a path.
  spec->mutable_eval()->set_checkpoint("job:previous");
  MakeSpecPathsAbsolute("/home/u/proj/", *spec);
  EXPECT_EQ(spec->eval().checkpoint(), "job:previous");
}

TEST(SpecYamlTest, GenerationPathsBecomeAbsolute) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(R"(
type: generate
generate: {checkpoint: ckpt/run, prompts: ["a"], temperature: 0}
)");
  ASSERT_TRUE(spec.ok()) << spec.status();
  MakeSpecPathsAbsolute("/home/u/proj", *spec);
  EXPECT_EQ(spec->generate().checkpoint(), "/home/u/proj/ckpt/run");
  EXPECT_EQ(spec->generate().encoder_json(), "");   // Unset stays unset.
  EXPECT_TRUE(spec->generate().has_temperature());  // 0 is a choice (greedy), kept as set
  EXPECT_FALSE(spec->has_checkpoint());
}

TEST(SpecYaml, TextThatIsNotUtf8OrTooLargeIsRefusedNotFatal) {
  // Regression: mesactl and mesa-train aborted (rc 134) on a Latin-1 byte in a job file.
  auto latin1 = ParseJobSpecYaml("name: \"caf\xE9\"\ntype: train\n");
  ASSERT_FALSE(latin1.ok());
  EXPECT_EQ(latin1.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(latin1.status().message().find("not valid UTF-8 (byte 10)"), std::string::npos)
      << latin1.status();
  auto big = ParseJobSpecYaml(std::string(kMaxJobFileBytes + 1, '#'));
  EXPECT_EQ(big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ParseJobSpecYaml("name: \"caf\xC3\xA9\"\ntype: train\n").ok());
}

TEST(SpecYaml, ADirectoryIsNotAnEmptyJobFile) {
  // Regression: mesactl sent an empty spec when given a directory.
  const char* tmp = std::getenv("TEST_TMPDIR");
  auto spec = LoadJobSpecFile(tmp != nullptr ? tmp : "/tmp");
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("not a regular file (a directory)"), std::string::npos)
      << spec.status();
}

TEST(SpecYaml, ValidUtf8ThatYamlDecodesIntoInvalidUtf8IsRefusedNotFatal) {
  // Found by fuzz/job_file_fuzzer: ASCII with control bytes made yaml-cpp hand back a string that
  // nlohmann::json refuses to print by throwing, and the uncaught exception aborted the process.
  const std::string input(
      "name: x\x1d"
      "el8 [1, 2]}__\x01\x00______________\x0a",
      38);
  auto spec = ParseJobSpecYaml(input);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << spec.status();
}

}  // namespace
}  // namespace mesa
