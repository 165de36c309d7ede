// mesa-data: text files -> token shards (llm.c .bin layout, docs/formats.md).
//
//   mesa-data --input 'corpus/*.txt' --output_dir data/ [--tokenizer byte|gpt2
//             --encoder_json encoder.json --vocab_bpe vocab.bpe] [--split file|line|blankline]
//             [--val_fraction 0.05] [--shard_tokens 100000000] [--seed 0]
// Every document is written as BOS + tokens; documents go to validation with probability
// val_fraction (deterministic given --seed). Writes train_000000.bin, ..., val_000000.bin, ...
#include <sys/stat.h>
#include <filesystem>

#include <cerrno>
#include <cstdio>
#include <memory>
#include <random>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/file_util.h"
#include "model/config/job_config.h"
#include "model/data/token_shard.h"
#include "model/tokenizer/byte_tokenizer.h"
#include "model/tokenizer/gpt2_tokenizer.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, input, "", "Text files: comma-separated paths or glob patterns.");
ABSL_FLAG(std::string, output_dir, "", "Directory for the shards.");
ABSL_FLAG(std::string, tokenizer, "byte", "byte or gpt2.");
ABSL_FLAG(std::string, encoder_json, "", "GPT-2 encoder.json (tokenizer gpt2).");
ABSL_FLAG(std::string, vocab_bpe, "", "GPT-2 vocab.bpe (tokenizer gpt2).");
ABSL_FLAG(std::string, split, "file", "Document boundaries: file, line or blankline.");
ABSL_FLAG(double, val_fraction, 0.05, "Fraction of documents for validation.");
ABSL_FLAG(int64_t, shard_tokens, 100000000, "Tokens per shard.");
ABSL_FLAG(uint64_t, seed, 0, "Seed of the train/validation split.");

namespace {

int Fail(const std::string& message, int code = 2) {
  fprintf(stderr, "mesa-data: error: %s\n", message.c_str());
  return code;
}

class ShardWriter {
 public:
  ShardWriter(std::string dir, std::string prefix, int64_t shard_tokens)
      : dir_(std::move(dir)), prefix_(std::move(prefix)), shard_tokens_(shard_tokens) {}
  absl::Status Add(const std::vector<int32_t>& doc, int32_t bos) {
    buffer_.push_back(bos);
    for (int32_t t : doc) {
      buffer_.push_back(t);
      if (static_cast<int64_t>(buffer_.size()) >= shard_tokens_) {
        if (absl::Status s = Flush(); !s.ok()) return s;
      }
    }
    return absl::OkStatus();
  }
  absl::Status Flush() {
    if (buffer_.empty()) return absl::OkStatus();
    const std::string path = absl::StrFormat("%s/%s_%06d.bin", dir_, prefix_, shards_++);
    total_ += buffer_.size();
    absl::Status s = mesa::model::WriteTokenShard(path, buffer_);
    buffer_.clear();
    return s;
  }
  int shards() const { return shards_; }
  int64_t total() const { return total_; }

 private:
  std::string dir_, prefix_;
  int64_t shard_tokens_;
  std::vector<uint32_t> buffer_;
  int shards_ = 0;
  int64_t total_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string out_dir = absl::GetFlag(FLAGS_output_dir);
  if (absl::GetFlag(FLAGS_input).empty() || out_dir.empty()) {
    return Fail("--input and --output_dir are required");
  }
  const double val_fraction = absl::GetFlag(FLAGS_val_fraction);
  if (!(val_fraction >= 0 && val_fraction < 1)) return Fail("--val_fraction must be in [0, 1)");
  if (absl::GetFlag(FLAGS_shard_tokens) < 1024) return Fail("--shard_tokens must be >= 1024");
  const std::string split = absl::GetFlag(FLAGS_split);
  if (split != "file" && split != "line" && split != "blankline") {
    return Fail("--split must be file, line or blankline");
  }
  std::unique_ptr<mesa::model::Tokenizer> tokenizer;
  if (absl::GetFlag(FLAGS_tokenizer) == "byte") {
    tokenizer = std::make_unique<mesa::model::ByteTokenizer>();
  } else if (absl::GetFlag(FLAGS_tokenizer) == "gpt2") {
    auto gpt2 = mesa::model::Gpt2Tokenizer::Load(absl::GetFlag(FLAGS_encoder_json),
                                                 absl::GetFlag(FLAGS_vocab_bpe));
    if (!gpt2.ok()) return Fail(std::string(gpt2.status().message()));
    tokenizer = *std::move(gpt2);
  } else {
    return Fail("--tokenizer must be byte or gpt2");
  }
  auto inputs = mesa::model::ExpandShardPattern(absl::GetFlag(FLAGS_input), "--input");
  if (!inputs.ok()) return Fail(std::string(inputs.status().message()));
  std::error_code mkdir_error;
  std::filesystem::create_directories(out_dir, mkdir_error);
  if (mkdir_error) return Fail("cannot create " + out_dir + ": " + mkdir_error.message(), 1);
  ShardWriter train(out_dir, "train", absl::GetFlag(FLAGS_shard_tokens));
  ShardWriter val(out_dir, "val", absl::GetFlag(FLAGS_shard_tokens));
  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  int64_t docs = 0, val_docs = 0;
  for (const std::string& path : *inputs) {
    absl::StatusOr<std::string> read = mesa::base::ReadFile(path);
    if (!read.ok()) return Fail(std::string(read.status().message()));
    const std::string text = *std::move(read);
    std::vector<std::string> documents;
    if (split == "file") {
      documents.push_back(text);
    } else if (split == "line") {
      documents = absl::StrSplit(text, '\n', absl::SkipWhitespace());
    } else {
      documents = absl::StrSplit(text, "\n\n", absl::SkipWhitespace());
    }
    for (const std::string& doc : documents) {
      if (doc.empty()) continue;
      const bool to_val = coin(rng) < val_fraction;
      ShardWriter& writer = to_val ? val : train;
      if (absl::Status s = writer.Add(tokenizer->Encode(doc), tokenizer->bos_id()); !s.ok()) {
        return Fail(std::string(s.message()), 1);
      }
      ++docs;
      val_docs += to_val;
    }
  }
  if (absl::Status s = train.Flush(); !s.ok()) return Fail(std::string(s.message()), 1);
  if (absl::Status s = val.Flush(); !s.ok()) return Fail(std::string(s.message()), 1);
  nlohmann::json summary = {{"documents", docs},
                            {"val_documents", val_docs},
                            {"train_tokens", train.total()},
                            {"val_tokens", val.total()},
                            {"train_shards", train.shards()},
                            {"val_shards", val.shards()},
                            {"tokenizer", absl::GetFlag(FLAGS_tokenizer)},
                            {"vocab_size", tokenizer->vocab_size()},
                            {"bos_id", tokenizer->bos_id()}};
  printf("%s\n", summary.dump().c_str());
  return 0;
}
