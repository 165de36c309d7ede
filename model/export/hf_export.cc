#include "model/export/hf_export.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "formats/safetensors.h"
#include "google/protobuf/util/json_util.h"
#include "mesa/v1/job.pb.h"
#include "model/checkpoint/checkpoint.h"
#include "model/export/fla_config.h"
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

absl::Status WriteAll(const std::string& dir, const ModelConfig& model,
                      const std::vector<FlaTensor>& tensors, st::DType dtype,
                      const st::Metadata& metadata, const TokenizerExport& tokenizer) {
  std::vector<std::vector<std::byte>> encoded;
  std::vector<st::TensorView> views;
  encoded.reserve(tensors.size());
  for (const FlaTensor& t : tensors) {
    absl::StatusOr<std::vector<std::byte>> bytes = st::EncodeFloats(t.values, dtype);
    if (!bytes.ok()) return bytes.status();
    encoded.push_back(*std::move(bytes));
    views.push_back(st::MakeView(t.name, dtype, t.shape, encoded.back()));
  }
  if (absl::Status s = st::WriteFile(dir + "/model.safetensors", views, metadata); !s.ok()) {
    return s;
  }
  json config = FlaConfigJson(model);
  config["torch_dtype"] = dtype == st::DType::kF32 ? "float32" : "bfloat16";
  const json generation = {{"bos_token_id", model.bos_token},
                           {"eos_token_id", model.bos_token},
                           {"do_sample", false},
                           {"max_new_tokens", 64}};
  const json special = {{"bos_token", tokenizer.bos}, {"eos_token", tokenizer.bos}};
  json tokenizer_config = special;
  tokenizer_config["tokenizer_class"] = tokenizer.tokenizer_class;
  tokenizer_config["clean_up_tokenization_spaces"] = false;
  tokenizer_config["model_max_length"] = 1000000;
  std::vector<std::pair<std::string, std::string>> files = tokenizer.files;
  files.push_back({"config.json", config.dump(2) + "\n"});
  files.push_back({"generation_config.json", generation.dump(2) + "\n"});
  files.push_back({"tokenizer_config.json", tokenizer_config.dump(2) + "\n"});
  files.push_back({"special_tokens_map.json", special.dump(2) + "\n"});
  for (const auto& [name, bytes] : files) {
    if (absl::Status s = base::WriteFileAtomically(dir + "/" + name, bytes); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

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
  const ModelConfig& model = opened->model;
  if (absl::Status s = CheckExportable(model); !s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(described->dir, ": ", s.message(), " (docs/export.md)"));
  }
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
      {"mesa.embedding_scale",
       model.tie_embeddings
           ? "model.embeddings.weight = mesa's embedding * sqrt(hidden_size); lm_head.weight = "
             "mesa's embedding (mesa ties them and scales the lookup)"
           : "as stored (mesa's untied model: own lm_head.weight, unscaled lookup)"},
  };
  // Written beside the destination, renamed into place when complete.
  const std::string tmp = absl::StrCat(out, ".tmp.", getpid());
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) return absl::InternalError(absl::StrCat("creating ", tmp, ": ", ec.message()));
  absl::Status written = WriteAll(tmp, model, ToFlaTensors(model, layout, data->params.data()),
                                  dtype, metadata, *tokenizer);
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
  ExportResult result{.checkpoint_dir = described->dir, .skipped_checkpoints = data->skipped};
  for (const auto& entry : fs::directory_iterator(out, ec)) {
    result.files.push_back(entry.path().filename().string());
  }
  std::sort(result.files.begin(), result.files.end());
  return result;
}

}  // namespace mesa::model
