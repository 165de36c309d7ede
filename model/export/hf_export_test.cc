#include "model/export/hf_export.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "base/file_util.h"
#include "formats/safetensors.h"
#include "gtest/gtest.h"
#include "model/checkpoint/checkpoint.h"
#include "model/export/fla_config.h"
#include "model/export/hf_import.h"
#include "model/tokenizer/byte_tokenizer.h"
#include "model/tokenizer/hf_tokenizer.h"
#include "nlohmann/json.hpp"
#include "spec/tokenizer_record.h"
#include "spec/validate_job_spec.h"

namespace mesa::model {
namespace {

namespace fs = std::filesystem;
namespace st = mesa::safetensors;
using nlohmann::json;

constexpr char kTokenizer[] = "model/testdata/llama3_style_tokenizer.json";
constexpr char kFixture[] = "model/testdata/fla_mesa_net.json";

json ReadJson(const std::string& path) {
  absl::StatusOr<std::string> text = base::ReadFile(path);
  EXPECT_TRUE(text.ok()) << path;
  return json::parse(text.ok() ? *text : "null");
}

// A model FLA can express: Mesa layers, no γ cap, no soft-cap.
ModelConfig FlaModel() {
  ModelConfig c;
  c.vocab_size = 384;
  c.d_model = 48;
  c.n_layers = 2;
  c.n_heads = 2;
  c.head_dim = 16;
  c.mlp_hidden = 96;
  c.cg_steps = 8;
  c.gamma_cap = 0.0f;
  c.logit_softcap = 0.0f;
  c.bos_token = 374;  // <|begin_of_text|> of the Llama-3-style fixture
  return c;
}

class HfExportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(std::getenv("TEST_TMPDIR"), "/",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  // A checkpoint of `config` with random weights, trained (as far as it records) with the
  // Llama-3-style tokenizer.json, or the byte tokenizer.
  std::string Checkpoint(const ModelConfig& config, bool byte_tokenizer = false) {
    const ParamLayout layout(config);
    params_.assign(layout.total(), 0.0f);
    layout.Initialize(7, params_.data());
    for (const ParamTensor& t : layout.tensors()) {  // norms and biases away from their init
      for (int64_t i = 0; i < t.size; ++i) params_[t.offset + i] += 0.01f * std::sin(i + t.offset);
    }
    TrainState state;
    state.step = 40;
    state.spec_json = json{{"model", {{"cg_steps", config.cg_steps}}}}.dump();
    spec::TokenizerRecord record = *spec::BuiltinTokenizer("byte");
    if (!byte_tokenizer) {
      record = {"hf", 376, 374, {{kTokenizer, *spec::FileSha256(kTokenizer)}}};
    }
    state.tokenizer_json = spec::TokenizerRecordJson(record);
    const std::string root = dir_ + "/ckpt";
    EXPECT_TRUE(
        SaveCheckpoint(root, config, layout, params_.data(), nullptr, nullptr, state, 1).ok());
    return root;
  }
  std::string dir_;
  std::vector<float> params_;
};

int64_t Eval(const std::string& expr, const json& config) {
  int64_t product = 1;
  for (absl::string_view factor : absl::StrSplit(expr, '*')) {
    int64_t literal;
    product *= absl::SimpleAtoi(factor, &literal) ? literal
                                                  : config.at(std::string(factor)).get<int64_t>();
  }
  return product;
}

TEST_F(HfExportTest, FilesNamesShapesDtypesAndConfigKeysAreFlas) {
  const ModelConfig model = FlaModel();
  const std::string out = dir_ + "/hf";
  absl::StatusOr<ExportResult> result =
      ExportToHf({.checkpoint = Checkpoint(model), .out_dir = out});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->format, "fla");  // auto: FLA's format where it is exact
  EXPECT_EQ(result->files,
            (std::vector<std::string>{"README.md", "config.json", "generation_config.json",
                                      "model.safetensors", "special_tokens_map.json",
                                      "tokenizer.json", "tokenizer_config.json"}));
  const json fixture = ReadJson(kFixture);
  const json config = ReadJson(out + "/config.json");
  // Every key of FLA's MesaNetConfig is written, and nothing FLA does not know.
  for (const auto& [key, unused] : fixture["config"].items()) {
    EXPECT_TRUE(config.contains(key)) << "config.json lacks " << key;
  }
  for (const auto& [key, unused] : config.items()) {
    EXPECT_TRUE(fixture["config"].contains(key) || key == "model_type" || key == "architectures" ||
                key == "torch_dtype")
        << "config.json has " << key << ", which FLA's MesaNetConfig does not define";
  }
  EXPECT_EQ(config["model_type"], fixture["model_type"]);
  EXPECT_EQ(config["architectures"], fixture["architectures"]);
  EXPECT_EQ(config["hidden_size"], model.d_model);
  EXPECT_EQ(config["num_hidden_layers"], model.n_layers);
  EXPECT_EQ(config["intermediate_size"], model.mlp_hidden);
  EXPECT_EQ(config["max_cg_step_training"], model.cg_steps);
  EXPECT_EQ(config["bos_token_id"], 374);
  EXPECT_EQ(config["tie_word_embeddings"], false);
  EXPECT_EQ(static_cast<float>(config["norm_eps"].get<double>()), kHeadNormEps);

  // The tensors: exactly FLA's state dict, with its shapes, in float32.
  absl::StatusOr<st::SafetensorsFile> file =
      st::SafetensorsFile::ReadFile(out + "/model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  std::set<std::string> want, got;
  for (const json& t : fixture["tensors"]) {
    const int layers = t["per_layer"].get<bool>() ? model.n_layers : 1;
    for (int i = 0; i < layers; ++i) {
      const std::string name =
          absl::StrReplaceAll(t["name"].get<std::string>(), {{"{i}", absl::StrCat(i)}});
      want.insert(name);
      const st::TensorView* view = file->Find(name);
      ASSERT_NE(view, nullptr) << name;
      std::vector<int64_t> shape;
      for (const json& e : t["shape"]) shape.push_back(Eval(e.get<std::string>(), config));
      EXPECT_EQ(view->shape, shape) << name;
      EXPECT_EQ(view->dtype, st::DType::kF32) << name;
    }
  }
  for (const st::TensorView& t : file->tensors()) got.insert(t.name);
  EXPECT_EQ(got, want);

  // The embedding scale folded into FLA's untied pair.
  const std::vector<float> emb = *file->GetAsFloat32("model.embeddings.weight");
  const std::vector<float> head = *file->GetAsFloat32("lm_head.weight");
  const ParamLayout layout(model);
  const float scale = std::sqrt(static_cast<float>(model.d_model));
  for (size_t i = 0; i < head.size(); ++i) {
    ASSERT_EQ(head[i], params_[layout.embeddings() + i]);
    ASSERT_EQ(emb[i], head[i] * scale);
  }

  // The tokenizer: the recorded file itself, and its BOS named in the configs.
  EXPECT_EQ(*base::ReadFile(out + "/tokenizer.json"), *base::ReadFile(kTokenizer));
  EXPECT_EQ(ReadJson(out + "/tokenizer_config.json")["bos_token"], "<|begin_of_text|>");
  EXPECT_EQ(ReadJson(out + "/generation_config.json")["bos_token_id"], 374);
  // Nothing left beside it.
  for (const auto& entry : fs::directory_iterator(dir_)) {
    EXPECT_FALSE(absl::StrContains(entry.path().filename().string(), ".tmp")) << entry.path();
  }
}

// The CG steps a checkpoint trained with come from its recorded spec with the trainer's defaults:
// a spec that leaves model.cg_steps out trained with the default, whatever the description held.
TEST(TrainedModelTest, CgStepsAreTheRecordedSpecsWithItsDefault) {
  CheckpointDescription described{.dir = "/ckpt/step_00000040", .model = FlaModel()};
  ASSERT_NE(described.model.cg_steps, spec::kDefaultCgSteps);
  described.spec_json = R"({"name": "t", "model": {"d_model": 48, "n_layers": 2}})";
  absl::StatusOr<ModelConfig> trained = TrainedModel(described);
  ASSERT_TRUE(trained.ok()) << trained.status();
  EXPECT_EQ(trained->cg_steps, spec::kDefaultCgSteps);
  EXPECT_EQ(trained->d_model, described.model.d_model);  // the architecture is the checkpoint's
  for (const char* spec_json : {"", "{}"}) {
    described.spec_json = spec_json;
    trained = TrainedModel(described);
    ASSERT_TRUE(trained.ok()) << trained.status();
    EXPECT_EQ(trained->cg_steps, spec::kDefaultCgSteps) << "\"" << spec_json << "\"";
  }
  described.spec_json = R"({"model": {"cg_steps": 12}, "a_newer_field": 1})";
  EXPECT_EQ(TrainedModel(described)->cg_steps, 12);
  // mesa-import records where the model came from, beside a spec of its own.
  described.spec_json = R"({"imported_from": "/hf", "data": {"tokenizer": "none"}})";
  EXPECT_EQ(TrainedModel(described)->cg_steps, spec::kDefaultCgSteps);
  // A model without Mesa layers solves nothing.
  CheckpointDescription gla = described;
  gla.model.mixer = MixerKind::kGla;
  gla.spec_json = R"({"model": {"mixer": "gla"}})";
  EXPECT_EQ(TrainedModel(gla)->cg_steps, 0);
  // A recorded spec that is not a JobSpec is an error naming the checkpoint, not a crash.
  for (const char* bad : {R"({"model": {"cg_steps": "many"}})", R"({"model": 5})", "[1, 2"}) {
    described.spec_json = bad;
    trained = TrainedModel(described);
    EXPECT_EQ(trained.status().code(), absl::StatusCode::kDataLoss) << bad;
    EXPECT_TRUE(absl::StrContains(trained.status().message(), "/ckpt/step_00000040")) << bad;
  }
}

TEST_F(HfExportTest, RefusesWhatFlaCannotExpressNamingIt) {
  ModelConfig ours = FlaModel();
  ours.gamma_cap = 0.0025f;
  ours.logit_softcap = 30.0f;
  absl::StatusOr<ExportResult> result =
      ExportToHf({.checkpoint = Checkpoint(ours), .out_dir = dir_ + "/hf", .format = "fla"});
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(result.status().message(), "--format=remote_code"));
  EXPECT_TRUE(absl::StrContains(result.status().message(), "model.gamma_cap is 0.0025"))
      << result.status();
  EXPECT_TRUE(absl::StrContains(result.status().message(), "model.logit_softcap is 30"))
      << result.status();
  EXPECT_FALSE(fs::exists(dir_ + "/hf"));
  // auto writes it as remote code, and says why.
  result = ExportToHf({.checkpoint = Checkpoint(ours), .out_dir = dir_ + "/auto"});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->format, "remote_code");
  EXPECT_TRUE(absl::StrContains(result->format_reason, "model.logit_softcap is 30"));
  EXPECT_EQ(ReadJson(dir_ + "/auto/config.json")["model_type"], "mesa_lm");

  ModelConfig resets = FlaModel();
  resets.reset_at_bos = true;
  EXPECT_TRUE(absl::StrContains(CheckExportable(resets).message(), "data.reset_at_bos"));
  ModelConfig hybrid = FlaModel();
  hybrid.layer_mixers = {MixerKind::kGla, MixerKind::kMesa};
  EXPECT_TRUE(absl::StrContains(CheckExportable(hybrid).message(), "layer 0 is gla"));
  // Each mixer FLA has a model of the same name for says which of its fields differ.
  const std::pair<MixerKind, const char*> differs[] = {
      {MixerKind::kMamba2,
       "layer 1 is mamba2 (FLA's MesaNetForCausalLM has Mesa layers only; "
       "its Mamba2ForCausalLM's blocks have no MLP"},
      {MixerKind::kGla, "low-rank gk_proj"},
      {MixerKind::kDeltaNet, "v_conv1d"},
      {MixerKind::kGatedDeltaNet, "-exp(A_log)"},
      {MixerKind::kAttention, "no per-head output norm (o_norm)"},
      {MixerKind::kSwa, "no short convolutions on q and k"},
      {MixerKind::kHawk, "no Hawk"},
      {MixerKind::kMlstm, "no mLSTM"},
      {MixerKind::kMamba2Mesa, "paper's \"Mamba2\""}};
  for (const auto& [mixer, why] : differs) {
    ModelConfig mixed = FlaModel();
    mixed.layer_mixers = {MixerKind::kMesa, mixer};
    EXPECT_TRUE(absl::StrContains(CheckExportable(mixed).message(), why)) << CheckExportable(mixed);
  }
}

TEST_F(HfExportTest, AnExistingOutputDirectoryIsLeftAlone) {
  const std::string out = dir_ + "/hf";
  fs::create_directories(out);
  std::ofstream(out + "/mine.txt") << "keep";
  absl::StatusOr<ExportResult> result =
      ExportToHf({.checkpoint = Checkpoint(FlaModel()), .out_dir = out});
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(*base::ReadFile(out + "/mine.txt"), "keep");
}

TEST_F(HfExportTest, TokenizerFileOfAnotherHashIsRefused) {
  const std::string other = dir_ + "/other.json";
  std::ofstream(other) << ByteTokenizer::HfTokenizerJson();
  absl::StatusOr<ExportResult> result = ExportToHf(
      {.checkpoint = Checkpoint(FlaModel()), .out_dir = dir_ + "/hf", .tokenizer_files = {other}});
  ASSERT_FALSE(result.ok());
  EXPECT_TRUE(absl::StrContains(result.status().message(), "is not the one the checkpoint"))
      << result.status();
}

// Tied and untied models (model.tie_embeddings) alike; an untied one's config.json and import
// say so.
TEST_F(HfExportTest, ExportThenImportGivesIdenticalParameters) {
  for (bool tie : {true, false}) {
    SCOPED_TRACE(tie ? "tied" : "untied");
    ModelConfig model = FlaModel();
    model.tie_embeddings = tie;
    dir_ = absl::StrCat(dir_, "/", tie);
    const std::string out = dir_ + "/hf";
    ASSERT_TRUE(ExportToHf({.checkpoint = Checkpoint(model), .out_dir = out}).ok());
    EXPECT_EQ(ReadJson(out + "/config.json")["tie_word_embeddings"], false);
    absl::StatusOr<ImportResult> imported = ImportFromHf({.hf_dir = out, .out = dir_ + "/back"});
    ASSERT_TRUE(imported.ok()) << imported.status();
    EXPECT_EQ(imported->model_json, ModelConfigJson(model));
    EXPECT_EQ(json::parse(imported->model_json).contains("tie_embeddings"), !tie);
    EXPECT_TRUE(imported->has_tokenizer);
    const ParamLayout layout(model);
    absl::StatusOr<CheckpointData> back = LoadCheckpoint(dir_ + "/back", model, layout, false);
    ASSERT_TRUE(back.ok()) << back.status();
    for (const ParamTensor& t : layout.tensors()) {
      for (int64_t i = 0; i < t.size; ++i) {
        ASSERT_EQ(back->params[t.offset + i], params_[t.offset + i]) << t.name << "[" << i << "]";
      }
    }
    // The tokenizer record follows, pointing at the export's own copy.
    absl::StatusOr<spec::TokenizerRecord> record =
        spec::TokenizerRecordFromJson(back->state.tokenizer_json, "state.json");
    ASSERT_TRUE(record.ok()) << record.status();
    EXPECT_EQ(record->kind, "hf");
    EXPECT_EQ(record->files[0].path, out + "/tokenizer.json");
    EXPECT_EQ(record->files[0].sha256, *spec::FileSha256(kTokenizer));
    // Exported again, the import gives FLA's config.json back: the CG steps too, which the
    // import records in its spec (not the default).
    ASSERT_NE(model.cg_steps, spec::kDefaultCgSteps);
    ASSERT_TRUE(ExportToHf({.checkpoint = dir_ + "/back", .out_dir = dir_ + "/again"}).ok());
    const json again = ReadJson(dir_ + "/again/config.json");
    EXPECT_EQ(again["max_cg_step_training"], model.cg_steps);
    EXPECT_EQ(again, ReadJson(out + "/config.json"));
    // bfloat16 exports import too, to within bf16 rounding.
    ASSERT_TRUE(
        ExportToHf({.checkpoint = dir_ + "/ckpt", .out_dir = dir_ + "/bf16", .dtype = "bfloat16"})
            .ok());
    absl::StatusOr<ImportResult> bf16 =
        ImportFromHf({.hf_dir = dir_ + "/bf16", .out = dir_ + "/back16"});
    ASSERT_TRUE(bf16.ok()) << bf16.status();
    EXPECT_EQ(bf16->model_json, ModelConfigJson(model));
    // The project's own precision names work as well as Hugging Face's.
    ASSERT_TRUE(
        ExportToHf({.checkpoint = dir_ + "/ckpt", .out_dir = dir_ + "/bf16b", .dtype = "bf16"})
            .ok());
    EXPECT_EQ(*base::ReadFile(dir_ + "/bf16b/model.safetensors"),
              *base::ReadFile(dir_ + "/bf16/model.safetensors"));
    const absl::Status fp16 =
        ExportToHf({.checkpoint = dir_ + "/ckpt", .out_dir = dir_ + "/fp16", .dtype = "fp16"})
            .status();
    EXPECT_EQ(fp16.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(fp16.message(), "bf16 (or bfloat16)")) << fp16;
  }
}

// FLA's own checkpoints: written here as FLA's state dict with an independent lm_head.
TEST_F(HfExportTest, ImportsAnIndependentHeadUntied) {
  const std::string out = dir_ + "/hf";
  ASSERT_TRUE(ExportToHf({.checkpoint = Checkpoint(FlaModel()), .out_dir = out}).ok());
  absl::StatusOr<st::SafetensorsFile> file =
      st::SafetensorsFile::ReadFile(out + "/model.safetensors");
  ASSERT_TRUE(file.ok());
  std::vector<std::vector<float>> values;
  for (const st::TensorView& t : file->tensors()) values.push_back(*st::ToFloat32(t));
  auto index = [&](const std::string& name) {
    return std::distance(file->tensors().data(), file->Find(name));
  };
  std::vector<float>& head = values[index("lm_head.weight")];
  for (size_t i = 0; i < head.size(); ++i) head[i] = 0.02f * std::cos(3.0f * i);
  auto write = [&] {
    std::vector<st::TensorView> views;
    for (size_t i = 0; i < values.size(); ++i) {
      views.push_back(st::F32View(file->tensors()[i].name, file->tensors()[i].shape, values[i]));
    }
    ASSERT_TRUE(st::WriteFile(out + "/model.safetensors", views, {{"format", "pt"}}).ok());
  };
  // A NaN or an infinity anywhere in the weights is refused, naming the tensor and element, and
  // nothing is written (they used to pass through silently).
  for (const float bad : {std::nanf(""), std::numeric_limits<float>::infinity()}) {
    const float kept = head[5];
    head[5] = bad;
    write();
    absl::StatusOr<ImportResult> refused =
        ImportFromHf({.hf_dir = out, .out = dir_ + "/not_finite"});
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
    EXPECT_TRUE(
        absl::StrContains(refused.status().message(), "tensor lm_head.weight: element 5 is "))
        << refused.status();
    EXPECT_FALSE(std::filesystem::exists(dir_ + "/not_finite"));
    head[5] = kept;
  }
  write();
  absl::StatusOr<ImportResult> imported = ImportFromHf({.hf_dir = out, .out = dir_ + "/back"});
  ASSERT_TRUE(imported.ok()) << imported.status();
  ModelConfig untied = FlaModel();
  untied.tie_embeddings = false;
  EXPECT_EQ(imported->model_json, ModelConfigJson(untied));
  const ParamLayout layout(untied);
  absl::StatusOr<CheckpointData> back = LoadCheckpoint(dir_ + "/back", untied, layout, false);
  ASSERT_TRUE(back.ok()) << back.status();
  // Every tensor as FLA has it, by name: the embedding unscaled, the head its own.
  for (const ParamTensor& t : layout.tensors()) {
    const std::vector<float>& want = values[index(t.name)];
    for (int64_t i = 0; i < t.size; ++i) {
      ASSERT_EQ(back->params[t.offset + i], want[i]) << t.name << "[" << i << "]";
    }
  }
  // tie_word_embeddings true: FLA's head is its (unscaled) embedding; saved without lm_head.
  values.erase(values.begin() + index("lm_head.weight"));
  {
    std::vector<st::TensorView> views;
    for (size_t i = 0, k = 0; i < file->tensors().size(); ++i) {
      if (file->tensors()[i].name == "lm_head.weight") continue;
      views.push_back(st::F32View(file->tensors()[i].name, file->tensors()[i].shape, values[k++]));
    }
    ASSERT_TRUE(st::WriteFile(out + "/model.safetensors", views, {{"format", "pt"}}).ok());
  }
  json config = ReadJson(out + "/config.json");
  config["tie_word_embeddings"] = true;
  ASSERT_TRUE(base::WriteFileAtomically(out + "/config.json", config.dump()).ok());
  imported = ImportFromHf({.hf_dir = out, .out = dir_ + "/tied"});
  ASSERT_TRUE(imported.ok()) << imported.status();
  EXPECT_EQ(imported->model_json, ModelConfigJson(untied));
  back = LoadCheckpoint(dir_ + "/tied", untied, layout, false);
  ASSERT_TRUE(back.ok()) << back.status();
  const int64_t table = layout.embeddings(), n = int64_t{untied.vocab_size} * untied.d_model;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(back->params[layout.head() + i], back->params[table + i]) << i;
  }
}

TEST_F(HfExportTest, ImportRefusesSettingsOurModelLacks) {
  const std::string out = dir_ + "/hf";
  ASSERT_TRUE(ExportToHf({.checkpoint = Checkpoint(FlaModel()), .out_dir = out}).ok());
  absl::StatusOr<ImportResult> imported;
  // A config FLA-specific settings our model lacks.
  json config = ReadJson(out + "/config.json");
  config["use_output_gate"] = true;
  ASSERT_TRUE(base::WriteFileAtomically(out + "/config.json", config.dump()).ok());
  imported = ImportFromHf({.hf_dir = out, .out = dir_ + "/back2"});
  ASSERT_FALSE(imported.ok());
  EXPECT_TRUE(absl::StrContains(imported.status().message(), "use_output_gate"))
      << imported.status();
  // Whole numbers an int cannot hold are named as written, not wrapped ("got 0" for 2^40,
  // "-2147483648" for 2^31).
  for (const auto& [key, value] : {std::pair<std::string, int64_t>{"hidden_size", int64_t{1} << 40},
                                   {"vocab_size", int64_t{1} << 31}}) {
    config = ReadJson(out + "/config.json");
    config["use_output_gate"] = false;
    config[key] = value;
    ASSERT_TRUE(base::WriteFileAtomically(out + "/config.json", config.dump()).ok());
    imported = ImportFromHf({.hf_dir = out, .out = dir_ + "/big_" + key});
    ASSERT_FALSE(imported.ok()) << key;
    EXPECT_TRUE(absl::StrContains(imported.status().message(),
                                  absl::StrCat(key, ": ", value, " is out of range")))
        << imported.status();
  }
}

TEST_F(HfExportTest, ByteTokenizerModelsExportATokenizerJson) {
  ModelConfig model = FlaModel();
  model.vocab_size = 264;
  model.bos_token = 256;
  const std::string out = dir_ + "/hf";
  ASSERT_TRUE(
      ExportToHf({.checkpoint = Checkpoint(model, /*byte_tokenizer=*/true), .out_dir = out}).ok());
  absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> tok = LoadHfTokenizer(out + "/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->bos_id(), 256);
  EXPECT_EQ((*tok)->Encode("héllo"), ByteTokenizer().Encode("héllo"));
  EXPECT_EQ(ReadJson(out + "/tokenizer_config.json")["bos_token"], ByteTokenizer::kBosName);
}

}  // namespace
}  // namespace mesa::model
