#include "model/data/prepare.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/data/token_shard.h"

namespace mesa::model {
namespace {

// Documents are read and tokenised in batches of this many documents or bytes.
constexpr size_t kBatchDocuments = 4096;
constexpr size_t kBatchBytes = 16 << 20;

// Packs BOS + tokens of each document into shards of `shard_tokens` tokens under `dir`.
class ShardWriter {
 public:
  ShardWriter(std::string dir, std::string prefix, int64_t shard_tokens, bool wide)
      : dir_(std::move(dir)),
        prefix_(std::move(prefix)),
        shard_tokens_(shard_tokens),
        wide_(wide) {}

  absl::Status Add(const int32_t* begin, const int32_t* end, int32_t bos) {
    buffer_.push_back(bos);
    return Append(begin, end);
  }
  // Tokens that continue the last document.
  absl::Status Append(const int32_t* begin, const int32_t* end) {
    for (const int32_t* t = begin; t != end; ++t) {
      buffer_.push_back(*t);
      if (static_cast<int64_t>(buffer_.size()) >= shard_tokens_) {
        if (absl::Status s = Flush(); !s.ok()) return s;
      }
    }
    return absl::OkStatus();
  }
  absl::Status Flush() {
    if (buffer_.empty()) return absl::OkStatus();
    const std::string name = absl::StrFormat("%s_%06d.bin", prefix_, names_.size());
    total_ += buffer_.size();
    absl::Status s = WriteTokenShard(dir_ + "/" + name, buffer_, wide_);
    buffer_.clear();
    names_.push_back(name);
    return s;
  }
  const std::vector<std::string>& names() const { return names_; }
  int64_t total() const { return total_; }

 private:
  std::string dir_, prefix_;
  int64_t shard_tokens_;
  bool wide_;  // uint32 shards (vocabulary over 65,536 ids)
  std::vector<uint32_t> buffer_;
  std::vector<std::string> names_;
  int64_t total_ = 0;
};

// The documents of one split, kept for shuffling: all tokens back to back plus where each starts.
struct DocumentStore {
  void Add(const std::vector<int32_t>& doc) {
    starts.push_back(static_cast<int64_t>(tokens.size()));
    Append(doc);
  }
  void Append(const std::vector<int32_t>& more) {  // to the last document
    tokens.insert(tokens.end(), more.begin(), more.end());
    starts.back() = static_cast<int64_t>(tokens.size());
  }
  // Writes the documents in the order ShufflePermutation(count, seed) gives.
  absl::Status WriteShuffled(uint64_t seed, int32_t bos, ShardWriter* writer) const {
    for (int64_t i : ShufflePermutation(static_cast<int64_t>(starts.size()) - 1, seed)) {
      const int32_t* base = tokens.data();
      if (absl::Status s = writer->Add(base + starts[i], base + starts[i + 1], bos); !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  }
  std::vector<int32_t> tokens;
  std::vector<int64_t> starts = {0};  // document i is tokens[starts[i], starts[i + 1])
};

// A directory inside the output directory that is removed, with what it holds, unless released.
class StagingDir {
 public:
  explicit StagingDir(std::string path) : path_(std::move(path)) {}
  ~StagingDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  StagingDir(const StagingDir&) = delete;
  StagingDir& operator=(const StagingDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

absl::Status SyncDirectory(const std::string& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot open directory ", dir));
  const int result = fsync(fd);
  const int error = errno;
  close(fd);
  if (result != 0) return absl::ErrnoToStatus(error, absl::StrCat("cannot fsync ", dir));
  return absl::OkStatus();
}

// Tokenises the text documents of `batch` on `threads` threads; each document's tokens depend only
// on its text, so the result is the same for any thread count.
void TokenizeBatch(const Tokenizer& tokenizer, int threads, std::vector<Document>* batch) {
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < batch->size(); i = next++) {
      Document& doc = (*batch)[i];
      if (doc.pretokenized) continue;
      doc.tokens = tokenizer.Encode(doc.text);
      doc.text.clear();
    }
  };
  std::vector<std::thread> helpers;
  const size_t helper_count = std::min<size_t>(threads, batch->size()) - (batch->empty() ? 0 : 1);
  for (size_t t = 0; t < helper_count; ++t) helpers.emplace_back(work);
  work();
  for (std::thread& helper : helpers) helper.join();
}

// Takes tokenised documents in input order: draws each one's split, then writes it (or keeps it
// for shuffling).
class Packer {
 public:
  Packer(const PrepareOptions& options, int32_t bos, ShardWriter* train, ShardWriter* val)
      : options_(options), bos_(bos), train_(train), val_(val), rng_(options.seed) {}

  absl::Status Take(const Document& doc) {
    const bool shuffle = options_.shuffle_seed.has_value();
    const int32_t* begin = doc.tokens.data();
    const int32_t* end = begin + doc.tokens.size();
    if (doc.continuation) {  // goes where its document's start went
      (to_val_ ? summary_.val_tokens : summary_.train_tokens) += doc.tokens.size();
      if (!shuffle) return (to_val_ ? val_ : train_)->Append(begin, end);
      (to_val_ ? val_store_ : train_store_).Append(doc.tokens);
      return absl::OkStatus();
    }
    to_val_ = coin_(rng_) < options_.val_fraction;
    ++summary_.documents;
    summary_.val_documents += to_val_;
    summary_.train_tokens += to_val_ ? 0 : doc.tokens.size() + 1;
    summary_.val_tokens += to_val_ ? doc.tokens.size() + 1 : 0;
    if (!shuffle) return (to_val_ ? val_ : train_)->Add(begin, end, bos_);
    (to_val_ ? val_store_ : train_store_).Add(doc.tokens);
    return absl::OkStatus();
  }

  // Writes the kept documents, shuffled: train and validation get their own orders (seeds s and
  // s + 1).
  absl::Status Finish() {
    if (!options_.shuffle_seed.has_value()) return absl::OkStatus();
    if (absl::Status s = train_store_.WriteShuffled(*options_.shuffle_seed, bos_, train_);
        !s.ok()) {
      return s;
    }
    return val_store_.WriteShuffled(*options_.shuffle_seed + 1, bos_, val_);
  }

  // Documents so far; tokens as taken (written or kept), continuations not counted.
  const PrepareSummary& summary() const { return summary_; }

 private:
  const PrepareOptions& options_;
  int32_t bos_;
  ShardWriter* train_;
  ShardWriter* val_;
  DocumentStore train_store_, val_store_;
  std::mt19937_64 rng_;
  std::uniform_real_distribution<double> coin_{0.0, 1.0};
  bool to_val_ = false;  // where the last document went
  PrepareSummary summary_;
};

}  // namespace

std::vector<int64_t> ShufflePermutation(int64_t n, uint64_t seed) {
  std::vector<int64_t> order(std::max<int64_t>(n, 0));
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  std::mt19937_64 rng(seed);
  for (int64_t i = n - 1; i > 0; --i) {
    // The modulo's bias is below n / 2^64: irrelevant for an ordering.
    const int64_t j = static_cast<int64_t>(rng() % static_cast<uint64_t>(i + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

absl::StatusOr<PrepareSummary> PrepareShards(const PrepareOptions& options,
                                             const Tokenizer& tokenizer) {
  if (absl::Status s = ValidateCorpusOptions(options.corpus); !s.ok()) return s;
  if (!(options.val_fraction >= 0 && options.val_fraction < 1)) {
    return absl::InvalidArgumentError("--val_fraction must be in [0, 1)");
  }
  if (options.shard_tokens < 1024) {
    return absl::InvalidArgumentError("--shard_tokens must be >= 1024");
  }
  std::error_code error;
  std::filesystem::create_directories(options.output_dir, error);
  if (error) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create ", options.output_dir, ": ", error.message()));
  }
  StagingDir staging(absl::StrCat(options.output_dir, "/.mesa-data.staging.", getpid()));
  std::filesystem::remove_all(staging.path(), error);
  if (!std::filesystem::create_directory(staging.path(), error) || error) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create ", staging.path(), ": ", error.message()));
  }

  const bool wide = tokenizer.vocab_size() > 65536;
  ShardWriter train(staging.path(), "train", options.shard_tokens, wide);
  ShardWriter val(staging.path(), "val", options.shard_tokens, wide);
  Packer packer(options, tokenizer.bos_id(), &train, &val);
  const int threads = options.threads > 0
                          ? options.threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  std::vector<Document> batch;
  size_t batch_bytes = 0;
  // Tokenises the batch (in parallel) and packs it in input order.
  auto pack_batch = [&]() -> absl::Status {
    TokenizeBatch(tokenizer, threads, &batch);
    for (Document& doc : batch) {
      if (absl::Status s = packer.Take(doc); !s.ok()) return s;
    }
    batch.clear();
    batch_bytes = 0;
    if (options.progress) options.progress(packer.summary());
    return absl::OkStatus();
  };
  bool follows_shard = false;  // the previous input was a token shard with a document
  for (const std::string& path : options.inputs) {
    absl::StatusOr<std::unique_ptr<DocumentReader>> reader =
        OpenDocumentReader(path, options.corpus, tokenizer, options.tokenizer_name, follows_shard);
    if (!reader.ok()) return reader.status();
    follows_shard = false;
    while (true) {
      batch.emplace_back();
      absl::StatusOr<bool> more = (*reader)->Next(&batch.back());
      if (!more.ok()) return more.status();
      if (!*more) {
        batch.pop_back();
        break;
      }
      follows_shard = batch.back().pretokenized;
      batch_bytes += batch.back().text.size() + 4 * batch.back().tokens.size();
      if (batch.size() >= kBatchDocuments || batch_bytes >= kBatchBytes) {
        if (absl::Status s = pack_batch(); !s.ok()) return s;
      }
    }
  }
  if (absl::Status s = pack_batch(); !s.ok()) return s;
  if (absl::Status s = packer.Finish(); !s.ok()) return s;
  if (absl::Status s = train.Flush(); !s.ok()) return s;
  if (absl::Status s = val.Flush(); !s.ok()) return s;

  // Every input was read: move the shards into place.
  for (const ShardWriter* writer : {&train, &val}) {
    for (const std::string& name : writer->names()) {
      const std::string from = staging.path() + "/" + name;
      const std::string to = options.output_dir + "/" + name;
      if (std::rename(from.c_str(), to.c_str()) != 0) {
        return absl::ErrnoToStatus(errno, absl::StrCat("cannot rename ", from, " to ", to));
      }
    }
  }
  if (absl::Status s = SyncDirectory(options.output_dir); !s.ok()) return s;
  PrepareSummary summary = packer.summary();
  summary.train_tokens = train.total();
  summary.val_tokens = val.total();
  summary.train_shards = static_cast<int>(train.names().size());
  summary.val_shards = static_cast<int>(val.names().size());
  return summary;
}

}  // namespace mesa::model
