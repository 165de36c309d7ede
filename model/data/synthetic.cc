#include "model/data/synthetic.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"

namespace mesa::model {
namespace {

// SplitMix64: small, fast, and the same sequence on every platform (std:: distributions are not).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n) (n >= 1; the modulo bias is below 2^-40 for the sizes used here).
  int64_t Below(int64_t n) { return static_cast<int64_t>(Next() % static_cast<uint64_t>(n)); }
  int32_t In(int32_t lo, int32_t hi) { return lo + static_cast<int32_t>(Below(hi - lo)); }
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

uint64_t Mix(uint64_t a, uint64_t b) { return Rng(a * 0x100000001b3ULL ^ b).Next(); }

// The example's generator and the task's own (memorization's fixed facts) draw from different
// streams of the same seed.
Rng ExampleRng(uint64_t seed, int task_index, SyntheticSplit split, int64_t index) {
  return Rng(
      Mix(Mix(Mix(seed, static_cast<uint64_t>(task_index) + 1), static_cast<uint64_t>(split) + 1),
          static_cast<uint64_t>(index) + 1));
}

// A sequence s and which of its tokens are answers; inputs = s[0..T), targets[t] = s[t+1] where
// s[t+1] is an answer.
struct Sequence {
  std::vector<int32_t> s;
  std::vector<bool> answer;
  std::vector<uint64_t> valid_next;  // regbench: the tokens that may follow s[t]
  void Push(int32_t token, bool is_answer) {
    s.push_back(token);
    answer.push_back(is_answer);
  }
};

// The generators draw task ids; the example holds them as fed (spec::SyntheticTokenId: from 256
// up one higher, past BOS).
SyntheticExample ToExample(const Sequence& q, int seq_len) {
  SyntheticExample ex;
  ex.inputs.assign(seq_len, 0);
  ex.targets.assign(seq_len, kNoTarget);
  for (int t = 0; t < seq_len && t < static_cast<int>(q.s.size()); ++t) {
    ex.inputs[t] = spec::SyntheticTokenId(q.s[t]);
    if (t + 1 < static_cast<int>(q.s.size()) && q.answer[t + 1]) {
      ex.targets[t] = spec::SyntheticTokenId(q.s[t + 1]);
    }
  }
  if (!q.valid_next.empty()) {
    ex.valid_next.assign(seq_len, 0);
    for (int t = 0; t < seq_len && t < static_cast<int>(q.s.size()); ++t) {
      if (ex.targets[t] != kNoTarget) ex.valid_next[t] = q.valid_next[t];
    }
  }
  return ex;
}

// Zoology's MQAR: N pairs (distinct keys from [1, V/2), values from [V/2, V)), then every key
// queried once at a random pair slot of the rest (filler 0); the answer is the value after the
// queried key.
Sequence Mqar(const SyntheticTaskParams& p, Rng& rng) {
  const int n = p.num_kv_pairs, half = p.vocab_size / 2;
  std::vector<int32_t> keys(half - 1);
  std::iota(keys.begin(), keys.end(), 1);
  for (int i = 0; i < n; ++i) std::swap(keys[i], keys[i + rng.Below(keys.size() - i)]);
  std::vector<int32_t> values(n);
  for (int32_t& v : values) v = rng.In(half, p.vocab_size);
  Sequence q;
  q.s.assign(p.seq_len + 1, 0);
  q.answer.assign(p.seq_len + 1, false);
  for (int i = 0; i < n; ++i) {
    q.s[2 * i] = keys[i];
    q.s[2 * i + 1] = values[i];
  }
  // Pair slots after the context: [2n + 2j, 2n + 2j + 1] for j < slots.
  const int slots = (p.seq_len - 2 * n) / 2;
  std::vector<int> slot(slots);
  std::iota(slot.begin(), slot.end(), 0);
  for (int i = 0; i < n; ++i) std::swap(slot[i], slot[i + rng.Below(slots - i)]);
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  for (int i = n - 1; i > 0; --i) std::swap(order[i], order[rng.Below(i + 1)]);
  for (int i = 0; i < n; ++i) {
    const int at = 2 * n + 2 * slot[i];
    q.s[at] = keys[order[i]];
    q.s[at + 1] = values[order[i]];
    q.answer[at + 1] = true;
  }
  q.s.resize(p.seq_len);
  q.answer.resize(p.seq_len);
  return q;
}

// MAD in-context recall (multi-query), noisy and fuzzy recall: key motifs from [0, V/2) mapped to
// value motifs from [V/2, V) afresh in every example; the sequence is key-value pairs drawn from
// the mapping (noisy: with noise tokens from [V, V + noise_vocab) between pairs, a share
// frac_noise of all tokens); a value is an answer when its key came earlier in the example.
Sequence Recall(const SyntheticTaskParams& p, Rng& rng) {
  const int k_size = std::max(1, p.k_motif_size), v_size = std::max(1, p.v_motif_size);
  const int half = p.vocab_size / 2;
  // Distinct keys: every key token for single-token keys; for motifs, enough that keys repeat.
  const int distinct = k_size == 1 ? half : std::max(2, p.seq_len / (4 * (k_size + v_size)));
  std::vector<std::vector<int32_t>> keys, values;
  while (static_cast<int>(keys.size()) < distinct) {
    std::vector<int32_t> key(k_size), value(v_size);
    if (k_size == 1) {
      key[0] = static_cast<int32_t>(keys.size());
    } else {
      for (int32_t& t : key) t = rng.In(0, half);
      if (std::find(keys.begin(), keys.end(), key) != keys.end()) continue;
    }
    for (int32_t& t : value) t = rng.In(half, p.vocab_size);
    keys.push_back(std::move(key));
    values.push_back(std::move(value));
  }
  std::vector<bool> seen(distinct, false);
  // A noise item is one token and a pair k + v: drawing noise items with this probability makes
  // frac_noise the share of noise tokens.
  const double f = p.frac_noise, pair = k_size + v_size;
  const double p_noise = f * pair / (1 - f + f * pair);
  Sequence q;
  while (static_cast<int>(q.s.size()) < p.seq_len) {
    if (f > 0 && rng.Uniform() < p_noise) {
      q.Push(p.vocab_size + rng.In(0, p.noise_vocab_size), false);
      continue;
    }
    const int i = static_cast<int>(rng.Below(distinct));
    for (int32_t t : keys[i]) q.Push(t, false);
    for (int32_t t : values[i]) q.Push(t, seen[i]);
    seen[i] = true;
  }
  q.s.resize(p.seq_len);
  q.answer.resize(p.seq_len);
  return q;
}

// MAD selective copying: n tokens from [2, V) at random positions among blanks (0), then a
// separator (1), then the n tokens in order, which are the answers.
Sequence SelectiveCopying(const SyntheticTaskParams& p, Rng& rng) {
  const int n = p.num_tokens_to_copy, region = p.seq_len - n - 1;
  std::vector<int> where(region);
  std::iota(where.begin(), where.end(), 0);
  for (int i = 0; i < n; ++i) std::swap(where[i], where[i + rng.Below(region - i)]);
  std::sort(where.begin(), where.begin() + n);
  Sequence q;
  q.s.assign(region, 0);
  q.answer.assign(region, false);
  std::vector<int32_t> tokens(n);
  for (int i = 0; i < n; ++i) {
    tokens[i] = rng.In(2, p.vocab_size);
    q.s[where[i]] = tokens[i];
  }
  q.Push(1, false);
  for (int32_t t : tokens) q.Push(t, true);
  return q;
}

// Compression, autoregressively: (T - 1) / 2 tokens from [1, V), the compress token 0, then the
// same tokens again, which are the answers (MAD decodes them from one embedding instead).
Sequence Compression(const SyntheticTaskParams& p, Rng& rng) {
  const int n = (p.seq_len - 1) / 2;
  std::vector<int32_t> tokens(n);
  for (int32_t& t : tokens) t = rng.In(1, p.vocab_size);
  Sequence q;
  for (int32_t t : tokens) q.Push(t, false);
  q.Push(0, false);
  for (int32_t t : tokens) q.Push(t, true);
  return q;
}

// MAD memorization: one fixed mapping of keys [0, V/2) to values [V/2, V) for the whole task
// (from the seed alone, the same in both splits); every value is an answer.
Sequence Memorization(const SyntheticTaskParams& p, uint64_t seed, int task_index, Rng& rng) {
  const int half = p.vocab_size / 2;
  Rng facts(Mix(Mix(seed, static_cast<uint64_t>(task_index) + 1), 0));
  std::vector<int32_t> value_of(half);
  for (int32_t& v : value_of) v = facts.In(half, p.vocab_size);
  Sequence q;
  while (static_cast<int>(q.s.size()) < p.seq_len) {
    const int32_t key = rng.In(0, half);
    q.Push(key, false);
    q.Push(value_of[key], true);
  }
  q.s.resize(p.seq_len);
  q.answer.resize(p.seq_len);
  return q;
}

// A fresh random automaton per example (RegBench draws one per sequence) with between
// min_states and num_states states: every state gets between 1 and max(1, alphabet / 2)
// distinct outgoing symbols of the whole alphabet (1 .. V-1), each to a uniformly drawn state;
// with alphabet_per_automaton (Akyürek et al.) the alphabet is as many symbols of 1 .. V-1 as
// the automaton has states, and a state has 1 to min(4, alphabet - 1) of them. No state is a dead
// end, so every string may stop in any state (all states accept).
RegBenchAutomaton RandomAutomaton(const SyntheticTaskParams& p, Rng& rng) {
  const int states =
      p.min_states > 0 && p.min_states < p.num_states
          ? p.min_states + static_cast<int>(rng.Below(p.num_states - p.min_states + 1))
          : p.num_states;
  std::vector<int32_t> all(p.vocab_size - 1);
  std::iota(all.begin(), all.end(), kRegBenchDelimiter + 1);
  int alphabet = static_cast<int>(all.size());
  int max_degree = std::max(1, alphabet / 2);
  if (p.alphabet_per_automaton) {
    alphabet = states;
    for (int i = 0; i < alphabet; ++i) std::swap(all[i], all[i + rng.Below(all.size() - i)]);
    all.resize(alphabet);
    std::sort(all.begin(), all.end());
    max_degree = std::max(1, std::min(4, alphabet - 1));
  }
  RegBenchAutomaton a;
  a.edges.resize(states);
  std::vector<int32_t> symbols;
  for (auto& out : a.edges) {
    symbols = all;
    const int degree = 1 + static_cast<int>(rng.Below(max_degree));
    for (int i = 0; i < degree; ++i) {
      std::swap(symbols[i], symbols[i + rng.Below(alphabet - i)]);
      out.emplace_back(symbols[i], static_cast<int>(rng.Below(states)));
    }
  }
  return a;
}

// Whether two automata have the same edges (in any order per state).
bool SameAutomaton(RegBenchAutomaton a, RegBenchAutomaton b) {
  if (a.edges.size() != b.edges.size()) return false;
  for (size_t s = 0; s < a.edges.size(); ++s) {
    std::sort(a.edges[s].begin(), a.edges[s].end());
    std::sort(b.edges[s].begin(), b.edges[s].end());
  }
  return a.edges == b.edges;
}

// Test automaton k of a task (test_automata): its own stream, apart from both splits'.
RegBenchAutomaton TestAutomaton(const SyntheticTaskParams& p, uint64_t seed, int task_index,
                                int64_t k) {
  Rng rng(
      Mix(Mix(Mix(seed, static_cast<uint64_t>(task_index) + 1), 3), static_cast<uint64_t>(k) + 1));
  return RandomAutomaton(p, rng);
}

// The automaton of an example: with test_automata N, evaluation example i uses test automaton
// i mod N, and a training example redraws while its automaton is one of them; else a fresh one.
RegBenchAutomaton ExampleAutomaton(const SyntheticTaskParams& p, uint64_t seed, int task_index,
                                   SyntheticSplit split, int64_t index, Rng& rng) {
  if (p.test_automata > 0 && split == SyntheticSplit::kEval) {
    return TestAutomaton(p, seed, task_index, index % p.test_automata);
  }
  for (;;) {
    RegBenchAutomaton a = RandomAutomaton(p, rng);
    bool held_out = false;
    for (int64_t k = 0; k < p.test_automata && !held_out; ++k) {
      held_out = SameAutomaton(TestAutomaton(p, seed, task_index, k), a);
    }
    if (!held_out) return a;
  }
}

// RegBench (Akyürek et al. 2024): strings_per_sequence strings of the example's automaton, each
// followed by the delimiter, filling seq_len exactly (the seq_len - strings symbols split at random
// into strings of at least one). A string starts in state 0 and takes a uniformly drawn outgoing
// edge per symbol (a probabilistic automaton). Every next token is a target; the right
// predictions are the current state's outgoing symbols (after a delimiter: state 0's). The
// delimiter itself is never counted right: it is no transition, and a string's end is random.
Sequence RegBench(const SyntheticTaskParams& p, const RegBenchAutomaton& a, Rng& rng) {
  const int strings =
      p.min_strings > 0 && p.min_strings < p.strings_per_sequence
          ? p.min_strings + static_cast<int>(rng.Below(p.strings_per_sequence - p.min_strings + 1))
          : p.strings_per_sequence;
  std::vector<int> cuts;  // the end of each string, counted in symbols
  if (p.max_string_length > 0) {
    // Akyürek et al.: strings of 0 .. max_string_length symbols; the rest of the window padded.
    int end = 0;
    for (int i = 0; i < strings; ++i) {
      end += static_cast<int>(rng.Below(p.max_string_length + 1));
      cuts.push_back(end);
    }
  } else {
    // Filling the window: strings - 1 distinct cuts among the symbols - 1 boundaries.
    const int symbols = p.seq_len - strings;
    cuts.resize(symbols - 1);
    std::iota(cuts.begin(), cuts.end(), 1);
    for (int i = 0; i < strings - 1; ++i) {
      std::swap(cuts[i], cuts[i + rng.Below(symbols - 1 - i)]);
    }
    cuts.resize(strings - 1);
    std::sort(cuts.begin(), cuts.end());
    cuts.push_back(symbols);
  }
  auto mask = [&a](int state) {
    uint64_t m = 0;
    for (const auto& [symbol, next] : a.edges[state]) m |= uint64_t{1} << symbol;
    return m;
  };
  Sequence q;
  int previous_cut = 0;
  for (int cut : cuts) {
    int state = 0;
    for (int i = previous_cut; i < cut; ++i) {
      const auto& [symbol, next] = a.edges[state][rng.Below(a.edges[state].size())];
      q.Push(symbol, true);
      state = next;
      q.valid_next.push_back(mask(state));
    }
    q.Push(kRegBenchDelimiter, true);
    q.valid_next.push_back(mask(0));
    previous_cut = cut;
  }
  return q;
}

}  // namespace

RegBenchAutomaton RegBenchAutomatonOf(const SyntheticTaskParams& task, uint64_t seed,
                                      int task_index, SyntheticSplit split, int64_t index) {
  Rng rng = ExampleRng(seed, task_index, split, index);
  return ExampleAutomaton(task, seed, task_index, split, index, rng);
}

namespace {

// Parity (the MesaNet paper's App. H): uniform bits of a drawn length; position t's target is
// the parity of bits 0..t (a label, not the next input), scored from length score_from on.
SyntheticExample Parity(const SyntheticTaskParams& p, Rng& rng) {
  SyntheticExample ex;
  ex.inputs.assign(p.seq_len, 0);
  ex.targets.assign(p.seq_len, kNoTarget);
  const int length = p.min_length + static_cast<int>(rng.Below(p.seq_len - p.min_length + 1));
  int parity = 0;
  for (int t = 0; t < length; ++t) {
    const int bit = static_cast<int>(rng.Below(2));
    parity ^= bit;
    ex.inputs[t] = spec::kParityBit0 + bit;
    if (t + 1 >= p.score_from) ex.targets[t] = spec::kParityEven + parity;
  }
  return ex;
}

}  // namespace

SyntheticExample GenerateExample(const SyntheticTaskParams& task, uint64_t seed, int task_index,
                                 SyntheticSplit split, int64_t index) {
  Rng rng = ExampleRng(seed, task_index, split, index);
  if (task.kind == SyntheticKind::kParity) return Parity(task, rng);
  Sequence q;
  switch (task.kind) {
    case SyntheticKind::kMqar:
      q = Mqar(task, rng);
      break;
    case SyntheticKind::kInContextRecall:
    case SyntheticKind::kNoisyRecall:
    case SyntheticKind::kFuzzyRecall:
      q = Recall(task, rng);
      break;
    case SyntheticKind::kSelectiveCopying:
      q = SelectiveCopying(task, rng);
      break;
    case SyntheticKind::kCompression:
      q = Compression(task, rng);
      break;
    case SyntheticKind::kMemorization:
      q = Memorization(task, seed, task_index, rng);
      break;
    case SyntheticKind::kRegBench:
      q = RegBench(task, ExampleAutomaton(task, seed, task_index, split, index, rng), rng);
      break;
    case SyntheticKind::kParity:
      break;  // above
  }
  return ToExample(q, task.seq_len);
}

SyntheticSource::SyntheticSource(SyntheticSourceOptions options) : options_(std::move(options)) {
  const int64_t tasks = options_.only_task >= 0 ? 1 : static_cast<int64_t>(options_.tasks.size());
  stream_length_ = tasks * options_.examples;
  has_valid_sets_ = std::any_of(options_.tasks.begin(), options_.tasks.end(),
                                [](const auto& t) { return t.kind == SyntheticKind::kRegBench; });
}

absl::Status SyntheticSource::SetPosition(const DataPosition& position) {
  if (position.shard != 0 || position.offset < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data position (shard ", position.shard, ", offset ", position.offset,
        ") is not a position of synthetic data (shard 0, a non-negative example index)"));
  }
  position_ = position;
  return absl::OkStatus();
}

absl::Status SyntheticSource::Next(std::vector<int32_t>* tokens, std::vector<int32_t>* targets,
                                   bool wrap) {
  const SyntheticSourceOptions& o = options_;
  const int64_t step = int64_t{o.batch} * o.world_size;
  if (!wrap && position_.offset + step > stream_length_) {
    return absl::OutOfRangeError("end of data");
  }
  tokens->assign(int64_t{o.batch} * o.window, 0);
  targets->assign(int64_t{o.batch} * o.window, o.no_target);
  if (has_valid_sets_) valid_next_.assign(int64_t{o.batch} * o.window, 0);
  for (int b = 0; b < o.batch; ++b) {
    const int64_t j = (position_.offset + int64_t{o.rank} * o.batch + b) % stream_length_;
    const int task = o.only_task >= 0 ? o.only_task : static_cast<int>(j % o.tasks.size());
    const int64_t index = o.only_task >= 0 ? j : j / static_cast<int64_t>(o.tasks.size());
    const SyntheticExample ex = GenerateExample(o.tasks[task], o.seed, task, o.split, index);
    for (size_t t = 0; t < ex.inputs.size(); ++t) {
      (*tokens)[int64_t{b} * o.window + t] = ex.inputs[t];
      if (ex.targets[t] != kNoTarget) (*targets)[int64_t{b} * o.window + t] = ex.targets[t];
      if (!ex.valid_next.empty()) valid_next_[int64_t{b} * o.window + t] = ex.valid_next[t];
    }
  }
  position_.offset += step;
  position_.epoch = position_.offset / stream_length_;
  return absl::OkStatus();
}

}  // namespace mesa::model
