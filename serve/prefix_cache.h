// The prefix state cache (docs/serving.md): a recurrent model's whole past is a fixed-size state,
// so the state after a prompt's first p tokens can be kept once and resumed by every later request
// whose prompt starts with the same p tokens (a system prompt, few-shot examples). Attention
// servers need paged KV caches for this; here one snapshot per prefix is enough.
//
// This class is the bookkeeping: which decoding-state row holds the snapshot of which token
// prefix, computed under which solver setting (CG steps and tolerance change the state), and
// which row to overwrite next (least recently used). Snapshots are taken only at positions that
// are multiples of the prefill piece, so a request resumed from one runs exactly the same pieces
// as without the cache: its output is bit-identical either way.
#ifndef MESANET_SERVE_PREFIX_CACHE_H_
#define MESANET_SERVE_PREFIX_CACHE_H_

#include <cstdint>
#include <list>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"

namespace mesa::serve {

class PrefixCache {
 public:
  // `rows`: the state rows given to snapshots (0: no cache); `first_row`: the first of them.
  PrefixCache(int rows, int first_row) : rows_(rows), first_row_(first_row) {}

  struct Hit {
    int row;         // the state row holding the snapshot
    int64_t length;  // of the prefix it is the state after
  };
  // The longest snapshot, among `lengths` (ascending), of a prefix of `tokens` under `mode`.
  std::optional<Hit> Lookup(absl::Span<const int32_t> tokens, absl::Span<const int64_t> lengths,
                            uint64_t mode);
  // The row to copy the state after tokens[0, length) into (the least recently used one is
  // overwritten), or nullopt when that snapshot is there already or there is no cache.
  std::optional<int> Insert(absl::Span<const int32_t> tokens, int64_t length, uint64_t mode);

  int rows() const { return rows_; }
  int entries() const { return static_cast<int>(entries_.size()); }
  int64_t hits() const { return hits_; }
  int64_t misses() const { return misses_; }
  int64_t evictions() const { return evictions_; }

 private:
  struct Entry {
    uint64_t key;
    uint64_t mode;
    std::vector<int32_t> tokens;  // the prefix itself: a hash match is checked against it
    int row;
  };
  // The keys of one token sequence's prefixes under one mode: a hash chained over blocks of
  // kKeyBlock tokens, so that the keys of every candidate prefix of a lookup cost one pass over
  // the tokens (plus at most a block each), not one pass per candidate.
  class PrefixKeys {
   public:
    static constexpr int64_t kKeyBlock = 64;
    PrefixKeys(absl::Span<const int32_t> tokens, uint64_t mode);
    uint64_t KeyOf(int64_t length);  // 0 < length <= tokens.size()

   private:
    absl::Span<const int32_t> tokens_;
    std::vector<uint64_t> chain_;  // chain_[k]: the key state after k whole blocks
  };
  std::list<Entry>::iterator Find(absl::Span<const int32_t> prefix, uint64_t mode, uint64_t key);

  const int rows_, first_row_;
  std::list<Entry> entries_;  // most recently used first
  absl::flat_hash_map<uint64_t, std::vector<std::list<Entry>::iterator>> by_key_;
  int64_t hits_ = 0, misses_ = 0, evictions_ = 0;
};

}  // namespace mesa::serve

#endif  // MESANET_SERVE_PREFIX_CACHE_H_
