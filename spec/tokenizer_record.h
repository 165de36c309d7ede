// Which tokenizer a job's data, the job itself and its checkpoints use, and whether they agree
// (docs/formats.md, "Tokenizer records"). mesa-data writes the record into mesa_data.json beside
// the shards; the trainer copies it into every checkpoint's state.json. The coordinator (at submit,
// where it holds the roots) and mesa-train (at start) check a spec against the files with
// CheckJobTokenizer, so a mismatch fails before any work, naming the field.
#ifndef MESANET_SPEC_TOKENIZER_RECORD_H_
#define MESANET_SPEC_TOKENIZER_RECORD_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "mesa/v1/job.pb.h"

namespace mesa::spec {

struct TokenizerFile {
  std::string path;  // as the writer named it (informational; the hash is what is compared)
  std::string sha256;
  bool operator==(const TokenizerFile& o) const { return sha256 == o.sha256; }
};

struct TokenizerRecord {
  std::string kind;                  // "byte" | "gpt2" | "hf" | "spm"
  int64_t vocab_size = 0;            // 0: not known
  int64_t bos_id = -1;               // -1: not known
  std::vector<TokenizerFile> files;  // empty for byte, or where not known
};

// {"kind", "vocab_size", "bos_id", "files": [{"path", "sha256"}]}.
std::string TokenizerRecordJson(const TokenizerRecord& record);
// The inverse; also reads mesa_data.json's form (tokenizer, vocab_size, bos_id, tokenizer_files).
// DataLoss naming `source` for a malformed record.
absl::StatusOr<TokenizerRecord> TokenizerRecordFromJson(absl::string_view json,
                                                        absl::string_view source);

// The record of byte and gpt2, which need no file to know their ids.
std::optional<TokenizerRecord> BuiltinTokenizer(absl::string_view kind);

// The tokenizer of a checkpoint: its record (state.json "tokenizer"), or for checkpoints written
// before records the builtin one its spec (JSON) names. DataLoss naming `dir` otherwise.
absl::StatusOr<TokenizerRecord> CheckpointTokenizer(absl::string_view tokenizer_json,
                                                    absl::string_view spec_json,
                                                    absl::string_view dir);

// SHA-256 of a file's bytes, in hex.
absl::StatusOr<std::string> FileSha256(const std::string& path);

// DIR/mesa_data.json of a shard set: nullopt when there is none (llm.c shards, hand-made sets).
absl::StatusOr<std::optional<TokenizerRecord>> ReadShardSetTokenizer(const std::string& dir);

// The tokenizer recorded by a checkpoint (a step directory, or a root: `latest`, else the newest
// step directory): nullopt when there is no checkpoint or it records none (written before records).
// Also the checkpoint model's vocab_size, when `model_vocab` is given.
absl::StatusOr<std::optional<TokenizerRecord>> ReadCheckpointTokenizer(const std::string& path,
                                                                       int64_t* model_vocab);

// Checks that the spec's data.tokenizer (and data.tokenizer_file's hash), the mesa_data.json of
// every directory its shard patterns match in, the vocabulary of model.vocab_size and the records
// of checkpoint.init_from and eval.checkpoint agree. Files that do not exist here are skipped.
// Returns the job's record, as complete as the files make it (vocab_size / bos_id may stay unknown
// for hf when no mesa_data.json is found). InvalidArgument names the field.
absl::StatusOr<TokenizerRecord> CheckJobTokenizer(const mesa::v1::JobSpec& spec);

// The files of a recorded tokenizer: `given`, else the recorded paths; each must have its
// recorded SHA-256 (FailedPrecondition naming both otherwise; NotFound when unreadable).
absl::StatusOr<std::vector<std::string>> TokenizerFiles(const TokenizerRecord& record,
                                                        const std::vector<std::string>& given);

// InvalidArgument naming `field` when `found` is not the tokenizer `want`: "FIELD: the job's
// tokenizer is WANT, but WHERE FOUND", `where` saying what was made with `found`.
absl::Status CompareTokenizers(absl::string_view field, const TokenizerRecord& want,
                               const TokenizerRecord& found, absl::string_view where);

}  // namespace mesa::spec

#endif  // MESANET_SPEC_TOKENIZER_RECORD_H_
