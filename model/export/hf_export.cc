#include "model/export/hf_export.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "base/file_util.h"
#include "formats/safetensors.h"
#include "google/protobuf/util/json_util.h"
#include "mesa/v1/job.pb.h"
#include "model/checkpoint/checkpoint.h"
#include "model/export/fla_config.h"
#include "model/export/model_card.h"
#include "model/export/remote_code.h"
#include "model/tokenizer/byte_tokenizer.h"
#include "nlohmann/json.hpp"
#include "spec/precision.h"
#include "spec/tokenizer_record.h"

namespace mesa::model {
namespace {

namespace fs = std::filesystem;
namespace st = mesa::safetensors;
using nlohmann::json;

// The text of the token `id` in a tokenizer.json: its added token, else its vocabulary entry.
absl::StatusOr<std::string> TokenContent(const std::string& tokenizer_json, int64_t id,
                                         const std::string& source) {
  const json doc = json::parse(tokenizer_json, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return absl::InvalidArgumentError(absl::StrCat(source, ": not JSON"));
  for (const json& t : doc.value("added_tokens", json::array())) {
    if (t.is_object() && t.value("id", int64_t{-1}) == id && t.contains("content")) {
      return t["content"].get<std::string>();
    }
  }
  if (doc.contains("model") && doc["model"].contains("vocab")) {
    for (const auto& [text, vocab_id] : doc["model"]["vocab"].items()) {
      if (vocab_id.is_number_integer() && vocab_id.get<int64_t>() == id) return text;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(source, ": no token with id ", id));
}

// The tokenizer's files as `name -> bytes` for the export, and its BOS token's text.
struct TokenizerExport {
  std::vector<std::pair<std::string, std::string>> files;
  std::string tokenizer_class;
  std::string bos;
};

absl::StatusOr<TokenizerExport> ExportTokenizer(const spec::TokenizerRecord& record,
                                                const std::vector<std::string>& given) {
  TokenizerExport out;
  if (record.kind == "byte") {
    out.files = {{"tokenizer.json", ByteTokenizer::HfTokenizerJson()}};
    out.tokenizer_class = "PreTrainedTokenizerFast";
    out.bos = ByteTokenizer::kBosName;
    return out;
  }
  if (record.kind != "hf" && record.kind != "gpt2") {
    return absl::FailedPreconditionError(
        absl::StrCat("the ", record.kind, " tokenizer cannot be exported"));
  }
  absl::StatusOr<std::vector<std::string>> paths = spec::TokenizerFiles(record, given);
  if (!paths.ok()) return paths.status();
  const size_t want = record.kind == "hf" ? 1 : 2;
  if (paths->size() != want) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ", record.kind, " tokenizer has ", want, " file(s) (",
                     record.kind == "hf" ? "tokenizer.json" : "encoder.json, vocab.bpe",
                     "), the checkpoint records none: pass them with --tokenizer_files"));
  }
  std::vector<std::string> contents;
  for (const std::string& path : *paths) {
    absl::StatusOr<std::string> bytes = base::ReadFile(path);
    if (!bytes.ok()) return bytes.status();
    contents.push_back(*std::move(bytes));
  }
  if (record.kind == "hf") {
    out.files = {{"tokenizer.json", contents[0]}};
    out.tokenizer_class = "PreTrainedTokenizerFast";
    absl::StatusOr<std::string> bos = TokenContent(contents[0], record.bos_id, (*paths)[0]);
    if (!bos.ok()) return bos.status();
    out.bos = *bos;
  } else {
    // GPT-2's encoder.json and vocab.bpe are Hugging Face's vocab.json and merges.txt.
    out.files = {{"vocab.json", contents[0]}, {"merges.txt", contents[1]}};
    out.tokenizer_class = "GPT2Tokenizer";
    out.bos = "<|endoftext|>";
  }
  return out;
}

// The weights as model.safetensors, or in order as shards of at most `max_shard_bytes` (a larger
// tensor alone) with model.safetensors.index.json, the names transformers gives them.
absl::Status WriteWeights(const std::string& dir, const std::vector<ExportTensor>& tensors,
                          st::DType dtype, const st::Metadata& metadata, int64_t max_shard_bytes,
                          std::vector<std::pair<std::string, std::string>>* index_file) {
  std::vector<std::vector<size_t>> shards(1);
  int64_t shard_bytes = 0, total_bytes = 0;
  const int64_t width = dtype == st::DType::kF32 ? 4 : 2;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const int64_t bytes = static_cast<int64_t>(tensors[i].values.size()) * width;
    if (!shards.back().empty() && shard_bytes + bytes > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(i);
    shard_bytes += bytes;
    total_bytes += bytes;
  }
  json weight_map = json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string name = shards.size() == 1 ? "model.safetensors"
                                                : absl::StrFormat("model-%05d-of-%05d.safetensors",
                                                                  s + 1, shards.size());
    std::vector<std::vector<std::byte>> encoded;
    std::vector<st::TensorView> views;
    encoded.reserve(shards[s].size());
    for (size_t i : shards[s]) {
      absl::StatusOr<std::vector<std::byte>> bytes = st::EncodeFloats(tensors[i].values, dtype);
      if (!bytes.ok()) return bytes.status();
      encoded.push_back(*std::move(bytes));
      views.push_back(st::MakeView(tensors[i].name, dtype, tensors[i].shape, encoded.back()));
      weight_map[tensors[i].name] = name;
    }
    if (absl::Status s = st::WriteFile(dir + "/" + name, views, metadata); !s.ok()) return s;
  }
  if (shards.size() > 1) {
    const json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
    index_file->push_back({"model.safetensors.index.json", index.dump(2) + "\n"});
  }
  return absl::OkStatus();
}

struct ExportContent {
  json config;
  std::vector<ExportTensor> tensors;
  std::vector<std::pair<std::string, std::string>> files;  // code and model card, name -> text
};

absl::Status WriteAll(const std::string& dir, const ModelConfig& model, ExportContent content,
                      st::DType dtype, const st::Metadata& metadata, int64_t max_shard_bytes,
                      const TokenizerExport& tokenizer) {
  std::vector<std::pair<std::string, std::string>> files = tokenizer.files;
  if (absl::Status s = WriteWeights(dir, content.tensors, dtype, metadata, max_shard_bytes, &files);
      !s.ok()) {
    return s;
  }
  content.config["torch_dtype"] = dtype == st::DType::kF32 ? "float32" : "bfloat16";
  json generation = {{"bos_token_id", model.bos_token},
                     {"eos_token_id", model.bos_token},
                     {"do_sample", false},
                     {"max_new_tokens", 64}};
  if (content.config.contains("use_cache")) generation["use_cache"] = content.config["use_cache"];
  const json special = {{"bos_token", tokenizer.bos}, {"eos_token", tokenizer.bos}};
  json tokenizer_config = special;
  tokenizer_config["tokenizer_class"] = tokenizer.tokenizer_class;
  tokenizer_config["clean_up_tokenization_spaces"] = false;
  tokenizer_config["model_max_length"] = 1000000;
  files.push_back({"config.json", content.config.dump(2) + "\n"});
  files.push_back({"generation_config.json", generation.dump(2) + "\n"});
  files.push_back({"tokenizer_config.json", tokenizer_config.dump(2) + "\n"});
  files.push_back({"special_tokens_map.json", special.dump(2) + "\n"});
  for (auto& file : content.files) files.push_back(std::move(file));
  for (const auto& [name, bytes] : files) {
    if (absl::Status s = base::WriteFileAtomically(dir + "/" + name, bytes); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int64_t> ParseShardSize(absl::string_view text) {
  static constexpr std::pair<absl::string_view, int64_t> kUnits[] = {
      {"GB", 1000 * 1000 * 1000}, {"MB", 1000 * 1000}, {"KB", 1000}, {"B", 1}};
  absl::string_view number = text;
  int64_t unit = 1;
  for (const auto& [suffix, factor] : kUnits) {
    if (absl::ConsumeSuffix(&number, suffix)) {
      unit = factor;
      break;
    }
  }
  int64_t value = 0;
  if (!absl::SimpleAtoi(number, &value) || value <= 0 ||
      value > int64_t{1000} * 1000 * 1000 * 1000 / unit || value * unit < 1000) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected a size from 1KB to 1000GB such as 5GB, 200MB or 64KB, got \"", text, "\""));
  }
  return value * unit;
}

absl::StatusOr<ModelConfig> TrainedModel(const CheckpointDescription& described) {
  // The CG steps (FLA's max_cg_step_*) are the spec's, not the architecture's: the recorded spec
  // (protobuf's JSON mapping of the JobSpec) with the trainer's defaults applied. Fields this
  // version does not know are skipped: a newer trainer, or mesa-import's provenance, may add them.
  mesa::v1::JobSpec spec;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  const auto parsed = google::protobuf::util::JsonStringToMessage(
      described.spec_json.empty() ? "{}" : described.spec_json, &spec, options);
  if (!parsed.ok()) {
    return absl::DataLossError(absl::StrCat(
        described.dir, ": state.json: the recorded spec: ", parsed.message().as_string()));
  }
  ModelConfig model = described.model;
  model.cg_steps = TrainingCgSteps(spec.model(), model.MesaLayers() > 0);
  return model;
}

absl::StatusOr<ExportResult> ExportToHf(const ExportOptions& options) {
  if (options.checkpoint.empty() || options.out_dir.empty()) {
    return absl::InvalidArgumentError("--checkpoint and --out are required");
  }
  if (options.format != "auto" && options.format != "fla" && options.format != "remote_code") {
    return absl::InvalidArgumentError(
        absl::StrCat("--format must be auto, fla or remote_code, got \"", options.format, "\""));
  }
  if (options.max_shard_bytes < 1000) {
    return absl::InvalidArgumentError(
        absl::StrCat("the shard size must be at least 1KB, got ", options.max_shard_bytes));
  }
  st::DType dtype;
  // The project's precision names (spec::ParsePrecision: training.precision, mesa-logits
  // --precision), and Hugging Face's torch_dtype names for the same two; "auto" means nothing here.
  const std::string name = options.dtype == "float32"    ? "fp32"
                           : options.dtype == "bfloat16" ? "bf16"
                                                         : options.dtype;
  const absl::StatusOr<spec::Precision> precision = spec::ParsePrecision(name);
  if (precision.ok() && *precision == spec::Precision::kFp32) {
    dtype = st::DType::kF32;
  } else if (precision.ok() && *precision == spec::Precision::kBf16) {
    dtype = st::DType::kBF16;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--dtype must be fp32 (or float32) or bf16 (or bfloat16), got \"", options.dtype, "\""));
  }
  const std::string out = fs::path(options.out_dir).lexically_normal().string();
  std::error_code ec;
  if (fs::exists(out, ec)) {
    return absl::AlreadyExistsError(
        absl::StrCat(out, " exists; mesa-export writes a new directory and replaces nothing"));
  }
  absl::StatusOr<OpenedCheckpoint> opened = OpenCheckpoint(options.checkpoint, TrainedModel);
  if (!opened.ok()) return opened.status();
  const CheckpointDescription* described = &opened->description;
  // The function the model was trained as: with document resets when the run had them.
  opened->model.reset_at_bos = opened->data.state.reset_at_bos.value_or(false);
  const ModelConfig& model = opened->model;
  ExportResult result{.checkpoint_dir = described->dir,
                      .skipped_checkpoints = opened->data.skipped};
  const absl::Status fla = CheckExportable(model);
  if (options.format == "fla" && !fla.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        described->dir, ": ", fla.message(),
        "; --format=remote_code (or auto) exports it exactly with its own modeling code "
        "(docs/export.md)"));
  }
  result.format = options.format == "auto" ? (fla.ok() ? "fla" : "remote_code") : options.format;
  if (options.format == "auto" && !fla.ok()) result.format_reason = std::string(fla.message());
  absl::StatusOr<spec::TokenizerRecord> record =
      spec::CheckpointTokenizer(described->tokenizer_json, described->spec_json, described->dir);
  if (!record.ok()) return record.status();
  absl::StatusOr<TokenizerExport> tokenizer = ExportTokenizer(*record, options.tokenizer_files);
  if (!tokenizer.ok()) return tokenizer.status();
  const ParamLayout layout(model);
  const CheckpointData* data = &opened->data;

  const st::Metadata metadata = {
      {"format", "pt"},
      {"mesa.source_checkpoint", described->dir},
      {"mesa.step", absl::StrCat(described->step)},
      {"mesa.config", ModelConfigJson(model)},
      {"mesa.tokenizer", spec::TokenizerRecordJson(*record)},
      {"mesa.format", result.format},
      {"mesa.embedding_scale",
       result.format == "remote_code"
           ? "as stored (the modeling code scales the lookup and ties the head itself)"
       : model.tie_embeddings
           ? "model.embeddings.weight = mesa's embedding * sqrt(hidden_size); lm_head.weight = "
             "mesa's embedding (mesa ties them and scales the lookup)"
           : "as stored (mesa's untied model: own lm_head.weight, unscaled lookup)"},
  };
  ExportContent content;
  if (result.format == "fla") {
    content.config = FlaConfigJson(model);
    content.tensors = ToFlaTensors(model, layout, data->params.data());
  } else {
    content.config = RemoteCodeConfigJson(model);
    for (const ParamTensor& t : layout.tensors()) {
      const float* values = data->params.data() + t.offset;
      content.tensors.push_back({t.name, t.shape, {values, values + t.size}});
    }
    content.files = RemoteCodeFiles();
  }
  absl::StatusOr<std::string> card = ModelCard({.checkpoint = described,
                                                .model = &model,
                                                .format = result.format,
                                                .format_reason = result.format_reason,
                                                .eval_results = options.eval_results});
  if (!card.ok()) return card.status();
  content.files.push_back({"README.md", *std::move(card)});
  // Written beside the destination, renamed into place when complete.
  const std::string tmp = absl::StrCat(out, ".tmp.", getpid());
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) return absl::InternalError(absl::StrCat("creating ", tmp, ": ", ec.message()));
  absl::Status written = WriteAll(tmp, model, std::move(content), dtype, metadata,
                                  options.max_shard_bytes, *tokenizer);
  if (written.ok()) written = base::SyncDirectory(tmp);
  if (written.ok()) {
    fs::rename(tmp, out, ec);
    if (ec) written = absl::InternalError(absl::StrCat("renaming ", tmp, ": ", ec.message()));
  }
  if (!written.ok()) {
    fs::remove_all(tmp, ec);
    return written;
  }
  const std::string parent = fs::path(out).parent_path().string();
  if (absl::Status s = base::SyncDirectory(parent.empty() ? "." : parent); !s.ok()) return s;
  for (const auto& entry : fs::directory_iterator(out, ec)) {
    result.files.push_back(entry.path().filename().string());
  }
  std::sort(result.files.begin(), result.files.end());
  return result;
}

}  // namespace mesa::model
