#include "model/data/corpus_reader.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/utf8.h"
#include "model/data/byte_stream.h"
#include "model/data/token_shard.h"
#include "nlohmann/json.hpp"

namespace mesa::model {
namespace {

constexpr size_t kReadBytes = 1 << 20;
constexpr int64_t kReadTokens = 1 << 20;

// Splits a byte stream at every occurrence of `delimiter` (left to right, as absl::StrSplit
// does); an empty delimiter gives the whole stream as one piece.
class PieceReader {
 public:
  PieceReader(std::unique_ptr<ByteStream> stream, std::string delimiter)
      : stream_(std::move(stream)), delimiter_(std::move(delimiter)) {}

  // The next piece (without the delimiter); false at the end. The last piece is what follows the
  // last delimiter, unless that is empty.
  absl::StatusOr<bool> Next(std::string* piece) {
    while (true) {
      if (!delimiter_.empty()) {
        const size_t found = buffer_.find(delimiter_, scan_from_);
        if (found != std::string::npos) {
          piece->assign(buffer_, start_, found - start_);
          start_ = scan_from_ = found + delimiter_.size();
          return true;
        }
        // A delimiter may straddle the end of the buffer: search its last bytes again.
        scan_from_ =
            std::max(start_, buffer_.size() - std::min(buffer_.size(), delimiter_.size() - 1));
      }
      if (eof_) {
        if (start_ >= buffer_.size()) return false;
        piece->assign(buffer_, start_, std::string::npos);
        start_ = scan_from_ = buffer_.size();
        return true;
      }
      buffer_.erase(0, start_);
      scan_from_ -= start_;
      start_ = 0;
      const size_t old_size = buffer_.size();
      buffer_.resize(old_size + kReadBytes);
      absl::StatusOr<size_t> n = stream_->Read(buffer_.data() + old_size, kReadBytes);
      if (!n.ok()) return n.status();
      buffer_.resize(old_size + *n);
      eof_ = *n == 0;
    }
  }

 private:
  std::unique_ptr<ByteStream> stream_;
  std::string delimiter_;
  std::string buffer_;
  size_t start_ = 0;      // where the next piece begins
  size_t scan_from_ = 0;  // where the search for the next delimiter resumes
  bool eof_ = false;
};

bool IsBlank(absl::string_view text) { return absl::StripAsciiWhitespace(text).empty(); }

class TextReader : public DocumentReader {
 public:
  TextReader(std::unique_ptr<ByteStream> stream, const std::string& split)
      : pieces_(std::move(stream), split == "line"        ? "\n"
                                   : split == "blankline" ? "\n\n"
                                                          : ""),
        skip_blank_(split != "file") {}

  absl::StatusOr<bool> Next(Document* doc) override {
    doc->pretokenized = false;
    doc->continuation = false;
    doc->tokens.clear();
    while (true) {
      absl::StatusOr<bool> more = pieces_.Next(&doc->text);
      if (!more.ok() || !*more) return more;
      if (skip_blank_ ? !IsBlank(doc->text) : !doc->text.empty()) return true;
    }
  }

 private:
  PieceReader pieces_;
  bool skip_blank_;
};

class JsonlReader : public DocumentReader {
 public:
  JsonlReader(std::string path, std::unique_ptr<ByteStream> stream, std::string field)
      : path_(std::move(path)), lines_(std::move(stream), "\n"), field_(std::move(field)) {}

  absl::StatusOr<bool> Next(Document* doc) override {
    doc->pretokenized = false;
    doc->continuation = false;
    doc->tokens.clear();
    while (true) {
      absl::StatusOr<bool> more = lines_.Next(&line_);
      if (!more.ok() || !*more) return more;
      ++line_number_;
      if (IsBlank(line_)) continue;
      if (const size_t bad = base::FirstInvalidUtf8(line_); bad < line_.size()) {
        return Error(absl::StrCat("invalid UTF-8 at byte ", bad + 1, " of the line"));
      }
      nlohmann::json value;
      try {
        value = nlohmann::json::parse(line_);
      } catch (const nlohmann::json::parse_error& error) {
        return Error(absl::StrCat("malformed JSON: ", error.what()));
      }
      if (!value.is_object()) {
        return Error(absl::StrCat("expected a JSON object, got ", value.type_name()));
      }
      const auto it = value.find(field_);
      if (it == value.end()) return Error(absl::StrCat("no field \"", field_, "\""));
      if (!it->is_string()) {
        return Error(absl::StrCat("field \"", field_, "\" is of JSON type ", it->type_name(),
                                  ", not a string"));
      }
      doc->text = it->get<std::string>();
      if (!doc->text.empty()) return true;
    }
  }

 private:
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(path_, ", line ", line_number_, ": ", what));
  }

  std::string path_;
  PieceReader lines_;
  std::string field_;
  std::string line_;
  int64_t line_number_ = 0;
};

class ShardReader : public DocumentReader {
 public:
  ShardReader(std::unique_ptr<TokenShard> shard, const Tokenizer& tokenizer,
              absl::string_view tokenizer_name, bool may_continue)
      : may_continue_(may_continue),
        shard_(std::move(shard)),
        bos_(tokenizer.bos_id()),
        vocab_size_(tokenizer.vocab_size()),
        tokenizer_name_(tokenizer_name) {}

  absl::StatusOr<bool> Next(Document* doc) override {
    doc->pretokenized = true;
    doc->text.clear();
    doc->tokens.clear();
    doc->continuation = false;
    if (next_ >= shard_->size()) return false;
    absl::StatusOr<uint32_t> token = Peek();
    if (!token.ok()) return token.status();
    if (*token == static_cast<uint32_t>(bos_)) {
      ++next_;
    } else if (next_ == 0 && may_continue_) {  // the rest of the previous shard's document
      doc->continuation = true;
    } else {  // only possible for the first token
      return absl::InvalidArgumentError(absl::StrCat(
          "token shard ", shard_->path(), " starts with token ", *token, ", not the BOS token ",
          bos_, " of tokenizer ", tokenizer_name_,
          ": it was written with another tokenizer, or it continues a document of a shard that "
          "must come right before it in --input"));
    }
    while (next_ < shard_->size()) {
      absl::StatusOr<uint32_t> peek = Peek();
      if (!peek.ok()) return peek.status();
      if (*peek == static_cast<uint32_t>(bos_)) break;
      doc->tokens.push_back(static_cast<int32_t>(*peek));
      ++next_;
    }
    return true;
  }

 private:
  // The token at next_, read in chunks and checked against the vocabulary.
  absl::StatusOr<uint32_t> Peek() {
    if (next_ < chunk_begin_ || next_ >= chunk_begin_ + static_cast<int64_t>(chunk_.size())) {
      const int64_t count = std::min(kReadTokens, shard_->size() - next_);
      if (absl::Status status = shard_->Read(next_, count, &chunk_); !status.ok()) return status;
      chunk_begin_ = next_;
    }
    const uint32_t token = chunk_[next_ - chunk_begin_];
    if (token >= static_cast<uint32_t>(vocab_size_)) {
      return absl::InvalidArgumentError(
          absl::StrCat("token shard ", shard_->path(), ": token ", token, " at position ", next_,
                       " is outside the vocabulary of tokenizer ", tokenizer_name_, " (",
                       vocab_size_, " ids): the shard was written with another tokenizer"));
    }
    return token;
  }

  bool may_continue_;
  std::unique_ptr<TokenShard> shard_;
  int32_t bos_;
  int32_t vocab_size_;
  std::string tokenizer_name_;
  std::vector<uint32_t> chunk_;
  int64_t chunk_begin_ = 0;
  int64_t next_ = 0;
};

}  // namespace

absl::StatusOr<CorpusFormat> CorpusFormatOf(absl::string_view path, absl::string_view format) {
  const absl::string_view name = StripCompressionExtension(path);
  if (absl::EndsWith(name, ".bin")) {
    if (name.size() != path.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": token shards are read uncompressed (decompress it first)"));
    }
    return CorpusFormat::kTokenShard;
  }
  if (format == "text") return CorpusFormat::kText;
  if (format == "jsonl") return CorpusFormat::kJsonl;
  if (format != "auto") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown format \"", format, "\" (auto, text or jsonl)"));
  }
  if (absl::EndsWith(name, ".jsonl") || absl::EndsWith(name, ".ndjson")) {
    return CorpusFormat::kJsonl;
  }
  return CorpusFormat::kText;
}

absl::Status ValidateCorpusOptions(const CorpusOptions& options) {
  if (options.format != "auto" && options.format != "text" && options.format != "jsonl") {
    return absl::InvalidArgumentError("--format must be auto, text or jsonl");
  }
  if (options.split != "file" && options.split != "line" && options.split != "blankline") {
    return absl::InvalidArgumentError("--split must be file, line or blankline");
  }
  if (options.text_field.empty()) {
    return absl::InvalidArgumentError("--text_field must not be empty");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DocumentReader>> OpenDocumentReader(const std::string& path,
                                                                   const CorpusOptions& options,
                                                                   const Tokenizer& tokenizer,
                                                                   absl::string_view tokenizer_name,
                                                                   bool follows_shard) {
  absl::StatusOr<CorpusFormat> format = CorpusFormatOf(path, options.format);
  if (!format.ok()) return format.status();
  if (*format == CorpusFormat::kTokenShard) {
    absl::StatusOr<std::unique_ptr<TokenShard>> shard = TokenShard::Open(path);
    if (!shard.ok()) return shard.status();
    return std::make_unique<ShardReader>(*std::move(shard), tokenizer, tokenizer_name,
                                         follows_shard);
  }
  absl::StatusOr<std::unique_ptr<ByteStream>> stream = OpenByteStream(path);
  if (!stream.ok()) return stream.status();
  if (*format == CorpusFormat::kJsonl) {
    return std::make_unique<JsonlReader>(path, *std::move(stream), options.text_field);
  }
  return std::make_unique<TextReader>(*std::move(stream), options.split);
}

}  // namespace mesa::model
