// Corpus BLEU as sacreBLEU computes it by default (docs/math.md §7.5): the 13a tokenisation of
// mteval-v13a, n-grams up to 4 with clipped counts against one reference, the brevity penalty and
// the "exp" smoothing of orders without a match. Segments are reduced to their sufficient
// statistics (BleuStats), which task item records carry, so that a corpus score is the same
// whoever sums them; its standard error is a seeded bootstrap over segments.
#ifndef MESANET_SPEC_BLEU_H_
#define MESANET_SPEC_BLEU_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mesa::spec {

inline constexpr int kBleuOrder = 4;
// Resamples of the bootstrap standard error (lm-evaluation-harness's cap for BLEU) and its seed.
inline constexpr int kBleuBootstrapResamples = 100;
inline constexpr uint64_t kBleuBootstrapSeed = 1234;

struct BleuStats {
  int64_t hypothesis_length = 0;  // tokens
  int64_t reference_length = 0;
  std::array<int64_t, kBleuOrder> matches{};  // clipped n-gram matches per order 1..4
  std::array<int64_t, kBleuOrder> totals{};   // hypothesis n-grams per order

  BleuStats& operator+=(const BleuStats& other);
  // As a record's flat list: hypothesis and reference lengths, matches, totals (10 values).
  std::vector<int64_t> ToList() const;
  // The inverse of ToList; nullopt for a list of another length or with negative counts.
  static std::optional<BleuStats> FromList(const std::vector<int64_t>& list);
};

// mteval-v13a's tokens of `line`: markup entities and line breaks undone, symbols split off,
// periods and commas split unless between digits, a dash after a digit split off, then split at
// whitespace (every code point Python's str.split() takes for whitespace).
std::vector<std::string> Tokenize13a(std::string_view line);

// The statistics of one segment against its one reference (both tokenised by Tokenize13a).
BleuStats SegmentBleu(std::string_view hypothesis, std::string_view reference);

// BLEU (0..100) of summed statistics: brevity penalty times the geometric mean of the four
// precisions, an order without matches counting 1 / (2^k · total) for its k-th such order; 0 when
// nothing matches at all.
double CorpusBleu(const BleuStats& sum);

// The sample standard deviation of CorpusBleu over `resamples` draws (with replacement) of as
// many segments as there are, from a generator seeded with `seed`; 0 for fewer than 2 segments.
double BootstrapBleuStderr(const std::vector<BleuStats>& segments,
                           int resamples = kBleuBootstrapResamples,
                           uint64_t seed = kBleuBootstrapSeed);

}  // namespace mesa::spec

#endif  // MESANET_SPEC_BLEU_H_
