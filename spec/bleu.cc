#include "spec/bleu.h"

#include <cmath>
#include <map>
#include <random>

#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"

namespace mesa::spec {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// mteval's symbol class: { | } ~ [ \ ] ^ _ ` space ! " # $ % & ( ) * + : ; < = > ? @ /.
bool IsSplitSymbol(char c) {
  return (c >= '{' && c <= '~') || (c >= '[' && c <= '`') || (c >= ' ' && c <= '&') ||
         (c >= '(' && c <= '+') || (c >= ':' && c <= '@') || c == '/';
}

// The length in bytes of the whitespace code point at `at` (UTF-8), 0 when there is none.
size_t WhitespaceAt(std::string_view s, size_t at) {
  const auto byte = [&](size_t k) {
    return at + k < s.size() ? static_cast<unsigned char>(s[at + k]) : 0u;
  };
  const unsigned b0 = byte(0);
  if ((b0 >= 0x09 && b0 <= 0x0D) || (b0 >= 0x1C && b0 <= 0x20)) return 1;
  if (b0 == 0xC2 && (byte(1) == 0x85 || byte(1) == 0xA0)) return 2;
  if (b0 == 0xE1 && byte(1) == 0x9A && byte(2) == 0x80) return 3;  // U+1680
  if (b0 == 0xE2 && byte(1) == 0x80) {
    const unsigned b2 = byte(2);
    if ((b2 >= 0x80 && b2 <= 0x8A) || b2 == 0xA8 || b2 == 0xA9 || b2 == 0xAF) return 3;
  }
  if (b0 == 0xE2 && byte(1) == 0x81 && byte(2) == 0x9F) return 3;  // U+205F
  if (b0 == 0xE3 && byte(1) == 0x80 && byte(2) == 0x80) return 3;  // U+3000
  return 0;
}

// One left-to-right pass of a two-character rule, as Python's re.sub applies it: where `match`
// holds for the characters at i and i + 1, `emit` writes their replacement and the scan goes on
// after both; elsewhere the character is copied. The rules look at ASCII bytes only, so bytes
// stand for code points.
template <typename Match, typename Emit>
std::string PairPass(const std::string& s, Match match, Emit emit) {
  std::string out;
  out.reserve(s.size() * 2);
  for (size_t i = 0; i < s.size();) {
    if (i + 1 < s.size() && match(s[i], s[i + 1])) {
      emit(s[i], s[i + 1], out);
      i += 2;
    } else {
      out += s[i++];
    }
  }
  return out;
}

std::map<std::vector<std::string>, int64_t> NgramCounts(const std::vector<std::string>& tokens,
                                                        int n) {
  std::map<std::vector<std::string>, int64_t> counts;
  for (size_t i = 0; i + n <= tokens.size(); ++i) {
    ++counts[std::vector<std::string>(tokens.begin() + i, tokens.begin() + i + n)];
  }
  return counts;
}

}  // namespace

BleuStats& BleuStats::operator+=(const BleuStats& other) {
  hypothesis_length += other.hypothesis_length;
  reference_length += other.reference_length;
  for (int n = 0; n < kBleuOrder; ++n) {
    matches[n] += other.matches[n];
    totals[n] += other.totals[n];
  }
  return *this;
}

std::vector<int64_t> BleuStats::ToList() const {
  std::vector<int64_t> list = {hypothesis_length, reference_length};
  list.insert(list.end(), matches.begin(), matches.end());
  list.insert(list.end(), totals.begin(), totals.end());
  return list;
}

std::optional<BleuStats> BleuStats::FromList(const std::vector<int64_t>& list) {
  if (list.size() != 2 + 2 * kBleuOrder) return std::nullopt;
  for (int64_t v : list) {
    if (v < 0) return std::nullopt;
  }
  BleuStats s;
  s.hypothesis_length = list[0];
  s.reference_length = list[1];
  for (int n = 0; n < kBleuOrder; ++n) {
    s.matches[n] = list[2 + n];
    s.totals[n] = list[2 + kBleuOrder + n];
    if (s.matches[n] > s.totals[n]) return std::nullopt;
  }
  return s;
}

std::vector<std::string> Tokenize13a(std::string_view line) {
  std::string s = absl::StrReplaceAll(std::string(line), {{"<skipped>", ""}});
  s = absl::StrReplaceAll(s, {{"-\n", ""}});
  s = absl::StrReplaceAll(s, {{"\n", " "}});
  for (const auto& [entity, text] : std::initializer_list<std::pair<const char*, const char*>>{
           {"&quot;", "\""}, {"&amp;", "&"}, {"&lt;", "<"}, {"&gt;", ">"}}) {
    s = absl::StrReplaceAll(s, {{entity, text}});
  }
  std::string spaced;
  spaced.reserve(s.size() * 2 + 2);
  spaced += ' ';
  for (char c : s) {
    if (IsSplitSymbol(c)) {
      spaced += ' ';
      spaced += c;
      spaced += ' ';
    } else {
      spaced += c;
    }
  }
  spaced += ' ';
  const auto is_stop = [](char c) { return c == '.' || c == ','; };
  // A period or comma after a non-digit, then one before a non-digit, then a dash after a digit.
  s = PairPass(
      spaced, [&](char a, char b) { return !IsDigit(a) && is_stop(b); },
      [](char a, char b, std::string& out) {
        out.append({a, ' ', b, ' '});
      });
  s = PairPass(
      s, [&](char a, char b) { return is_stop(a) && !IsDigit(b); },
      [](char a, char b, std::string& out) {
        out.append({' ', a, ' ', b});
      });
  s = PairPass(
      s, [](char a, char b) { return IsDigit(a) && b == '-'; },
      [](char a, char b, std::string& out) {
        out.append({a, ' ', b, ' '});
      });
  std::vector<std::string> tokens;
  std::string token;
  for (size_t i = 0; i < s.size();) {
    if (const size_t space = WhitespaceAt(s, i); space > 0) {
      if (!token.empty()) tokens.push_back(std::move(token));
      token.clear();
      i += space;
    } else {
      token += s[i++];
    }
  }
  if (!token.empty()) tokens.push_back(std::move(token));
  return tokens;
}

BleuStats SegmentBleu(std::string_view hypothesis, std::string_view reference) {
  const std::vector<std::string> hyp = Tokenize13a(hypothesis);
  const std::vector<std::string> ref = Tokenize13a(reference);
  BleuStats s;
  s.hypothesis_length = static_cast<int64_t>(hyp.size());
  s.reference_length = static_cast<int64_t>(ref.size());
  for (int n = 1; n <= kBleuOrder; ++n) {
    const auto reference_counts = NgramCounts(ref, n);
    for (const auto& [ngram, count] : NgramCounts(hyp, n)) {
      const auto in_reference = reference_counts.find(ngram);
      if (in_reference != reference_counts.end()) {
        s.matches[n - 1] += std::min(count, in_reference->second);
      }
    }
    s.totals[n - 1] = std::max<int64_t>(0, s.hypothesis_length - n + 1);
  }
  return s;
}

double CorpusBleu(const BleuStats& sum) {
  double brevity = 1.0;
  if (sum.hypothesis_length < sum.reference_length) {
    brevity = sum.hypothesis_length > 0
                  ? std::exp(1.0 - static_cast<double>(sum.reference_length) /
                                       static_cast<double>(sum.hypothesis_length))
                  : 0.0;
  }
  bool any_match = false;
  for (int64_t m : sum.matches) any_match = any_match || m > 0;
  if (!any_match) return 0.0;
  std::array<double, kBleuOrder> precision{};
  double smooth = 1.0;
  for (int n = 0; n < kBleuOrder; ++n) {
    if (sum.totals[n] == 0) break;  // the orders after it keep precision 0
    if (sum.matches[n] == 0) {
      smooth *= 2;
      precision[n] = 100.0 / (smooth * static_cast<double>(sum.totals[n]));
    } else {
      precision[n] =
          100.0 * static_cast<double>(sum.matches[n]) / static_cast<double>(sum.totals[n]);
    }
  }
  double log_sum = 0;
  for (double p : precision) log_sum += p > 0 ? std::log(p) : -9999999999.0;
  return brevity * std::exp(log_sum / kBleuOrder);
}

double BootstrapBleuStderr(const std::vector<BleuStats>& segments, int resamples, uint64_t seed) {
  const size_t n = segments.size();
  if (n < 2 || resamples < 2) return 0.0;
  // The raw generator's output modulo n: defined bit for bit by the standard, unlike the
  // library's distributions, so every process draws the same resamples.
  std::mt19937_64 rng(seed);
  std::vector<double> scores;
  scores.reserve(resamples);
  for (int k = 0; k < resamples; ++k) {
    BleuStats sum;
    for (size_t i = 0; i < n; ++i) sum += segments[rng() % n];
    scores.push_back(CorpusBleu(sum));
  }
  double mean = 0;
  for (double v : scores) mean += v;
  mean /= static_cast<double>(resamples);
  double squares = 0;
  for (double v : scores) squares += (v - mean) * (v - mean);
  return std::sqrt(squares / static_cast<double>(resamples - 1));
}

}  // namespace mesa::spec
