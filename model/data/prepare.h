// mesa-data's pipeline: corpus files -> documents -> tokens -> train/val token shards.
//
// Documents are read in input order (CorpusOptions), each goes to validation with probability
// val_fraction (drawn in input order from `seed`, so the split does not depend on shuffling),
// and is written as BOS + tokens into train_NNNNNN.bin / val_NNNNNN.bin of shard_tokens tokens.
// With a shuffle seed the documents of each split are held in memory (4 bytes a token) and
// written in a deterministic random order; without one they stream through in input order.
// Documents are read in batches whose texts are tokenised on several threads; the output is the
// same for any number of threads.
//
// All or nothing: the shards are written into a staging directory inside output_dir and moved
// into place only after every input has been read; an error leaves output_dir as it was.
#ifndef MESANET_MODEL_DATA_PREPARE_H_
#define MESANET_MODEL_DATA_PREPARE_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/data/corpus_reader.h"
#include "model/tokenizer/tokenizer.h"

namespace mesa::model {

struct PrepareSummary {
  int64_t documents = 0;
  int64_t val_documents = 0;
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
  int train_shards = 0;
  int val_shards = 0;
};

struct PrepareOptions {
  std::vector<std::string> inputs;  // files, read in this order
  std::string output_dir;
  CorpusOptions corpus;
  std::string tokenizer_name = "byte";  // for messages
  double val_fraction = 0.05;
  int64_t shard_tokens = 100000000;
  uint64_t seed = 0;                     // of the train/validation split
  std::optional<uint64_t> shuffle_seed;  // unset: input order
  // Tokenisation threads (0: one per core). The output does not depend on it.
  int threads = 0;
  // Called after each batch of documents with the counts so far (shard counts excepted).
  std::function<void(const PrepareSummary&)> progress;
};

// Writes the shards (see the top). Errors name the input file (and line) or the output.
absl::StatusOr<PrepareSummary> PrepareShards(const PrepareOptions& options,
                                             const Tokenizer& tokenizer);

// The permutation of [0, n) that --shuffle_seed gives: Fisher-Yates driven by mt19937_64(seed),
// spelled out so the order is the same with any standard library.
std::vector<int64_t> ShufflePermutation(int64_t n, uint64_t seed);

}  // namespace mesa::model

#endif  // MESANET_MODEL_DATA_PREPARE_H_
