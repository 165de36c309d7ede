#include "model/tasks/niah.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace mesa::model {
namespace {

enum class Haystack { kFiller, kText, kNeedles };
enum class Kind { kWord, kNumber, kUuid };

struct Variant {
  const char* name;
  Haystack haystack;
  Kind key;
  Kind value;
  int keys = 1;            // keys with needles (the first `asked` are asked)
  int values_per_key = 1;  // needles per key
  int asked = 1;
};

constexpr Variant kVariants[] = {
    {"single_1", Haystack::kFiller, Kind::kWord, Kind::kNumber},
    {"single_2", Haystack::kText, Kind::kWord, Kind::kNumber},
    {"single_3", Haystack::kText, Kind::kWord, Kind::kUuid},
    {"multikey_1", Haystack::kText, Kind::kWord, Kind::kNumber, 4},
    {"multikey_2", Haystack::kNeedles, Kind::kWord, Kind::kNumber},
    {"multikey_3", Haystack::kNeedles, Kind::kUuid, Kind::kUuid},
    {"multivalue", Haystack::kText, Kind::kWord, Kind::kNumber, 1, 4},
    {"multiquery", Haystack::kText, Kind::kWord, Kind::kNumber, 4, 1, 4},
};

constexpr char kFiller[] =
    "The river runs to the sea. Birds sing at first light. A stone rests in the field. Wind "
    "moves through the grass. Night follows the day.";
constexpr int kDepths = 40;    // depths round(100 j / 39), j = 0..39
constexpr int kTrimStep = 25;  // units dropped at a time from an item that still overflows

const Variant* FindVariant(absl::string_view name) {
  for (const Variant& v : kVariants) {
    if (name == v.name) return &v;
  }
  return nullptr;
}

std::string KindName(Kind kind) { return kind == Kind::kUuid ? "uuid" : "number"; }

std::string Draw(Kind kind, NiahRandom& rng) {
  switch (kind) {
    case Kind::kNumber:
      return std::to_string(1000000 + rng.Below(9000000));
    case Kind::kUuid: {
      const uint64_t hi = (rng.Next() & ~uint64_t{0xF000}) | 0x4000;                  // version 4
      const uint64_t lo = (rng.Next() & ~(uint64_t{3} << 62)) | (uint64_t{2} << 62);  // variant 10
      return absl::StrFormat("%08x-%04x-%04x-%04x-%012x", hi >> 32, (hi >> 16) & 0xFFFF,
                             hi & 0xFFFF, lo >> 48, lo & 0xFFFFFFFFFFFFull);
    }
    case Kind::kWord: {
      static constexpr char kConsonants[] = "bdfgklmnprstvz";
      static constexpr char kVowels[] = "aeiou";
      std::string word;
      for (int part = 0; part < 2; ++part) {
        if (part == 1) word.push_back('-');
        for (int syllable = 0; syllable < 3; ++syllable) {
          word.push_back(kConsonants[rng.Below(sizeof(kConsonants) - 1)]);
          word.push_back(kVowels[rng.Below(sizeof(kVowels) - 1)]);
        }
      }
      return word;
    }
  }
  return std::string();
}

// A value of `kind` not drawn before in this item.
std::string DrawFresh(Kind kind, NiahRandom& rng, absl::flat_hash_set<std::string>& used) {
  for (;;) {
    std::string v = Draw(kind, rng);
    if (used.insert(v).second) return v;
  }
}

std::string Needle(Kind value_kind, const std::string& key, const std::string& value) {
  return absl::StrCat("Remember this: the ", KindName(value_kind), " for ", key, " is ", value,
                      ".");
}

// "a", "a and b", "a, b, and c".
std::string ListOf(const std::vector<std::string>& items) {
  if (items.size() <= 2) return absl::StrJoin(items, " and ");
  return absl::StrCat(absl::StrJoin(items.begin(), items.end() - 1, ", "), ", and ", items.back());
}

std::vector<std::string> Sentences(absl::string_view text) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i + 1 < text.size(); ++i) {
    if ((text[i] == '.' || text[i] == '?' || text[i] == '!') &&
        absl::ascii_isspace(static_cast<unsigned char>(text[i + 1]))) {
      const absl::string_view s = absl::StripAsciiWhitespace(text.substr(start, i + 1 - start));
      if (!s.empty()) out.emplace_back(s);
      start = i + 1;
    }
  }
  const absl::string_view rest = absl::StripAsciiWhitespace(text.substr(start));
  if (!rest.empty()) out.emplace_back(rest);
  return out;
}

absl::StatusOr<NiahItem> Render(const NiahConfig& config, const Variant& v,
                                const std::vector<std::string>& sentences, int units,
                                int64_t index) {
  NiahRandom rng(config.seed, v.name, config.length, index);
  absl::flat_hash_set<std::string> used;
  NiahItem item;
  // The needles: keys (the first `asked` asked) with their values.
  std::vector<std::pair<std::string, std::string>> needles;
  for (int k = 0; k < v.keys; ++k) {
    const std::string key = DrawFresh(v.key, rng, used);
    if (k < v.asked) item.keys.push_back(key);
    for (int j = 0; j < v.values_per_key; ++j) {
      needles.emplace_back(key, DrawFresh(v.value, rng, used));
      if (k < v.asked) item.expected.push_back(needles.back().second);
    }
  }
  // Shuffled, then given distinct depths drawn from the 40 percentages.
  for (size_t i = needles.size(); i > 1; --i) std::swap(needles[i - 1], needles[rng.Below(i)]);
  std::vector<int> depth_index(kDepths);
  for (int j = 0; j < kDepths; ++j) depth_index[j] = j;
  std::vector<int> depths;
  for (size_t i = 0; i < needles.size(); ++i) {
    std::swap(depth_index[i], depth_index[i + rng.Below(kDepths - i)]);
    depths.push_back(static_cast<int>(std::lround(100.0 * depth_index[i] / (kDepths - 1))));
  }
  // The haystack's units.
  std::vector<std::string> haystack;
  for (int u = 0; u < units; ++u) {
    switch (v.haystack) {
      case Haystack::kFiller:
        haystack.emplace_back(kFiller);
        break;
      case Haystack::kText:
        haystack.push_back(sentences[u % sentences.size()]);
        break;
      case Haystack::kNeedles: {
        const std::string key = DrawFresh(v.key, rng, used);
        haystack.push_back(Needle(v.value, key, DrawFresh(v.value, rng, used)));
        break;
      }
    }
  }
  // A needle at depth d goes before unit ⌊n d / 100⌋; needles at one place keep their order.
  std::vector<std::vector<std::string>> before(units + 1);
  for (size_t i = 0; i < needles.size(); ++i) {
    const int at = static_cast<int>(int64_t{units} * depths[i] / 100);
    before[at].push_back(Needle(v.value, needles[i].first, needles[i].second));
    if (needles[i].first == item.keys[0] && needles[i].second == item.expected[0]) {
      item.first_depth = depths[i];
    }
  }
  std::vector<std::string> pieces;
  for (int u = 0; u <= units; ++u) {
    for (std::string& n : before[u]) pieces.push_back(std::move(n));
    if (u < units) pieces.push_back(std::move(haystack[u]));
  }
  const std::string kind = KindName(v.value);
  const char* separator = v.haystack == Haystack::kText ? " " : "\n";
  std::string question, answer;
  if (v.asked > 1) {
    question = absl::StrCat("What are the ", kind, "s for ", ListOf(item.keys), "?");
    answer = absl::StrCat(" The ", kind, "s for ", ListOf(item.keys), " are");
  } else if (v.values_per_key > 1) {
    question = absl::StrCat("What are all the ", kind, "s for ", item.keys[0], "?");
    answer = absl::StrCat(" The ", kind, "s for ", item.keys[0], " are");
  } else {
    question = absl::StrCat("What is the ", kind, " for ", item.keys[0], "?");
    answer = absl::StrCat(" The ", kind, " for ", item.keys[0], " is");
  }
  item.prompt = absl::StrCat("Some special ", kind,
                             "s are hidden in the text below. Memorise them; you will be asked "
                             "about them afterwards.\n",
                             absl::StrJoin(pieces, separator), "\n", question, answer);
  item.units = units;
  return item;
}

bool Fits(const NiahConfig& config, const Tokenizer& tokenizer, const std::string& prompt) {
  return 1 + static_cast<int64_t>(tokenizer.Encode(prompt).size()) + config.max_new_tokens <=
         config.length;
}

absl::StatusOr<const Variant*> Check(const NiahConfig& config,
                                     std::vector<std::string>* sentences) {
  const Variant* v = FindVariant(config.variant);
  if (v == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("niah variant: unknown \"", config.variant,
                                                   "\" (", absl::StrJoin(NiahVariants(), ", "),
                                                   ")"));
  }
  if (v->haystack == Haystack::kText) {
    *sentences = Sentences(config.haystack_text);
    if (sentences->empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "niah variant ", v->name, ": needs haystack text (haystack_path), and it has none"));
    }
  }
  return v;
}

}  // namespace

const std::vector<std::string>& NiahVariants() {
  static const auto* const kNames = [] {
    auto* names = new std::vector<std::string>;
    for (const Variant& v : kVariants) names->emplace_back(v.name);
    return names;
  }();
  return *kNames;
}

NiahRandom::NiahRandom(uint64_t seed, absl::string_view variant, int length, int64_t index) {
  const std::string key = absl::StrCat(seed, "/", variant, "/", length, "/", index);
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a-64
  for (unsigned char c : key) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  state_ = h;
}

uint64_t NiahRandom::Next() {  // SplitMix64
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t NiahRandom::Below(uint64_t n) {
  const uint64_t limit = ~uint64_t{0} - (~uint64_t{0} % n);  // a multiple of n
  for (;;) {
    const uint64_t x = Next();
    if (x < limit) return x % n;
  }
}

absl::StatusOr<int> NiahUnits(const NiahConfig& config, const Tokenizer& tokenizer) {
  std::vector<std::string> sentences;
  absl::StatusOr<const Variant*> v = Check(config, &sentences);
  if (!v.ok()) return v.status();
  auto fits = [&](int units) {
    absl::StatusOr<NiahItem> item = Render(config, **v, sentences, units, 0);
    return item.ok() && Fits(config, tokenizer, item->prompt);
  };
  if (!fits(0)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "niah ", config.variant, " at length ", config.length, ": the needles and question alone ",
        "do not fit with max_new_tokens ", config.max_new_tokens));
  }
  int lo = 0, hi = 1;  // fits(lo); find hi that does not
  while (fits(hi)) {
    lo = hi;
    if (hi > (1 << 24)) break;
    hi *= 2;
  }
  while (hi - lo > 1) {
    const int mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

absl::StatusOr<NiahItem> GenerateNiahItem(const NiahConfig& config, const Tokenizer& tokenizer,
                                          int units, int64_t index) {
  std::vector<std::string> sentences;
  absl::StatusOr<const Variant*> v = Check(config, &sentences);
  if (!v.ok()) return v.status();
  for (int n = std::max(units, 0);; n = std::max(0, n - kTrimStep)) {
    absl::StatusOr<NiahItem> item = Render(config, **v, sentences, n, index);
    if (!item.ok()) return item.status();
    if (Fits(config, tokenizer, item->prompt)) return item;
    if (n == 0) {
      return absl::FailedPreconditionError(absl::StrCat("niah ", config.variant, " item ", index,
                                                        " does not fit length ", config.length));
    }
  }
}

absl::StatusOr<std::vector<TaskExample>> NiahTaskItems(const std::vector<std::string>& variants,
                                                       const std::vector<int>& lengths,
                                                       int items_per_cell, const NiahConfig& base,
                                                       const Tokenizer& tokenizer) {
  std::vector<TaskExample> out;
  for (const std::string& variant : variants) {
    for (int length : lengths) {
      NiahConfig config = base;
      config.variant = variant;
      config.length = length;
      absl::StatusOr<int> units = NiahUnits(config, tokenizer);
      if (!units.ok()) return units.status();
      for (int i = 0; i < items_per_cell; ++i) {
        absl::StatusOr<NiahItem> item = GenerateNiahItem(config, tokenizer, *units, i);
        if (!item.ok()) return item.status();
        TaskExample e;
        e.line = i + 1;
        e.id = absl::StrCat(variant, "/", length, "/", i);
        e.form = TaskForm::kNeedle;
        e.context = std::move(item->prompt);
        e.answers = std::move(item->expected);
        if (config.score_greedy && e.answers.size() == 1) e.target = " " + e.answers[0];
        e.max_new_tokens = config.max_new_tokens;
        e.niah = TaskExample::NiahTag{variant, length, item->first_depth};
        out.push_back(std::move(e));
      }
    }
  }
  return out;
}

NiahMatch ScoreNiah(absl::string_view output, const std::vector<std::string>& expected) {
  std::string text(absl::StripAsciiWhitespace(output));
  for (char& c : text) {
    if (static_cast<unsigned char>(c) < 0x20) c = '\n';
  }
  text = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  NiahMatch m;
  int hits = 0;
  for (const std::string& v : expected) hits += absl::StrContains(text, absl::AsciiStrToLower(v));
  m.match_all = expected.empty() ? 0 : static_cast<double>(hits) / expected.size();
  m.match_any = hits > 0;
  return m;
}

}  // namespace mesa::model
