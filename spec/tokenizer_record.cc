#include "spec/tokenizer_record.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "base/file_util.h"
#include "base/sha256.h"
#include "formats/checkpoint_layout.h"
#include "formats/shard_manifest.h"
#include "nlohmann/json.hpp"
#include "spec/job_refs.h"
#include "spec/path_list.h"

namespace mesa::spec {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// mesa_data.json and state.json are small; a tokenizer file (Llama-3's is 9 MB) is bounded too.
constexpr size_t kMaxRecordBytes = 16 << 20;
constexpr size_t kMaxTokenizerFileBytes = size_t{1} << 30;

std::string Describe(const TokenizerRecord& r) {
  std::string out = r.kind;
  if (!r.files.empty()) {
    std::vector<std::string> hashes;
    for (const TokenizerFile& f : r.files) hashes.push_back(f.sha256.substr(0, 12));
    absl::StrAppend(&out, " (SHA-256 ", absl::StrJoin(hashes, ", "), "...)");
  }
  if (r.vocab_size > 0) absl::StrAppend(&out, ", ", r.vocab_size, " ids");
  return out;
}

// The step directory whose state.json a checkpoint path stands for, or "" when there is none: the
// first candidate (formats::CheckpointCandidates) that has one.
std::string StepDirOf(const std::string& path) {
  absl::StatusOr<std::vector<std::string>> candidates = formats::CheckpointCandidates(path);
  if (!candidates.ok()) return "";
  std::error_code ec;
  for (const std::string& dir : *candidates) {
    if (fs::exists(dir + "/" + formats::kCheckpointStateFile, ec)) return dir;
  }
  return "";
}

}  // namespace

std::string TokenizerRecordJson(const TokenizerRecord& r) {
  json files = json::array();
  for (const TokenizerFile& f : r.files) files.push_back({{"path", f.path}, {"sha256", f.sha256}});
  return json{
      {"kind", r.kind}, {"vocab_size", r.vocab_size}, {"bos_id", r.bos_id}, {"files", files}}
      .dump();
}

absl::StatusOr<TokenizerRecord> TokenizerRecordFromJson(absl::string_view text,
                                                        absl::string_view source) {
  const json doc = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  auto bad = [&](absl::string_view what) {
    return absl::DataLossError(absl::StrCat(source, ": malformed tokenizer record: ", what));
  };
  if (!doc.is_object()) return bad("not a JSON object");
  // A checkpoint's record, or mesa_data.json's fields.
  const bool shard_set = doc.contains("tokenizer") && doc["tokenizer"].is_string();
  const char* kind_key = shard_set ? "tokenizer" : "kind";
  const char* files_key = shard_set ? "tokenizer_files" : "files";
  TokenizerRecord r;
  if (!doc.contains(kind_key) || !doc[kind_key].is_string()) return bad("no tokenizer kind");
  r.kind = doc[kind_key].get<std::string>();
  if (doc.contains("vocab_size")) {
    if (!doc["vocab_size"].is_number_integer()) return bad("vocab_size is not an integer");
    r.vocab_size = doc["vocab_size"].get<int64_t>();
  }
  if (doc.contains("bos_id")) {
    if (!doc["bos_id"].is_number_integer()) return bad("bos_id is not an integer");
    r.bos_id = doc["bos_id"].get<int64_t>();
  }
  if (doc.contains(files_key)) {
    if (!doc[files_key].is_array()) return bad(absl::StrCat(files_key, " is not an array"));
    for (const json& f : doc[files_key]) {
      if (!f.is_object() || !f.contains("sha256") || !f["sha256"].is_string()) {
        return bad(absl::StrCat(files_key, ": an entry without a string sha256"));
      }
      r.files.push_back({f.value("path", std::string()), f["sha256"].get<std::string>()});
    }
  }
  return r;
}

std::optional<TokenizerRecord> BuiltinTokenizer(absl::string_view kind) {
  if (kind.empty() || kind == "byte") return TokenizerRecord{"byte", 257, 256, {}};
  if (kind == "gpt2") return TokenizerRecord{"gpt2", 50257, 50256, {}};
  return std::nullopt;
}

absl::StatusOr<std::string> FileSha256(const std::string& path) {
  return base::FileSha256(path, kMaxTokenizerFileBytes);
}

absl::StatusOr<std::optional<TokenizerRecord>> ReadShardSetTokenizer(const std::string& dir) {
  const std::string path = formats::ShardManifestPath(dir);
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::optional<TokenizerRecord>();
  absl::StatusOr<std::string> text = base::ReadFile(path, kMaxRecordBytes);
  if (!text.ok()) return text.status();
  absl::StatusOr<TokenizerRecord> record = TokenizerRecordFromJson(*text, path);
  if (!record.ok()) return record.status();
  return std::optional<TokenizerRecord>(*std::move(record));
}

absl::StatusOr<std::optional<TokenizerRecord>> ReadCheckpointTokenizer(const std::string& path,
                                                                       int64_t* model_vocab) {
  const std::string dir = StepDirOf(path);
  if (dir.empty()) return std::optional<TokenizerRecord>();
  const std::string state_path = dir + "/state.json";
  absl::StatusOr<std::string> text = base::ReadFile(state_path, kMaxRecordBytes);
  if (!text.ok()) return text.status();
  const json state = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  // A damaged state.json is the checkpoint loader's to report (it falls back to older steps).
  if (!state.is_object()) return std::optional<TokenizerRecord>();
  if (model_vocab != nullptr && state.contains("model") && state["model"].is_object() &&
      state["model"].contains("vocab_size") && state["model"]["vocab_size"].is_number_integer()) {
    *model_vocab = state["model"]["vocab_size"].get<int64_t>();
  }
  if (!state.contains("tokenizer")) return std::optional<TokenizerRecord>();
  absl::StatusOr<TokenizerRecord> record =
      TokenizerRecordFromJson(state["tokenizer"].dump(), state_path);
  if (!record.ok()) return record.status();
  return std::optional<TokenizerRecord>(*std::move(record));
}

absl::Status CompareTokenizers(absl::string_view field, const TokenizerRecord& want,
                               const TokenizerRecord& found, absl::string_view where) {
  const bool files_differ =
      !want.files.empty() && !found.files.empty() && want.files != found.files;
  const bool vocab_differs =
      want.vocab_size > 0 && found.vocab_size > 0 && want.vocab_size != found.vocab_size;
  if (want.kind != found.kind || files_differ || vocab_differs) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": the job's tokenizer is ", Describe(want), ", but ", where, " ", Describe(found)));
  }
  return absl::OkStatus();
}

absl::StatusOr<TokenizerRecord> CheckJobTokenizer(const mesa::v1::JobSpec& spec) {
  const mesa::v1::DataConfig& d = spec.data();
  TokenizerRecord job;
  if (std::optional<TokenizerRecord> builtin = BuiltinTokenizer(d.tokenizer())) {
    job = *builtin;
  } else {
    job.kind = d.tokenizer();
  }
  std::error_code ec;
  if (!d.tokenizer_file().empty() && fs::exists(d.tokenizer_file(), ec)) {
    absl::StatusOr<std::string> sha = FileSha256(d.tokenizer_file());
    if (!sha.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("data.tokenizer_file: ", sha.status().message()));
    }
    job.files = {{d.tokenizer_file(), *sha}};
  }
  // Every shard set the patterns reach: the directories of the files they match.
  std::set<std::string> dirs;
  for (auto [field, list] :
       {std::pair{"data.train_path", d.train_path()}, std::pair{"data.val_path", d.val_path()}}) {
    for (const std::string& item : PathListItems(list)) {
      for (const std::string& file : ExpandPatternItem(item)) {
        if (fs::is_regular_file(file, ec)) dirs.insert(fs::path(file).parent_path().string());
      }
    }
  }
  for (const std::string& dir : dirs) {
    absl::StatusOr<std::optional<TokenizerRecord>> data = ReadShardSetTokenizer(dir);
    if (!data.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("data: ", data.status().message()));
    }
    if (!data->has_value()) continue;
    const std::string where =
        absl::StrCat("the shards in ", dir, " (mesa_data.json) were written with");
    const char* field = (*data)->kind != job.kind ? "data.tokenizer" : "data.tokenizer_file";
    if (absl::Status s = CompareTokenizers(field, job, **data, where); !s.ok()) return s;
    // The data knows what a spec cannot say: the vocabulary and BOS of a tokenizer file.
    if (job.vocab_size <= 0) job.vocab_size = (*data)->vocab_size;
    if (job.bos_id < 0) job.bos_id = (*data)->bos_id;
    if (job.files.empty()) job.files = (*data)->files;
  }
  const int64_t model_vocab = spec.model().vocab_size();
  if (job.vocab_size > 0 && model_vocab < job.vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.vocab_size: ", model_vocab,
                     " is smaller than the vocabulary of the tokenizer (", Describe(job), ")"));
  }
  for (auto [field, path] : {std::pair{"checkpoint.init_from", spec.checkpoint().init_from()},
                             std::pair{"eval.checkpoint", spec.eval().checkpoint()}}) {
    if (path.empty() || IsJobRef(path)) continue;  // a reference: checked once resolved
    int64_t checkpoint_vocab = 0;
    absl::StatusOr<std::optional<TokenizerRecord>> found =
        ReadCheckpointTokenizer(path, &checkpoint_vocab);
    if (!found.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": ", found.status().message()));
    }
    const std::string where = absl::StrCat("the checkpoint ", path);
    if (found->has_value()) {
      if (absl::Status s =
              CompareTokenizers(field, job, **found, absl::StrCat(where, " was trained with"));
          !s.ok()) {
        return s;
      }
    }
    if (checkpoint_vocab > 0 && checkpoint_vocab != model_vocab) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": model.vocab_size is ", model_vocab,
                                                     ", but ", where, " has an embedding of ",
                                                     checkpoint_vocab, " rows"));
    }
  }
  return job;
}

absl::StatusOr<std::vector<std::string>> TokenizerFiles(const TokenizerRecord& record,
                                                        const std::vector<std::string>& given) {
  std::vector<std::string> files = given;
  if (files.empty()) {
    for (const TokenizerFile& f : record.files) files.push_back(f.path);
  }
  if (record.files.empty()) return files;  // nothing recorded to check against
  if (files.size() != record.files.size()) {
    return absl::InvalidArgumentError(absl::StrCat("the checkpoint's ", record.kind,
                                                   " tokenizer has ", record.files.size(),
                                                   " file(s), ", files.size(), " given"));
  }
  for (size_t i = 0; i < files.size(); ++i) {
    absl::StatusOr<std::string> sha = FileSha256(files[i]);
    if (!sha.ok()) {
      return absl::NotFoundError(
          absl::StrCat("tokenizer file ", files[i], ": ", sha.status().message()));
    }
    if (*sha != record.files[i].sha256) {
      return absl::FailedPreconditionError(absl::StrCat(
          "tokenizer file ", files[i], " is not the one the checkpoint was trained with (SHA-256 ",
          *sha, ", recorded ", record.files[i].sha256, " for ", record.files[i].path, ")"));
    }
  }
  return files;
}

absl::StatusOr<TokenizerRecord> CheckpointTokenizer(absl::string_view tokenizer_json,
                                                    absl::string_view spec_json,
                                                    absl::string_view dir) {
  if (!tokenizer_json.empty()) return TokenizerRecordFromJson(tokenizer_json, dir);
  const json spec = json::parse(spec_json.begin(), spec_json.end(), nullptr, false);
  std::string kind = "byte";
  if (spec.is_object() && spec.contains("data") && spec["data"].is_object()) {
    kind = spec["data"].value("tokenizer", std::string("byte"));
  }
  std::optional<TokenizerRecord> builtin = BuiltinTokenizer(kind);
  if (!builtin) {
    return absl::DataLossError(
        absl::StrCat(dir, ": the checkpoint records no tokenizer file for ", kind));
  }
  return *builtin;
}

}  // namespace mesa::spec
