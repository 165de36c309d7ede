#include "serve/prefix_cache.h"

#include <algorithm>

#include "absl/hash/hash.h"

namespace mesa::serve {

PrefixCache::PrefixKeys::PrefixKeys(absl::Span<const int32_t> tokens, uint64_t mode)
    : tokens_(tokens) {
  chain_.push_back(absl::HashOf(mode));
}

uint64_t PrefixCache::PrefixKeys::KeyOf(int64_t length) {
  const int64_t blocks = length / kKeyBlock;
  while (static_cast<int64_t>(chain_.size()) <= blocks) {
    const int64_t done = static_cast<int64_t>(chain_.size()) - 1;
    chain_.push_back(absl::HashOf(chain_.back(), tokens_.subspan(done * kKeyBlock, kKeyBlock)));
  }
  return absl::HashOf(chain_[blocks],
                      tokens_.subspan(blocks * kKeyBlock, length - blocks * kKeyBlock));
}

std::list<PrefixCache::Entry>::iterator PrefixCache::Find(absl::Span<const int32_t> prefix,
                                                          uint64_t mode, uint64_t key) {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return entries_.end();
  for (std::list<Entry>::iterator e : it->second) {
    if (e->mode == mode && absl::MakeConstSpan(e->tokens) == prefix) return e;
  }
  return entries_.end();
}

std::optional<PrefixCache::Hit> PrefixCache::Lookup(absl::Span<const int32_t> tokens,
                                                    absl::Span<const int64_t> lengths,
                                                    uint64_t mode) {
  if (rows_ == 0) return std::nullopt;
  PrefixKeys keys(tokens, mode);
  for (auto l = lengths.rbegin(); l != lengths.rend(); ++l) {
    if (*l <= 0 || *l > static_cast<int64_t>(tokens.size())) continue;
    auto e = Find(tokens.subspan(0, *l), mode, keys.KeyOf(*l));
    if (e == entries_.end()) continue;
    entries_.splice(entries_.begin(), entries_, e);  // now the most recently used
    ++hits_;
    return Hit{e->row, *l};
  }
  ++misses_;
  return std::nullopt;
}

std::optional<int> PrefixCache::Insert(absl::Span<const int32_t> tokens, int64_t length,
                                       uint64_t mode) {
  if (rows_ == 0 || length <= 0 || length > static_cast<int64_t>(tokens.size())) {
    return std::nullopt;
  }
  const absl::Span<const int32_t> prefix = tokens.subspan(0, length);
  const uint64_t key = PrefixKeys(tokens, mode).KeyOf(length);
  if (auto e = Find(prefix, mode, key); e != entries_.end()) {
    entries_.splice(entries_.begin(), entries_, e);
    return std::nullopt;
  }
  int row;
  if (static_cast<int>(entries_.size()) < rows_) {
    row = first_row_ + static_cast<int>(entries_.size());
  } else {  // overwrite the least recently used snapshot
    auto last = std::prev(entries_.end());
    row = last->row;
    auto& bucket = by_key_[last->key];
    bucket.erase(std::find(bucket.begin(), bucket.end(), last));
    if (bucket.empty()) by_key_.erase(last->key);
    entries_.erase(last);
    ++evictions_;
  }
  entries_.push_front(Entry{key, mode, std::vector<int32_t>(prefix.begin(), prefix.end()), row});
  by_key_[key].push_back(entries_.begin());
  return row;
}

}  // namespace mesa::serve
