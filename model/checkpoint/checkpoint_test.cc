#include "model/checkpoint/checkpoint.h"

#include <sys/stat.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "formats/checkpoint_layout.h"
#include "gtest/gtest.h"

namespace mesa::model {
namespace {

ModelConfig Tiny() {
  ModelConfig c;
  c.vocab_size = 257;
  c.d_model = 16;
  c.n_layers = 1;
  c.n_heads = 1;
  c.head_dim = 16;
  c.mlp_hidden = 32;
  return c;
}

std::string FreshRoot(const std::string& name) {
  const std::string root = std::string(getenv("TEST_TMPDIR")) + "/" + name;
  std::filesystem::remove_all(root);
  return root;
}

TEST(CheckpointTest, SavesLoadsFallsBackAndPrunes) {
  const ModelConfig config = Tiny();
  ParamLayout layout(config);
  const std::string root = FreshRoot("ckpt");
  std::vector<float> params(layout.total()), m(layout.total()), v(layout.total());
  for (int step = 1; step <= 4; ++step) {
    // Tensors only: the alignment gaps between them belong to no tensor and stay zero.
    for (const ParamTensor& t : layout.tensors()) {
      for (int64_t i = t.offset; i < t.offset + t.size; ++i) {
        params[i] = step + i * 1e-3f;
        m[i] = -step;
        v[i] = step * 2;
      }
    }
    TrainState state;
    state.step = step;
    state.data = {0, 100 * step, 0};
    state.seed = 9;
    auto dir = SaveCheckpoint(root, config, layout, params.data(), m.data(), v.data(), state, 2);
    ASSERT_TRUE(dir.ok()) << dir.status();
  }
  EXPECT_EQ(formats::ListStepDirs(root).size(), 2u);  // keep_last = 2
  auto loaded = LoadCheckpoint(root, config, layout, true);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->state.step, 4);
  EXPECT_EQ(loaded->state.data.offset, 400);
  EXPECT_EQ(loaded->params, params);
  EXPECT_TRUE(loaded->has_optimizer);
  EXPECT_EQ(loaded->exp_avg, m);
  EXPECT_EQ(loaded->exp_avg_sq, v);
  EXPECT_TRUE(loaded->skipped.empty());

  // Flip one byte of step 4's weights: detected, step 3 is used and the reason reported.
  const std::string model_file = root + "/" + formats::StepDirName(4) + "/model.safetensors";
  {
    std::fstream f(model_file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-3, std::ios::end);
    f.put('\x7f');
  }
  loaded = LoadCheckpoint(root, config, layout, true);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->state.step, 3);
  ASSERT_EQ(loaded->skipped.size(), 1u);
  EXPECT_NE(loaded->skipped[0].find("checksum"), std::string::npos) << loaded->skipped[0];

  // Truncate step 3's state.json too: nothing valid is left.
  std::filesystem::resize_file(root + "/" + formats::StepDirName(3) + "/state.json", 10);
  loaded = LoadCheckpoint(root, config, layout, true);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss);
  // The corrupt files were left as they were (nothing overwritten).
  EXPECT_TRUE(std::filesystem::exists(model_file));
}

TEST(CheckpointTest, AStateJsonFieldOfTheWrongTypeIsDataLossAndFallsBack) {
  // Found by fuzz/checkpoint_state_fuzzer: "format": 1 (or a number where the checksum string
  // belongs) threw out of LoadCheckpoint and aborted the trainer instead of falling back.
  const ModelConfig config = Tiny();
  ParamLayout layout(config);
  const std::string root = FreshRoot("ckpt-types");
  std::vector<float> params(layout.total(), 0.5f);
  for (int step = 1; step <= 2; ++step) {
    TrainState state;
    state.step = step;
    ASSERT_TRUE(
        SaveCheckpoint(root, config, layout, params.data(), nullptr, nullptr, state, 2).ok());
  }
  const std::string newest = root + "/" + formats::StepDirName(2) + "/state.json";
  for (const char* damaged :
       {R"({"format": 1})", R"({"format": "mesa-checkpoint-v1", "files": 7, "step": 2})"}) {
    std::ofstream(newest) << damaged;
    auto direct = LoadCheckpoint(root + "/" + formats::StepDirName(2), config, layout, true);
    EXPECT_EQ(direct.status().code(), absl::StatusCode::kDataLoss) << damaged;
    auto loaded = LoadCheckpoint(root, config, layout, true);
    ASSERT_TRUE(loaded.ok()) << damaged << ": " << loaded.status();
    EXPECT_EQ(loaded->state.step, 1);
  }
}

// data.reset_at_bos is recorded in state.json when known, and absent (nullopt) otherwise.
TEST(CheckpointTest, RecordsDocumentResets) {
  const ModelConfig config = Tiny();
  ParamLayout layout(config);
  const std::vector<float> params(layout.total());
  for (std::optional<bool> resets :
       {std::optional<bool>(true), std::optional<bool>(false), std::optional<bool>()}) {
    const std::string root = FreshRoot("resets");
    TrainState state;
    state.step = 1;
    state.reset_at_bos = resets;
    ASSERT_TRUE(
        SaveCheckpoint(root, config, layout, params.data(), nullptr, nullptr, state, 1).ok());
    auto loaded = LoadCheckpoint(root, config, layout, false);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(loaded->state.reset_at_bos, resets);
  }
}

TEST(CheckpointTest, RejectsADifferentArchitectureAndMissingDirs) {
  const ModelConfig config = Tiny();
  ParamLayout layout(config);
  const std::string root = FreshRoot("arch");
  std::vector<float> params(layout.total(), 0.5f);
  TrainState state;
  state.step = 1;
  ASSERT_TRUE(SaveCheckpoint(root, config, layout, params.data(), nullptr, nullptr, state, 3).ok());
  ModelConfig other = config;
  other.d_model = 32;
  auto loaded = LoadCheckpoint(root, other, ParamLayout(other), false);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kFailedPrecondition);
  auto missing = LoadCheckpoint(root + "/nope", config, layout, false);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  auto weights_only = LoadCheckpoint(root, config, layout, true);
  ASSERT_TRUE(weights_only.ok());
  EXPECT_FALSE(weights_only->has_optimizer);
}

TEST(CheckpointTest, LeftoverTemporaryDirectoriesAreRemoved) {
  // Regression: a trainer killed while saving left step_*.tmp.* behind for good.
  const ModelConfig config = Tiny();
  ParamLayout layout(config);
  const std::string root = FreshRoot("leftovers");
  std::filesystem::create_directories(root + "/step_00000007.tmp.12345/sub");
  std::ofstream(root + "/step_00000007.tmp.12345/model.safetensors") << "half";
  std::vector<float> params(layout.total(), 0.5f);
  TrainState state;
  state.step = 8;
  ASSERT_TRUE(SaveCheckpoint(root, config, layout, params.data(), nullptr, nullptr, state, 3).ok());
  EXPECT_FALSE(std::filesystem::exists(root + "/step_00000007.tmp.12345"));
  EXPECT_TRUE(std::filesystem::exists(root + "/step_00000008/state.json"));
}

TEST(CheckpointTest, RecordsEachLayersMixerAndRefusesAnotherList) {
  ModelConfig hybrid = Tiny();
  hybrid.n_layers = 2;
  hybrid.layer_mixers = {MixerKind::kGla, MixerKind::kMesa};
  ParamLayout layout(hybrid);
  const std::string root = FreshRoot("mixers");
  std::vector<float> params(layout.total(), 0.25f);
  TrainState state;
  state.step = 2;
  ASSERT_TRUE(SaveCheckpoint(root, hybrid, layout, params.data(), nullptr, nullptr, state, 3).ok());
  EXPECT_NE(ModelConfigJson(hybrid).find("\"layer_mixers\":[\"gla\",\"mesa\"]"), std::string::npos)
      << ModelConfigJson(hybrid);
  EXPECT_TRUE(LoadCheckpoint(root, hybrid, layout, false).ok());
  // The same tensors, another mixer list: a clear user error naming both models.
  ModelConfig swapped = hybrid;
  swapped.layer_mixers = {MixerKind::kMesa, MixerKind::kGla};
  auto loaded = LoadCheckpoint(root, swapped, layout, false);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(loaded.status().message().find("differs from the configured model"), std::string::npos)
      << loaded.status();
  ModelConfig uniform = hybrid;
  uniform.layer_mixers.clear();
  EXPECT_EQ(LoadCheckpoint(root, uniform, layout, false).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // Models with one mixer keep the format every earlier checkpoint has.
  EXPECT_EQ(ModelConfigJson(uniform).find("layer_mixers"), std::string::npos);
  EXPECT_NE(ModelConfigJson(uniform).find("\"mixer\":\"mesa\""), std::string::npos);
}

// Attention layers' window is part of the architecture: recorded, read back, and another window
// is refused. Checkpoints without attention keep their format (no "attention_window").
TEST(CheckpointTest, RecordsTheAttentionWindow) {
  ModelConfig hybrid = Tiny();
  hybrid.n_layers = 2;
  hybrid.layer_mixers = {MixerKind::kMesa, MixerKind::kSwa};
  hybrid.attention_window = 64;
  ParamLayout layout(hybrid);
  const std::string root = FreshRoot("window");
  std::vector<float> params(layout.total(), 0.5f);
  TrainState state;
  state.step = 1;
  ASSERT_TRUE(SaveCheckpoint(root, hybrid, layout, params.data(), nullptr, nullptr, state, 3).ok());
  auto d = DescribeCheckpoint(root);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->model.attention_window, 64);
  EXPECT_EQ(d->model.layer_mixers, hybrid.layer_mixers);
  ModelConfig other = hybrid;
  other.attention_window = 128;
  EXPECT_EQ(LoadCheckpoint(root, other, layout, false).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ModelConfigJson(Tiny()).find("attention_window"), std::string::npos);
}

// Hawk's recurrent width and decay initialisation are part of the architecture: recorded (only
// with Hawk layers), read back, and another width is refused.
TEST(CheckpointTest, RecordsHawksWidthAndInit) {
  ModelConfig hybrid = Tiny();
  hybrid.n_layers = 2;
  hybrid.layer_mixers = {MixerKind::kHawk, MixerKind::kMesa};
  hybrid.rnn_width = 2 * hybrid.n_heads * 5;
  hybrid.hawk_paper_init = true;
  ParamLayout layout(hybrid);
  const std::string root = FreshRoot("hawk");
  std::vector<float> params(layout.total(), 0.5f);
  TrainState state;
  state.step = 1;
  ASSERT_TRUE(SaveCheckpoint(root, hybrid, layout, params.data(), nullptr, nullptr, state, 3).ok());
  auto d = DescribeCheckpoint(root);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->model.rnn_width, hybrid.rnn_width);
  EXPECT_TRUE(d->model.hawk_paper_init);
  EXPECT_EQ(d->model.layer_mixers, hybrid.layer_mixers);
  EXPECT_TRUE(LoadCheckpoint(root, hybrid, layout, false).ok());
  ModelConfig other = hybrid;
  other.rnn_width = 4 * hybrid.n_heads * 5;
  EXPECT_EQ(LoadCheckpoint(root, other, ParamLayout(other), false).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ModelConfigJson(Tiny()).find("rnn_width"), std::string::npos);
}

// An untied head is part of the architecture: recorded (only when untied, so tied checkpoints
// keep their format), stored as lm_head.weight, read back; a tied job refuses it.
TEST(CheckpointTest, RecordsAnUntiedHead) {
  ModelConfig untied = Tiny();
  untied.tie_embeddings = false;
  ParamLayout layout(untied);
  const std::string root = FreshRoot("untied");
  std::vector<float> params(layout.total(), 0.0f);
  layout.Initialize(3, params.data());
  TrainState state;
  state.step = 1;
  ASSERT_TRUE(SaveCheckpoint(root, untied, layout, params.data(), nullptr, nullptr, state, 3).ok());
  auto d = DescribeCheckpoint(root);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_FALSE(d->model.tie_embeddings);
  auto loaded = LoadCheckpoint(root, untied, layout, false);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  for (int64_t i = 0; i < int64_t{untied.vocab_size} * untied.d_model; ++i) {
    ASSERT_EQ(loaded->params[layout.head() + i], params[layout.head() + i]) << i;
  }
  ModelConfig tied = Tiny();
  EXPECT_EQ(LoadCheckpoint(root, tied, ParamLayout(tied), false).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ModelConfigJson(tied).find("tie_embeddings"), std::string::npos);
  EXPECT_NE(ModelConfigJson(untied).find("\"tie_embeddings\":false"), std::string::npos);
}

// A checkpoint describes its own model, so tools can load it without the job spec; the
// description round-trips ModelConfigJson and skips a step whose state.json is damaged.
TEST(CheckpointTest, DescribesItsModelAndSpecWithoutAJobSpec) {
  ModelConfig hybrid = Tiny();
  hybrid.n_layers = 2;
  hybrid.layer_mixers = {MixerKind::kDeltaNet, MixerKind::kMesa};
  hybrid.gamma_cap = 0.125f;
  ParamLayout layout(hybrid);
  const std::string root = FreshRoot("describe");
  std::vector<float> params(layout.total(), 0.5f);
  for (int step : {3, 4}) {
    TrainState state;
    state.step = step;
    state.spec_json = R"({"name":"run","data":{"tokenizer":"byte"}})";
    ASSERT_TRUE(
        SaveCheckpoint(root, hybrid, layout, params.data(), nullptr, nullptr, state, 3).ok());
  }
  auto d = DescribeCheckpoint(root);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->step, 4);
  EXPECT_EQ(ModelConfigJson(d->model), ModelConfigJson(hybrid));
  EXPECT_NE(d->spec_json.find("\"tokenizer\":\"byte\""), std::string::npos) << d->spec_json;
  EXPECT_TRUE(LoadCheckpoint(d->dir, d->model, ParamLayout(d->model), false).ok());

  std::ofstream(root + "/" + formats::StepDirName(4) + "/state.json") << "{not json";
  d = DescribeCheckpoint(root);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->step, 3);
  EXPECT_EQ(DescribeCheckpoint(root + "/missing").status().code(), absl::StatusCode::kNotFound);
}

// Every tool opens checkpoints under one policy (OpenCheckpoint): a damaged
// newest candidate — bad checksum, empty or invalid state.json, NaN weights, a FIFO or a device
// where model.safetensors should be — is skipped with its reason, never silently, never waited on;
// a step directory named explicitly is not skipped.
TEST(CheckpointTest, OpenCheckpointSkipsDamagedCandidatesAndSaysWhy) {
  const ModelConfig config = Tiny();
  ParamLayout layout(config);
  const std::string root = FreshRoot("open_policy");
  std::vector<float> params(layout.total(), 0.25f);
  for (int step = 1; step <= 2; ++step) {
    TrainState state;
    state.step = step;
    ASSERT_TRUE(
        SaveCheckpoint(root, config, layout, params.data(), nullptr, nullptr, state, 5).ok());
  }
  const std::string newest = root + "/" + formats::StepDirName(2);
  const std::string model_file = newest + "/model.safetensors";
  const std::string state_file = newest + "/state.json";
  const std::string good_model = root + "/model.good", good_state = root + "/state.good";
  std::filesystem::copy_file(model_file, good_model);
  std::filesystem::copy_file(state_file, good_state);
  auto restore = [&] {
    std::filesystem::remove(model_file);
    std::filesystem::remove(state_file);
    std::filesystem::copy_file(good_model, model_file);
    std::filesystem::copy_file(good_state, state_file);
  };
  absl::StatusOr<OpenedCheckpoint> opened = OpenCheckpoint(root);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ(opened->description.step, 2);
  EXPECT_TRUE(opened->data.skipped.empty());

  auto expect_skipped = [&](const std::string& why, const std::string& damage) {
    absl::StatusOr<OpenedCheckpoint> o = OpenCheckpoint(root);
    ASSERT_TRUE(o.ok()) << damage << ": " << o.status();
    EXPECT_EQ(o->description.step, 1) << damage;
    ASSERT_EQ(o->data.skipped.size(), 1u) << damage;
    EXPECT_TRUE(absl::StrContains(o->data.skipped[0], formats::StepDirName(2)))
        << o->data.skipped[0];
    EXPECT_TRUE(absl::StrContains(o->data.skipped[0], why)) << damage << ": " << o->data.skipped[0];
    // Named explicitly, the damaged step is an error, not a fallback.
    absl::StatusOr<OpenedCheckpoint> explicit_step = OpenCheckpoint(newest);
    EXPECT_EQ(explicit_step.status().code(), absl::StatusCode::kDataLoss) << damage;
    restore();
  };
  {
    std::fstream f(model_file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-3, std::ios::end);
    f.put('\x7f');
  }
  expect_skipped("checksum", "a flipped byte");
  std::filesystem::resize_file(state_file, 0);
  expect_skipped("state.json", "an empty state.json");
  { std::ofstream(state_file, std::ios::trunc) << "{\"format\": 7}"; }
  expect_skipped("state.json", "an invalid state.json");
  std::filesystem::remove(model_file);
  ASSERT_EQ(mkfifo(model_file.c_str(), 0600), 0);
  expect_skipped("not a regular file (a FIFO)", "a FIFO");
  std::filesystem::remove(model_file);
  std::filesystem::create_symlink("/dev/zero", model_file);
  expect_skipped("not a regular file (a character device)", "a link to /dev/zero");
  // NaN weights with a valid checksum: saved as such, then refused when read.
  std::vector<float> nan_params = params;
  nan_params[layout.tensors()[0].offset + 3] = std::nanf("");
  TrainState state;
  state.step = 2;
  std::filesystem::remove_all(newest);
  ASSERT_TRUE(
      SaveCheckpoint(root, config, layout, nan_params.data(), nullptr, nullptr, state, 5).ok());
  absl::StatusOr<OpenedCheckpoint> o = OpenCheckpoint(root);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->description.step, 1);
  ASSERT_EQ(o->data.skipped.size(), 1u);
  EXPECT_TRUE(absl::StrContains(o->data.skipped[0],
                                "tensor " + layout.tensors()[0].name + ": element 3 is NaN"))
      << o->data.skipped[0];
}

}  // namespace
}  // namespace mesa::model
