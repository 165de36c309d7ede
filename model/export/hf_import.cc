#include "model/export/hf_import.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "formats/safetensors.h"
#include "model/checkpoint/checkpoint.h"
#include "model/export/fla_config.h"
#include "model/export/remote_code.h"
#include "model/tokenizer/hf_tokenizer.h"
#include "nlohmann/json.hpp"
#include "spec/tokenizer_record.h"

namespace mesa::model {
namespace {

namespace fs = std::filesystem;
namespace st = mesa::safetensors;
using nlohmann::json;

constexpr size_t kMaxConfigBytes = 1 << 20;
// bf16 keeps 8 significant bits: an exported bf16 embedding is lm_head·sqrt(C) to within this
// fraction of the largest entry.
constexpr double kEmbeddingTolerance = 1.0 / 128;

// Whether FLA's two tensors are an export of a tied model of ours: model.embeddings.weight is
// lm_head.weight · sqrt(C) (exactly so for float32, the forward's own product). Such a directory
// imports tied, with lm_head.weight as our embedding, so export -> import is the identity.
bool IsTiedExport(const ModelConfig& model, const std::vector<float>& embeddings,
                  const std::vector<float>& head) {
  const float scale = std::sqrt(static_cast<float>(model.d_model));
  double worst = 0, largest = 0;
  for (size_t i = 0; i < head.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(embeddings[i]) - head[i] * scale));
    largest = std::max(largest, std::abs(static_cast<double>(embeddings[i])));
  }
  return worst <= kEmbeddingTolerance * largest;
}

// The tokenizer to record: the one an export of ours carries (its files re-pointed at this
// directory, hashes checked), else the directory's tokenizer.json if our loader reads it.
absl::StatusOr<std::string> TokenizerRecordFor(const st::SafetensorsFile& weights,
                                               const ModelConfig& model, const std::string& dir) {
  auto it = weights.metadata().find("mesa.tokenizer");
  std::error_code ec;
  if (it != weights.metadata().end()) {
    absl::StatusOr<spec::TokenizerRecord> record =
        spec::TokenizerRecordFromJson(it->second, dir + "/model.safetensors");
    if (!record.ok()) return record.status();
    std::vector<std::string> here;
    if (record->kind == "hf") here = {dir + "/tokenizer.json"};
    if (record->kind == "gpt2") here = {dir + "/vocab.json", dir + "/merges.txt"};
    absl::StatusOr<std::vector<std::string>> files = spec::TokenizerFiles(*record, here);
    if (!files.ok()) return files.status();
    for (size_t i = 0; i < files->size() && i < record->files.size(); ++i) {
      record->files[i].path = (*files)[i];
    }
    return spec::TokenizerRecordJson(*record);
  }
  const std::string path = dir + "/tokenizer.json";
  if (!fs::exists(path, ec)) return std::string();
  absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> tokenizer = LoadHfTokenizer(path);
  if (!tokenizer.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": ", tokenizer.status().message(),
                     " (mesa-train reads byte-level BPE tokenizer.json files only)"));
  }
  if ((*tokenizer)->bos_id() != model.bos_token || (*tokenizer)->vocab_size() > model.vocab_size) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": BOS ", (*tokenizer)->bos_id(), " and ", (*tokenizer)->vocab_size(),
                     " ids do not fit config.json's bos_token_id ", model.bos_token,
                     " and vocab_size ", model.vocab_size));
  }
  absl::StatusOr<std::string> sha = spec::FileSha256(path);
  if (!sha.ok()) return sha.status();
  return spec::TokenizerRecordJson({.kind = "hf",
                                    .vocab_size = (*tokenizer)->vocab_size(),
                                    .bos_id = (*tokenizer)->bos_id(),
                                    .files = {{path, *sha}}});
}

// The weights of a Hugging Face directory: model.safetensors, or the shards its
// model.safetensors.index.json names (each file read once).
class ExportWeights {
 public:
  static absl::StatusOr<ExportWeights> Read(const std::string& dir) {
    ExportWeights out;
    std::error_code ec;
    const std::string single = dir + "/model.safetensors";
    const std::string index_path = dir + "/model.safetensors.index.json";
    std::vector<std::string> files;
    if (fs::exists(single, ec)) {
      files.push_back(single);
    } else if (fs::exists(index_path, ec)) {
      absl::StatusOr<std::string> text = base::ReadFile(index_path, kMaxConfigBytes);
      if (!text.ok()) return absl::InvalidArgumentError(text.status().message());
      const json index = json::parse(*text, nullptr, /*allow_exceptions=*/false);
      if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
        return absl::InvalidArgumentError(absl::StrCat(index_path, ": no weight_map object"));
      }
      for (const auto& [name, file] : index["weight_map"].items()) {
        const std::string shard = file.is_string() ? file.get<std::string>() : "";
        // A shard is a file of this directory, never a path elsewhere.
        if (shard.empty() || shard.find('/') != std::string::npos || shard == "." ||
            shard == "..") {
          return absl::InvalidArgumentError(
              absl::StrCat(index_path, ": ", name, ": not a file name of this directory"));
        }
        if (std::find(files.begin(), files.end(), dir + "/" + shard) == files.end()) {
          files.push_back(dir + "/" + shard);
        }
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          dir,
          ": neither model.safetensors nor model.safetensors.index.json (PyTorch .bin "
          "checkpoints are not read; save with save_pretrained(..., safe_serialization=True))"));
    }
    for (const std::string& path : files) {
      absl::StatusOr<st::SafetensorsFile> file = st::SafetensorsFile::ReadFile(path);
      if (!file.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": ", file.status().message()));
      }
      out.paths_.push_back(path);
      out.files_.push_back(*std::move(file));
    }
    return out;
  }
  // The tensor and the file holding it, or nullptr.
  std::pair<const st::TensorView*, std::string> Find(const std::string& name) const {
    for (size_t i = 0; i < files_.size(); ++i) {
      if (const st::TensorView* view = files_[i].Find(name)) return {view, paths_[i]};
    }
    return {nullptr, ""};
  }
  const st::SafetensorsFile& first() const { return files_.front(); }

 private:
  std::vector<std::string> paths_;
  std::vector<st::SafetensorsFile> files_;
};

// Writes the imported model as a checkpoint root with the tokenizer `weights` records.
absl::StatusOr<ImportResult> SaveImport(const std::string& out, const std::string& dir,
                                        const ModelConfig& model, const ParamLayout& layout,
                                        const std::vector<float>& params,
                                        const st::SafetensorsFile& weights) {
  absl::StatusOr<std::string> tokenizer = TokenizerRecordFor(weights, model, dir);
  if (!tokenizer.ok()) return tokenizer.status();
  TrainState state;
  state.tokenizer_json = *tokenizer;
  // Resets at document starts are part of the function a remote-code export computes; recorded
  // as a run's data.reset_at_bos is, so the tools that open the checkpoint compute it too.
  if (model.reset_at_bos) state.reset_at_bos = true;
  // Without a tokenizer, none is assumed (generation then asks for one). The CG steps are the
  // spec's, not the architecture's (TrainedModel reads them back), so config.json's
  // max_cg_step_training (or cg_steps) is recorded as model.cg_steps; 0 there means the default,
  // so 0 is left out.
  json recorded = {{"imported_from", dir}, {"data", {{"tokenizer", "none"}}}};
  if (model.cg_steps > 0) recorded["model"] = {{"cg_steps", model.cg_steps}};
  state.spec_json = recorded.dump();
  absl::StatusOr<std::string> step_dir =
      SaveCheckpoint(out, model, layout, params.data(), nullptr, nullptr, state, /*keep_last=*/1);
  if (!step_dir.ok()) return step_dir.status();
  return ImportResult{.checkpoint_dir = *step_dir,
                      .model_json = ModelConfigJson(model),
                      .has_tokenizer = !tokenizer->empty()};
}

}  // namespace

absl::StatusOr<ImportResult> ImportFromHf(const ImportOptions& options) {
  if (options.hf_dir.empty() || options.out.empty()) {
    return absl::InvalidArgumentError("--hf_dir and --out are required");
  }
  std::error_code ec;
  if (fs::exists(options.out, ec) && !fs::is_empty(options.out, ec)) {
    return absl::AlreadyExistsError(
        absl::StrCat(options.out, " exists and is not empty; mesa-import writes a new root"));
  }
  const std::string dir = options.hf_dir;
  absl::StatusOr<std::string> config_text = base::ReadFile(dir + "/config.json", kMaxConfigBytes);
  if (!config_text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, ": config.json: ", config_text.status().message()));
  }
  const json config = json::parse(*config_text, nullptr, /*allow_exceptions=*/false);
  // Our remote-code exports carry our configuration and our tensors as they are.
  const bool remote_code = config.is_object() && config.value("model_type", std::string()) ==
                                                     std::string(kRemoteCodeModelType);
  absl::StatusOr<ModelConfig> model = remote_code
                                          ? ModelConfigFromRemoteCode(config, dir + "/config.json")
                                          : ModelConfigFromFla(config, dir + "/config.json");
  if (!model.ok()) return model.status();
  absl::StatusOr<ExportWeights> weights = ExportWeights::Read(dir);
  if (!weights.ok()) return weights.status();
  auto read = [&](const std::string& name,
                  const std::vector<int64_t>& shape) -> absl::StatusOr<std::vector<float>> {
    const auto [view, file] = weights->Find(name);
    if (view == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(dir, ": no tensor ", name));
    }
    if (view->shape != shape) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ": ", name, " has another shape than config.json gives"));
    }
    absl::StatusOr<std::vector<float>> values = st::ToFiniteFloat32(*view);
    if (!values.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(file, ": ", values.status().message()));
    }
    return values;
  };
  // Every tensor of `layout` from `values_of(tensor)`, saved as the checkpoint root.
  auto save = [&](const ParamLayout& layout, auto&& values_of) -> absl::StatusOr<ImportResult> {
    std::vector<float> params(layout.total(), 0.0f);
    for (const ParamTensor& t : layout.tensors()) {
      absl::StatusOr<std::vector<float>> values = values_of(t);
      if (!values.ok()) return values.status();
      std::copy(values->begin(), values->end(), params.begin() + t.offset);
    }
    return SaveImport(options.out, dir, *model, layout, params, weights->first());
  };
  if (remote_code) {
    return save(ParamLayout(*model), [&](const ParamTensor& t) { return read(t.name, t.shape); });
  }
  // The head decides tied or untied (docs/export.md). FLA's tie_word_embeddings (its head is the
  // unscaled embedding) has no tied counterpart here, since our tied lookup is scaled: it imports
  // untied with lm_head.weight a copy of the embedding (the same function; fine-tuning unties).
  const std::vector<int64_t> vocab_shape = {model->vocab_size, model->d_model};
  absl::StatusOr<std::vector<float>> table = read("model.embeddings.weight", vocab_shape);
  if (!table.ok()) return table.status();
  const bool fla_tied = config.contains("tie_word_embeddings") &&
                        config["tie_word_embeddings"].is_boolean() &&
                        config["tie_word_embeddings"].get<bool>();
  absl::StatusOr<std::vector<float>> head =
      fla_tied ? absl::StatusOr<std::vector<float>>(*table) : read("lm_head.weight", vocab_shape);
  if (!head.ok()) return head.status();
  model->tie_embeddings = !fla_tied && IsTiedExport(*model, *table, *head);
  const ParamLayout layout(*model);
  return save(layout, [&](const ParamTensor& t) {
    return t.offset == layout.head()         ? head
           : t.offset == layout.embeddings() ? table
                                             : read(t.name, t.shape);
  });
}

}  // namespace mesa::model
