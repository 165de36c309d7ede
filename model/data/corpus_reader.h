// Documents of one corpus file for mesa-data (docs/formats.md, "Corpora"):
//   text   plain text (optionally .gz / .zst); documents are the whole file, its lines or its
//          blank-line separated paragraphs (--split)
//   jsonl  one JSON object per line (optionally .gz / .zst); the document is the string field
//          `text_field`. Malformed JSON, a missing or non-string field and invalid UTF-8 are
//          InvalidArgument errors naming the file and the line; blank lines are skipped.
//   shard  an llm.c token shard (.bin) passed through: its documents are the runs of tokens that
//          start with the tokenizer's BOS. Shard writers (mesa-data, llm.c) split documents
//          across shards, so tokens before a shard's first BOS continue the previous shard's
//          last document; that is allowed only when the file follows a shard in the input list.
//          Otherwise a first token other than BOS, and anywhere a token outside the tokenizer's
//          vocabulary, is an error (the shard was written with another tokenizer).
// Everything is streamed: memory holds one document (and one read chunk), not the file.
#ifndef MESANET_MODEL_DATA_CORPUS_READER_H_
#define MESANET_MODEL_DATA_CORPUS_READER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/tokenizer/tokenizer.h"

namespace mesa::model {

enum class CorpusFormat { kText, kJsonl, kTokenShard };

struct CorpusOptions {
  // "auto" (by extension, see CorpusFormatOf), "text" or "jsonl".
  std::string format = "auto";
  // Text: "file", "line" (lines that are only whitespace are skipped) or "blankline".
  std::string split = "file";
  // JSONL: the field that holds each document's text.
  std::string text_field = "text";
};

// The format of `path` under `format`: with "auto", the name without ".gz"/".zst" ending in
// ".jsonl" or ".ndjson" is JSONL, ".bin" a token shard, anything else text. "text" and "jsonl"
// force that format for every file except token shards (".bin"), which are always shards.
absl::StatusOr<CorpusFormat> CorpusFormatOf(absl::string_view path, absl::string_view format);

// Checks the options' values (format, split, a non-empty text field).
absl::Status ValidateCorpusOptions(const CorpusOptions& options);

struct Document {
  // Text and JSONL documents: the text, to be tokenised.
  std::string text;
  // Token shard documents: the tokens after the BOS (BOS itself excluded).
  std::vector<int32_t> tokens;
  bool pretokenized = false;
  // Token shards: `tokens` continue the previous shard's last document (no BOS of their own).
  bool continuation = false;
};

class DocumentReader {
 public:
  virtual ~DocumentReader() = default;
  // The next document into `doc`; false at the end of the file. Errors name the file (and the
  // line for JSONL).
  virtual absl::StatusOr<bool> Next(Document* doc) = 0;
};

// Opens one corpus file. `tokenizer` (named `tokenizer_name` in messages) validates token shards;
// `follows_shard`: the file comes right after a token shard, so a shard may start with a
// continuation.
absl::StatusOr<std::unique_ptr<DocumentReader>> OpenDocumentReader(const std::string& path,
                                                                   const CorpusOptions& options,
                                                                   const Tokenizer& tokenizer,
                                                                   absl::string_view tokenizer_name,
                                                                   bool follows_shard = false);

}  // namespace mesa::model

#endif  // MESANET_MODEL_DATA_CORPUS_READER_H_
