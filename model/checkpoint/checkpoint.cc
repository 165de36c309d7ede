#include "model/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "base/file_util.h"
#include "base/json_int.h"
#include "formats/checkpoint_layout.h"
#include "formats/safetensors.h"
#include "nlohmann/json.hpp"
#include "spec/mixers.h"

namespace mesa::model {
namespace fs = std::filesystem;
namespace st = mesa::safetensors;
using nlohmann::json;

namespace {

constexpr char kFormat[] = "mesa-checkpoint-v1";
constexpr const char* kModelFile = formats::kCheckpointModelFile;
constexpr const char* kOptimizerFile = formats::kCheckpointOptimizerFile;
constexpr const char* kStateFile = formats::kCheckpointStateFile;
constexpr const char* kLatest = formats::kCheckpointLatestFile;
// A state.json holds the model, the job spec and the tokenizer record: kilobytes, never this.
constexpr size_t kMaxStateBytes = 64 << 20;

std::string Crc32Hex(std::string_view bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  // zlib takes uInt lengths; feed large files in pieces.
  for (size_t pos = 0; pos < bytes.size(); pos += (1u << 30)) {
    const size_t n = std::min<size_t>(1u << 30, bytes.size() - pos);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + pos), static_cast<uInt>(n));
  }
  return absl::StrFormat("%08x", static_cast<uint32_t>(crc));
}

absl::Status FsyncPath(const std::string& path, bool directory) {
  const int fd = open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) return absl::InternalError(absl::StrCat("open for fsync: ", path));
  const int rc = fsync(fd);
  close(fd);
  if (rc != 0) return absl::InternalError(absl::StrCat("fsync: ", path));
  return absl::OkStatus();
}

json PositionJson(const DataPosition& p) {
  return json{{"shard", p.shard}, {"offset", p.offset}, {"epoch", p.epoch}};
}

// Whether a parsed state.json is one of ours. Never throws (a "format" that is not a string would
// make json::value throw, outside any handler).
bool IsCheckpointState(const json& state) {
  if (state.is_discarded() || !state.is_object()) return false;
  const auto format = state.find("format");
  return format != state.end() && format->is_string() && format->get<std::string>() == kFormat;
}

// Reads the whole-number fields of a state.json, each checked for its type's range
// (base::JsonToWhole: a number too large for 64 bits is parsed as a double, whose cast to an
// integer would be undefined behaviour); the first field that fails is kept in `error`.
struct WholeFields {
  absl::Status error;
  template <typename T>
  T Get(const json& value, const char* name) {
    absl::StatusOr<T> v = base::JsonToWhole<T>(value, name);
    if (!v.ok()) {
      if (error.ok()) error = v.status();
      return T{};
    }
    return *v;
  }
  // An optional member: `fallback` when absent.
  template <typename T>
  T GetOr(const json& object, const char* key, T fallback) {
    return object.contains(key) ? Get<T>(object[key], key) : fallback;
  }
};

// Verifies and reads one step directory; a state.json field of the wrong JSON type may throw.
absl::StatusOr<CheckpointData> LoadStepDirOrThrow(const std::string& dir, const ModelConfig& config,
                                                  const ParamLayout& layout, bool want_optimizer) {
  auto state_text = base::ReadFile(dir + "/" + kStateFile, kMaxStateBytes);
  if (!state_text.ok()) {
    return absl::DataLossError(absl::StrCat(dir, ": ", state_text.status().message()));
  }
  json state = json::parse(*state_text, nullptr, /*allow_exceptions=*/false);
  if (!IsCheckpointState(state)) {
    return absl::DataLossError(absl::StrCat(dir, ": state.json is not a ", kFormat, " document"));
  }
  CheckpointData data;
  data.dir = dir;
  try {
    WholeFields whole;
    data.state.step = whole.Get<int64_t>(state.at("step"), "step");
    const json& position = state.at("data_position");
    data.state.data = {whole.Get<int64_t>(position.at("shard"), "data_position.shard"),
                       whole.Get<int64_t>(position.at("offset"), "data_position.offset"),
                       whole.Get<int64_t>(position.at("epoch"), "data_position.epoch")};
    data.state.seed = whole.Get<uint64_t>(state.at("rng").at("seed"), "rng.seed");
    data.state.rng_counter = whole.Get<uint64_t>(state.at("rng").at("counter"), "rng.counter");
    data.state.skipped_steps = whole.GetOr<int64_t>(state, "skipped_steps", 0);
    data.state.tokens_seen = whole.GetOr<int64_t>(state, "tokens_seen", 0);
    if (!whole.error.ok()) {
      return absl::DataLossError(absl::StrCat(dir, ": state.json: ", whole.error.message()));
    }
    data.state.spec_json = state.value("spec", json::object()).dump();
    data.state.run_id = state.value("run_id", std::string());
    data.state.tokenizer_json = state.contains("tokenizer") ? state["tokenizer"].dump() : "";
    if (state.contains("reset_at_bos")) data.state.reset_at_bos = state["reset_at_bos"].get<bool>();
    if (state.at("model") != json::parse(ModelConfigJson(config))) {
      return absl::FailedPreconditionError(
          absl::StrCat(dir, ": the checkpoint's model (", state.at("model").dump(),
                       ") differs from the configured model (", ModelConfigJson(config), ")"));
    }
  } catch (const json::exception& e) {
    return absl::DataLossError(absl::StrCat(dir, ": state.json: ", e.what()));
  }
  // Checksums first: a torn or bit-flipped file is caught before it is parsed.
  std::vector<std::string> files = {kModelFile};
  if (want_optimizer && state["files"].contains(kOptimizerFile)) files.push_back(kOptimizerFile);
  std::vector<st::SafetensorsFile> parsed;
  for (const std::string& name : files) {
    const json& entry = state["files"][name];
    WholeFields whole;
    const int64_t recorded =
        entry.is_object() ? whole.GetOr<int64_t>(entry, "bytes", int64_t{-1}) : -1;
    if (!whole.error.ok()) {
      return absl::DataLossError(
          absl::StrCat(dir, ": state.json: files.", name, ".", whole.error.message()));
    }
    if (recorded < 0) {
      return absl::DataLossError(absl::StrCat(dir, ": state.json records no size for ", name));
    }
    // Never more than the recorded size is read (a regular file only: base::ReadFileBytes).
    auto bytes = base::ReadFileBytes(dir + "/" + name, static_cast<size_t>(recorded));
    if (!bytes.ok()) {
      return absl::DataLossError(absl::StrCat(dir, ": ", name, ": ", bytes.status().message()));
    }
    const std::string_view view(reinterpret_cast<const char*>(bytes->data()), bytes->size());
    if (entry.value("crc32", "") != Crc32Hex(view) ||
        recorded != static_cast<int64_t>(bytes->size())) {
      return absl::DataLossError(
          absl::StrCat(dir, ": ", name, " does not match its checksum in state.json"));
    }
    auto file = st::SafetensorsFile::Parse(*std::move(bytes));
    if (!file.ok())
      return absl::DataLossError(absl::StrCat(dir, ": ", name, ": ", file.status().message()));
    parsed.push_back(*std::move(file));
  }
  auto read_all = [&](const st::SafetensorsFile& file, const std::string& prefix,
                      std::vector<float>* out) -> absl::Status {
    out->assign(layout.total(), 0.0f);
    for (const ParamTensor& t : layout.tensors()) {
      const st::TensorView* view = file.Find(prefix + t.name);
      if (view == nullptr) {
        return absl::FailedPreconditionError(
            absl::StrCat(dir, ": tensor ", prefix + t.name, " missing"));
      }
      if (view->shape != t.shape) {
        return absl::FailedPreconditionError(
            absl::StrCat(dir, ": tensor ", prefix + t.name, " has a different shape"));
      }
      auto values = st::ToFiniteFloat32(*view);
      if (!values.ok()) {
        return absl::DataLossError(absl::StrCat(dir, ": ", values.status().message()));
      }
      std::copy(values->begin(), values->end(), out->begin() + t.offset);
    }
    return absl::OkStatus();
  };
  if (absl::Status s = read_all(parsed[0], "", &data.params); !s.ok()) return s;
  if (parsed.size() > 1) {
    if (absl::Status s = read_all(parsed[1], "exp_avg.", &data.exp_avg); !s.ok()) return s;
    if (absl::Status s = read_all(parsed[1], "exp_avg_sq.", &data.exp_avg_sq); !s.ok()) return s;
    data.has_optimizer = true;
  }
  return data;
}

// A damaged state.json (a field of the wrong type anywhere) is DataLoss, like any other damage,
// so loading falls back to an older checkpoint instead of aborting the trainer.
absl::StatusOr<CheckpointData> LoadStepDir(const std::string& dir, const ModelConfig& config,
                                           const ParamLayout& layout, bool want_optimizer) {
  try {
    return LoadStepDirOrThrow(dir, config, layout, want_optimizer);
  } catch (const json::exception& e) {
    return absl::DataLossError(absl::StrCat(dir, ": state.json: ", e.what()));
  }
}

}  // namespace

std::string ModelConfigJson(const ModelConfig& c) {
  json model = {{"vocab_size", c.vocab_size},       {"d_model", c.d_model},
                {"n_layers", c.n_layers},           {"n_heads", c.n_heads},
                {"head_dim", c.head_dim},           {"mlp_hidden", c.mlp_hidden},
                {"conv_width", c.conv_width},       {"mixer", MixerName(c.mixer)},
                {"lambda_floor", c.lambda_floor},   {"gamma_cap", c.gamma_cap},
                {"logit_softcap", c.logit_softcap}, {"bos_token", c.bos_token}};
  // Models with one mixer everywhere keep the format checkpoints have always had.
  if (!c.layer_mixers.empty()) {
    std::vector<std::string> names;
    for (MixerKind mixer : c.layer_mixers) names.push_back(MixerName(mixer));
    model["mixer"] = "per_layer";
    model["layer_mixers"] = names;
  }
  // Written only when set, so checkpoints without attention keep their format.
  if (c.attention_window != 0) model["attention_window"] = c.attention_window;
  // Likewise only for untied models, and for models with Hawk layers.
  if (!c.tie_embeddings) model["tie_embeddings"] = false;
  if (c.rnn_width != 0) model["rnn_width"] = c.rnn_width;
  if (c.hawk_paper_init) model["hawk_init"] = "paper";
  if (c.ssm_inner != 0) {
    model["ssm_inner"] = c.ssm_inner;
    model["ssm_head_dim"] = c.ssm_head_dim;
    model["ssm_state"] = c.ssm_state;
  }
  return model.dump();
}

absl::StatusOr<std::string> SaveCheckpoint(const std::string& root, const ModelConfig& config,
                                           const ParamLayout& layout, const float* params,
                                           const float* exp_avg, const float* exp_avg_sq,
                                           const TrainState& state, int keep_last) {
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return absl::InternalError(absl::StrCat("creating ", root, ": ", ec.message()));
  const std::string name = formats::StepDirName(state.step);
  const std::string final_dir = root + "/" + name;
  const std::string tmp_dir =
      absl::StrCat(root, "/", formats::TempStepDirName(state.step, getpid()));
  // Half-written step directories of earlier writers (a trainer killed while saving) are never
  // loaded (ListStepDirs skips them) and only take space: one writer saves into a root at a time.
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string entry_name = entry.path().filename().string();
    if (formats::IsTempStepDirName(entry_name)) {
      std::error_code ignored;
      fs::remove_all(entry.path(), ignored);
    }
  }
  ec.clear();
  fs::create_directories(tmp_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("creating ", tmp_dir, ": ", ec.message()));

  st::Metadata metadata = {
      {"format", "pt"},
      {"mesa.architecture", "MesaNet"},
      {"mesa.config", ModelConfigJson(config)},
      {"mesa.tied_lm_head", config.tie_embeddings
                                ? "lm_head.weight is tied to model.embeddings.weight (not stored)"
                                : "untied: lm_head.weight stored"},
      {"mesa.embedding_scale", config.tie_embeddings
                                   ? "embedding lookup multiplied by sqrt(d_model)"
                                   : "embedding lookup unscaled"},
      {"mesa.gamma_cap", absl::StrCat("gamma = sigmoid(a_proj(x)) * (1 - ", config.gamma_cap,
                                      " * beta^2); FLA uses logsigmoid(a_proj(x)) only")},
      {"mesa.logit_softcap", absl::StrCat("logits = ", config.logit_softcap, " * tanh(logits / ",
                                          config.logit_softcap, ")")},
      {"mesa.lambda", absl::StrCat("lambda = ", config.lambda_floor, " + softplus(lambda_params)")},
      {"mesa.conv1d",
       "causal depthwise, weight[c, 0, j] multiplies x[t - (W-1) + j], no bias, "
       "followed by SiLU and L2 norm"},
      {"mesa.step", absl::StrCat(state.step)},
  };
  if (!state.tokenizer_json.empty()) metadata["mesa.tokenizer"] = state.tokenizer_json;
  for (int l = 0; l < config.n_layers; ++l) {
    if (!spec::TraitsOf(config.LayerMixer(l)).is_attention) continue;
    // Attention layers have no gates, λ, SiLU or L2 norm (docs/math.md §8.3).
    metadata["mesa.attention"] = absl::StrCat(
        "attention and swa layers: q, k = rotary(conv1d(q_proj(x))), rotary(conv1d(k_proj(x))) "
        "(rotate-half, base ",
        spec::kRotaryBase, "), o = softmax(q k^T / sqrt(head_dim)) v, causal; attention_window ",
        config.attention_window, " (0 = global)");
    break;
  }
  // Each file is checksummed from the bytes handed to the write, so it is never read back.
  json files;
  auto write = [&](const std::string& file, const std::vector<st::TensorView>& tensors,
                   const st::Metadata& meta) -> absl::Status {
    absl::StatusOr<std::vector<std::byte>> bytes = st::Serialize(tensors, meta);
    if (!bytes.ok()) return bytes.status();
    const std::string_view view(reinterpret_cast<const char*>(bytes->data()), bytes->size());
    files[file] = {{"crc32", Crc32Hex(view)}, {"bytes", bytes->size()}};
    return st::WriteBytesAtomically(tmp_dir + "/" + file, *bytes);
  };
  std::vector<st::TensorView> views;
  for (const ParamTensor& t : layout.tensors()) {
    views.push_back(st::F32View(t.name, t.shape, {params + t.offset, static_cast<size_t>(t.size)}));
  }
  if (absl::Status s = write(kModelFile, views, metadata); !s.ok()) return s;
  if (exp_avg != nullptr && exp_avg_sq != nullptr) {
    std::vector<st::TensorView> opt;
    for (const ParamTensor& t : layout.tensors()) {
      opt.push_back(st::F32View("exp_avg." + t.name, t.shape,
                                {exp_avg + t.offset, static_cast<size_t>(t.size)}));
      opt.push_back(st::F32View("exp_avg_sq." + t.name, t.shape,
                                {exp_avg_sq + t.offset, static_cast<size_t>(t.size)}));
    }
    st::Metadata opt_meta = {{"optimizer", "adamw"}, {"step", absl::StrCat(state.step)}};
    if (absl::Status s = write(kOptimizerFile, opt, opt_meta); !s.ok()) return s;
  }
  json spec = json::parse(state.spec_json.empty() ? "{}" : state.spec_json, nullptr, false);
  const json tokenizer = json::parse(state.tokenizer_json, nullptr, /*allow_exceptions=*/false);
  json doc = {{"format", kFormat},
              {"step", state.step},
              {"data_position", PositionJson(state.data)},
              {"rng", {{"seed", state.seed}, {"counter", state.rng_counter}}},
              {"skipped_steps", state.skipped_steps},
              {"tokens_seen", state.tokens_seen},
              {"run_id", state.run_id},
              {"model", json::parse(ModelConfigJson(config))},
              {"spec", spec.is_discarded() ? json::object() : spec},
              {"files", files}};
  if (tokenizer.is_object()) doc["tokenizer"] = tokenizer;
  if (state.reset_at_bos.has_value()) doc["reset_at_bos"] = *state.reset_at_bos;
  // Also syncs tmp_dir, which holds the safetensors files too.
  if (absl::Status s = base::WriteFileAtomically(tmp_dir + "/" + kStateFile, doc.dump(2) + "\n");
      !s.ok()) {
    return s;
  }
  // Replace an older directory of the same step (e.g. a re-run after resume) only now.
  if (fs::exists(final_dir)) {
    const std::string old = final_dir + ".old." + std::to_string(getpid());
    fs::rename(final_dir, old, ec);
    fs::remove_all(old, ec);
  }
  fs::rename(tmp_dir, final_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("renaming ", tmp_dir, ": ", ec.message()));
  if (absl::Status s = FsyncPath(root, true); !s.ok()) return s;
  if (absl::Status s = base::WriteFileAtomically(root + "/" + kLatest, name + "\n"); !s.ok()) {
    return s;
  }
  // Prune old steps (never the one just written).
  std::vector<std::string> dirs = formats::ListStepDirs(root);
  for (size_t i = std::max(keep_last, 1); i < dirs.size(); ++i) {
    if (dirs[i] != final_dir) fs::remove_all(dirs[i], ec);
  }
  return final_dir;
}

namespace {

// The inverse of ModelConfigJson; throws json::exception on a field of the wrong type.
absl::StatusOr<ModelConfig> ModelConfigFromJsonOrThrow(const json& m) {
  ModelConfig c;
  // Range-checked: nlohmann's get<int>() wraps 2^31 to -2^31 and 2^40 to 0.
  const std::pair<const char*, int*> ints[] = {
      {"vocab_size", &c.vocab_size}, {"d_model", &c.d_model},    {"n_layers", &c.n_layers},
      {"n_heads", &c.n_heads},       {"head_dim", &c.head_dim},  {"mlp_hidden", &c.mlp_hidden},
      {"conv_width", &c.conv_width}, {"bos_token", &c.bos_token}};
  for (const auto& [key, field] : ints) {
    absl::StatusOr<int> value = base::JsonToInt(m.at(key), absl::StrCat("model.", key));
    if (!value.ok()) return absl::DataLossError(value.status().message());
    *field = *value;
  }
  c.lambda_floor = m.at("lambda_floor").get<float>();
  c.gamma_cap = m.at("gamma_cap").get<float>();
  c.logit_softcap = m.at("logit_softcap").get<float>();
  c.attention_window = m.value("attention_window", 0);
  c.tie_embeddings = m.value("tie_embeddings", true);
  if (m.contains("rnn_width")) {
    absl::StatusOr<int> width = base::JsonToInt(m.at("rnn_width"), "model.rnn_width");
    if (!width.ok()) return absl::DataLossError(width.status().message());
    c.rnn_width = *width;
  }
  c.hawk_paper_init = m.value("hawk_init", std::string("released")) == "paper";
  for (auto [key, field] : {std::pair{"ssm_inner", &c.ssm_inner},
                            {"ssm_head_dim", &c.ssm_head_dim},
                            {"ssm_state", &c.ssm_state}}) {
    if (!m.contains(key)) continue;
    absl::StatusOr<int> value = base::JsonToInt(m.at(key), absl::StrCat("model.", key));
    if (!value.ok()) return absl::DataLossError(value.status().message());
    *field = *value;
  }
  auto kind = [](const std::string& name) -> absl::StatusOr<MixerKind> {
    for (const spec::MixerTraits& t : spec::kMixers) {
      if (name == t.name) return t.kind;
    }
    return absl::DataLossError(absl::StrCat("unknown mixer \"", name, "\""));
  };
  const std::string mixer = m.at("mixer").get<std::string>();
  if (mixer == "per_layer") {
    for (const std::string& name : m.at("layer_mixers").get<std::vector<std::string>>()) {
      absl::StatusOr<MixerKind> k = kind(name);
      if (!k.ok()) return k.status();
      c.layer_mixers.push_back(*k);
    }
  } else {
    absl::StatusOr<MixerKind> k = kind(mixer);
    if (!k.ok()) return k.status();
    c.mixer = *k;
  }
  c.cg_steps = c.MesaLayers() > 0 ? c.cg_steps : 0;
  if (absl::Status s = ValidateModelConfig(c); !s.ok()) {
    return absl::DataLossError(absl::StrCat("model: ", s.message()));
  }
  return c;
}

absl::StatusOr<CheckpointDescription> DescribeStepDir(const std::string& dir) {
  auto text = base::ReadFile(dir + "/" + kStateFile, kMaxStateBytes);
  if (!text.ok()) return absl::DataLossError(absl::StrCat(dir, ": ", text.status().message()));
  json state = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!IsCheckpointState(state)) {
    return absl::DataLossError(absl::StrCat(dir, ": state.json is not a ", kFormat, " document"));
  }
  try {
    WholeFields whole;
    CheckpointDescription d{
        .dir = dir,
        .step = whole.Get<int64_t>(state.at("step"), "step"),
        .spec_json = state.value("spec", json::object()).dump(),
        .tokenizer_json = state.contains("tokenizer") ? state["tokenizer"].dump() : ""};
    if (!whole.error.ok()) {
      return absl::DataLossError(absl::StrCat(dir, ": state.json: ", whole.error.message()));
    }
    absl::StatusOr<ModelConfig> model = ModelConfigFromJsonOrThrow(state.at("model"));
    if (!model.ok()) return absl::DataLossError(absl::StrCat(dir, ": ", model.status().message()));
    d.model = *std::move(model);
    return d;
  } catch (const json::exception& e) {
    return absl::DataLossError(absl::StrCat(dir, ": state.json: ", e.what()));
  }
}

}  // namespace

absl::StatusOr<CheckpointDescription> DescribeCheckpoint(const std::string& path) {
  absl::StatusOr<std::vector<std::string>> candidates = formats::CheckpointCandidates(path);
  if (!candidates.ok()) return candidates.status();
  std::string newest_error;
  for (const std::string& dir : *candidates) {
    absl::StatusOr<CheckpointDescription> d = DescribeStepDir(dir);
    if (d.ok()) return d;
    if (newest_error.empty()) newest_error = std::string(d.status().message());
  }
  return absl::DataLossError(
      absl::StrCat("no readable checkpoint under ", path, "; newest: ", newest_error));
}

absl::StatusOr<OpenedCheckpoint> OpenCheckpoint(const std::string& path,
                                                const CheckpointModelFor& model_for) {
  absl::StatusOr<std::vector<std::string>> candidates = formats::CheckpointCandidates(path);
  if (!candidates.ok()) return candidates.status();
  const bool explicit_step = candidates->size() == 1 && candidates->front() == path;
  std::vector<std::string> skipped;
  for (const std::string& dir : *candidates) {
    // Each step returns at once on a refusal that no older checkpoint can cure.
    auto opened = [&]() -> absl::StatusOr<OpenedCheckpoint> {
      OpenedCheckpoint out;
      absl::StatusOr<CheckpointDescription> described = DescribeStepDir(dir);
      if (!described.ok()) return described.status();
      out.description = *std::move(described);
      absl::StatusOr<ModelConfig> model = model_for
                                              ? model_for(out.description)
                                              : absl::StatusOr<ModelConfig>(out.description.model);
      if (!model.ok()) return model.status();
      out.model = *std::move(model);
      absl::StatusOr<CheckpointData> data =
          LoadStepDir(dir, out.model, ParamLayout(out.model), /*want_optimizer=*/false);
      if (!data.ok()) return data.status();
      out.data = *std::move(data);
      return out;
    }();
    if (opened.ok()) {
      opened->data.skipped = std::move(skipped);
      return opened;
    }
    if (explicit_step || opened.status().code() != absl::StatusCode::kDataLoss) {
      return opened.status();
    }
    skipped.push_back(std::string(opened.status().message()));
  }
  return absl::DataLossError(
      absl::StrCat("every checkpoint under ", path, " is damaged; newest: ", skipped.front()));
}

void WarnSkippedCheckpoints(const char* program, const std::vector<std::string>& skipped) {
  for (const std::string& why : skipped) {
    std::fprintf(stderr, "%s: warning: skipped a damaged checkpoint: %s\n", program, why.c_str());
  }
}

absl::StatusOr<TrainState> PeekCheckpointState(const std::string& root) {
  absl::StatusOr<std::vector<std::string>> candidates = formats::CheckpointCandidates(root);
  if (!candidates.ok()) return candidates.status();
  for (const std::string& dir : *candidates) {
    auto text = base::ReadFile(dir + "/" + kStateFile, kMaxStateBytes);
    if (!text.ok()) continue;
    json state = json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (!IsCheckpointState(state)) {
      continue;
    }
    try {
      TrainState out;
      WholeFields whole;
      out.step = whole.Get<int64_t>(state.at("step"), "step");
      if (!whole.error.ok()) continue;
      out.run_id = state.value("run_id", std::string());
      out.spec_json = state.value("spec", json::object()).dump();
      return out;
    } catch (const json::exception&) {
      continue;
    }
  }
  return absl::NotFoundError(absl::StrCat("no readable checkpoint under ", root));
}

absl::StatusOr<CheckpointData> LoadCheckpoint(const std::string& path, const ModelConfig& config,
                                              const ParamLayout& layout, bool want_optimizer) {
  std::error_code ec;
  if (fs::exists(path + "/" + kStateFile, ec)) {
    return LoadStepDir(path, config, layout, want_optimizer);
  }
  absl::StatusOr<std::vector<std::string>> found = formats::CheckpointCandidates(path);
  if (!found.ok()) return found.status();
  const std::vector<std::string>& candidates = *found;
  std::vector<std::string> skipped;
  for (const std::string& dir : candidates) {
    auto data = LoadStepDir(dir, config, layout, want_optimizer);
    if (data.ok()) {
      data->skipped = skipped;
      return data;
    }
    if (data.status().code() == absl::StatusCode::kFailedPrecondition) return data.status();
    skipped.push_back(std::string(data.status().message()));
  }
  return absl::DataLossError(
      absl::StrCat("every checkpoint under ", path, " is corrupt; newest: ", skipped.front()));
}

absl::StatusOr<ModelConfig> ModelConfigFromJson(const json& m) {
  if (!m.is_object()) return absl::DataLossError("the model configuration is not a JSON object");
  try {
    return ModelConfigFromJsonOrThrow(m);
  } catch (const json::exception& e) {
    return absl::DataLossError(absl::StrCat("the model configuration: ", e.what()));
  }
}

}  // namespace mesa::model
