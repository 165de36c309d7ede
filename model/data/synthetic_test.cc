#include "model/data/synthetic.h"

#include <algorithm>
#include <map>
#include <set>

#include "gtest/gtest.h"

namespace mesa::model {
namespace {

SyntheticTaskParams Task(const std::string& name, mesa::v1::SyntheticTask overrides = {}) {
  overrides.set_task(name);
  EXPECT_TRUE(spec::SyntheticTaskProblems(overrides, 256).empty()) << name;
  return spec::ResolveSyntheticTask(overrides);
}

// The answers of an example as (position in the sequence, token): target t predicts s[t + 1].
std::vector<std::pair<int, int32_t>> Answers(const SyntheticExample& ex) {
  std::vector<std::pair<int, int32_t>> out;
  for (size_t t = 0; t < ex.targets.size(); ++t) {
    if (ex.targets[t] == kNoTarget) continue;
    EXPECT_LT(t + 1, ex.inputs.size());
    if (t + 1 < ex.inputs.size()) {
      EXPECT_EQ(ex.inputs[t + 1], ex.targets[t]) << "t " << t;
    }
    out.emplace_back(static_cast<int>(t) + 1, ex.targets[t]);
  }
  return out;
}

const char* const kAllTasks[] = {"mqar",         "in_context_recall", "noisy_recall",
                                 "fuzzy_recall", "selective_copying", "compression",
                                 "memorization", "regbench"};

TEST(SyntheticTest, ExamplesAreAPureFunctionOfSeedTaskSplitAndIndex) {
  for (const char* name : kAllTasks) {
    const SyntheticTaskParams task = Task(name);
    const SyntheticExample a = GenerateExample(task, 7, 0, SyntheticSplit::kTrain, 3);
    const SyntheticExample b = GenerateExample(task, 7, 0, SyntheticSplit::kTrain, 3);
    EXPECT_EQ(a.inputs, b.inputs) << name;
    EXPECT_EQ(a.targets, b.targets) << name;
    EXPECT_EQ(a.valid_next, b.valid_next) << name;
    ASSERT_EQ(a.inputs.size(), static_cast<size_t>(task.seq_len)) << name;
    EXPECT_FALSE(Answers(a).empty()) << name;
    for (auto [seed, split, index] :
         {std::tuple{8, SyntheticSplit::kTrain, 3}, std::tuple{7, SyntheticSplit::kEval, 3},
          std::tuple{7, SyntheticSplit::kTrain, 4}}) {
      EXPECT_NE(GenerateExample(task, seed, 0, split, index).inputs, a.inputs) << name;
    }
    const int limit = task.vocab_size + task.noise_vocab_size;
    for (int32_t t : a.inputs) {
      EXPECT_GE(t, 0) << name;
      EXPECT_LT(t, limit) << name;
    }
  }
}

TEST(SyntheticTest, MqarQueriesEveryKeyOnceAndAnswersItsValue) {
  mesa::v1::SyntheticTask o;
  o.set_num_kv_pairs(8);
  o.set_seq_len(64);
  o.set_vocab_size(64);
  const SyntheticTaskParams task = Task("mqar", o);
  for (int64_t i = 0; i < 50; ++i) {
    const SyntheticExample ex = GenerateExample(task, 1, 0, SyntheticSplit::kTrain, i);
    std::map<int32_t, int32_t> value_of;
    for (int p = 0; p < 8; ++p) {
      EXPECT_GE(ex.inputs[2 * p], 1);
      EXPECT_LT(ex.inputs[2 * p], 32);
      EXPECT_GE(ex.inputs[2 * p + 1], 32);
      EXPECT_TRUE(value_of.emplace(ex.inputs[2 * p], ex.inputs[2 * p + 1]).second)
          << "keys are distinct";
    }
    const auto answers = Answers(ex);
    ASSERT_EQ(answers.size(), 8u);
    std::set<int32_t> queried;
    for (auto [at, value] : answers) {
      EXPECT_GE(at, 17);  // after the context
      const int32_t key = ex.inputs[at - 1];
      ASSERT_TRUE(value_of.count(key)) << "the query is a key of the context";
      EXPECT_EQ(value, value_of[key]);
      queried.insert(key);
    }
    EXPECT_EQ(queried.size(), 8u);
  }
}

// Recall tasks: every answered value (motif) follows a key (motif) that appeared earlier followed
// by the same value; the first occurrence of a key is never an answer.
void ExpectRecall(const SyntheticTaskParams& task) {
  const int k = std::max(1, task.k_motif_size), v = std::max(1, task.v_motif_size);
  for (int64_t i = 0; i < 30; ++i) {
    const SyntheticExample ex = GenerateExample(task, 2, 1, SyntheticSplit::kTrain, i);
    const std::vector<int32_t>& s = ex.inputs;
    const auto answers = Answers(ex);
    ASSERT_FALSE(answers.empty());
    for (size_t r = 0; r < answers.size();) {
      const int a = answers[r].first;
      int run = 0;
      while (r + run < answers.size() && answers[r + run].first == a + run && run < v) ++run;
      EXPECT_TRUE(run == v || a + run == static_cast<int>(s.size())) << "whole value motifs";
      ASSERT_GE(a, k);
      bool earlier = false;
      for (int b = 0; b + k + run <= a - k && !earlier; ++b) {
        earlier = std::equal(s.begin() + b, s.begin() + b + k, s.begin() + a - k) &&
                  std::equal(s.begin() + b + k, s.begin() + b + k + run, s.begin() + a);
      }
      EXPECT_TRUE(earlier) << "example " << i << " answer at " << a;
      r += run;
    }
  }
}

TEST(SyntheticTest, InContextRecallAnswersRepeatedKeys) { ExpectRecall(Task("in_context_recall")); }

TEST(SyntheticTest, FuzzyRecallAnswersWholeValueMotifsOfRepeatedKeyMotifs) {
  ExpectRecall(Task("fuzzy_recall"));
}

TEST(SyntheticTest, NoisyRecallHasItsShareOfNoiseAndNeverAnswersIt) {
  const SyntheticTaskParams task = Task("noisy_recall");
  ExpectRecall(task);
  int64_t noise = 0, total = 0;
  for (int64_t i = 0; i < 200; ++i) {
    const SyntheticExample ex = GenerateExample(task, 3, 0, SyntheticSplit::kEval, i);
    for (size_t t = 0; t < ex.inputs.size(); ++t) {
      const bool is_noise = ex.inputs[t] >= task.vocab_size;
      noise += is_noise;
      ++total;
      if (t > 0 && is_noise) {
        EXPECT_EQ(ex.targets[t - 1], kNoTarget);
      }
    }
  }
  EXPECT_NEAR(static_cast<double>(noise) / total, task.frac_noise, 0.02);
}

TEST(SyntheticTest, SelectiveCopyingAnswersTheMarkedTokensInOrder) {
  const SyntheticTaskParams task = Task("selective_copying");
  for (int64_t i = 0; i < 30; ++i) {
    const SyntheticExample ex = GenerateExample(task, 4, 0, SyntheticSplit::kTrain, i);
    const int n = task.num_tokens_to_copy, sep = task.seq_len - n - 1;
    EXPECT_EQ(ex.inputs[sep], 1);
    std::vector<int32_t> marked;
    for (int t = 0; t < sep; ++t) {
      if (ex.inputs[t] != 0) marked.push_back(ex.inputs[t]);
    }
    std::vector<int32_t> answered;
    for (auto [at, token] : Answers(ex)) {
      EXPECT_GT(at, sep);
      answered.push_back(token);
    }
    EXPECT_EQ(answered, marked);
    EXPECT_EQ(static_cast<int>(marked.size()), n);
  }
}

TEST(SyntheticTest, CompressionAnswersTheTokensBeforeTheCompressToken) {
  const SyntheticTaskParams task = Task("compression");
  const SyntheticExample ex = GenerateExample(task, 5, 0, SyntheticSplit::kTrain, 0);
  const int n = (task.seq_len - 1) / 2;
  EXPECT_EQ(ex.inputs[n], 0);
  const auto answers = Answers(ex);
  ASSERT_EQ(static_cast<int>(answers.size()), n);
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(answers[i].first, n + 1 + i);
    EXPECT_EQ(answers[i].second, ex.inputs[i]);
  }
}

TEST(SyntheticTest, MemorizationKeepsOneMappingAcrossExamplesAndSplits) {
  const SyntheticTaskParams task = Task("memorization");
  std::map<int32_t, int32_t> value_of;
  int answers = 0;
  for (SyntheticSplit split : {SyntheticSplit::kTrain, SyntheticSplit::kEval}) {
    for (int64_t i = 0; i < 100; ++i) {
      const SyntheticExample ex = GenerateExample(task, 6, 2, split, i);
      for (auto [at, value] : Answers(ex)) {
        auto [it, fresh] = value_of.emplace(ex.inputs[at - 1], value);
        EXPECT_EQ(it->second, value) << "key " << ex.inputs[at - 1];
        ++answers;
      }
    }
  }
  EXPECT_EQ(answers, 2 * 100 * task.seq_len / 2);
  // Another seed, other facts.
  const SyntheticExample other = GenerateExample(task, 99, 2, SyntheticSplit::kTrain, 0);
  int differ = 0;
  for (auto [at, value] : Answers(other)) differ += value_of[other.inputs[at - 1]] != value;
  EXPECT_GT(differ, 0);
}

// Above 256 token ids (MAD's memorization settings go to 8,192): a task id v >= 256 is fed as
// v + 1, so no input or answer is BOS (256, the unscored target) and every id is below
// SyntheticModelVocab. Memorization at 4,096 ids: 2,048 keys, the same fact per key in every
// example of both splits, deterministic, keys and values on both sides of 256.
TEST(SyntheticTest, MemorizationWithFourThousandIdsSkipsBosAndKeepsItsFacts) {
  mesa::v1::SyntheticTask o;
  o.set_vocab_size(4096);
  const SyntheticTaskParams task = Task("memorization", o);
  ASSERT_EQ(spec::SyntheticModelVocab(task), 4097);
  // Task ids as fed: keys [0, 2048) -> [0, 256) and [257, 2049); values [2048, 4096) -> +1.
  auto is_key = [](int32_t t) { return t >= 0 && t <= 2048 && t != 256; };
  auto is_value = [](int32_t t) { return t >= 2049 && t < 4097; };
  std::map<int32_t, int32_t> value_of;
  int answers = 0, keys_above_bos = 0, keys_below_bos = 0;
  for (SyntheticSplit split : {SyntheticSplit::kTrain, SyntheticSplit::kEval}) {
    for (int64_t i = 0; i < 200; ++i) {
      const SyntheticExample ex = GenerateExample(task, 6, 2, split, i);
      const SyntheticExample again = GenerateExample(task, 6, 2, split, i);
      ASSERT_EQ(ex.inputs, again.inputs);
      ASSERT_EQ(ex.targets, again.targets);
      for (int32_t t : ex.inputs) ASSERT_TRUE(is_key(t) || is_value(t)) << t;
      for (auto [at, value] : Answers(ex)) {
        const int32_t key = ex.inputs[at - 1];
        ASSERT_TRUE(is_key(key)) << key;
        ASSERT_TRUE(is_value(value)) << value;
        auto [it, fresh] = value_of.emplace(key, value);
        EXPECT_EQ(it->second, value) << "key " << key;
        ++answers;
        (key > spec::kSyntheticBos ? keys_above_bos : keys_below_bos) += 1;
      }
    }
  }
  EXPECT_EQ(answers, 2 * 200 * task.seq_len / 2);
  EXPECT_GT(keys_above_bos, 0);
  EXPECT_GT(keys_below_bos, 0);
  // 6,400 draws of 2,048 keys: nearly all of them, each with one value.
  EXPECT_GT(value_of.size(), 1900u);
}

// Every task but regbench (64 ids at most) at 4,096 ids (noisy recall: plus 16 noise ids): every
// id fed is below the model vocabulary the task needs and none is BOS; ids above BOS occur.
TEST(SyntheticTest, EveryTaskFeedsIdsAbove256PastBos) {
  for (const char* name : kAllTasks) {
    if (std::string(name) == "regbench") continue;
    mesa::v1::SyntheticTask o;
    o.set_vocab_size(4096);
    if (std::string(name) == "mqar") o.set_num_kv_pairs(16);
    const SyntheticTaskParams task = Task(name, o);
    const int vocab = spec::SyntheticModelVocab(task);
    EXPECT_EQ(vocab, 4097 + task.noise_vocab_size) << name;
    int above = 0;
    for (int64_t i = 0; i < 20; ++i) {
      const SyntheticExample ex = GenerateExample(task, 3, 0, SyntheticSplit::kTrain, i);
      for (size_t t = 0; t < ex.inputs.size(); ++t) {
        ASSERT_GE(ex.inputs[t], 0) << name;
        ASSERT_LT(ex.inputs[t], vocab) << name;
        ASSERT_NE(ex.inputs[t], spec::kSyntheticBos) << name;
        ASSERT_NE(ex.targets[t], spec::kSyntheticBos) << name;
        above += ex.inputs[t] > spec::kSyntheticBos;
      }
    }
    EXPECT_GT(above, 0) << name;
  }
}

// Parity: strings of bits of a length in [min_length, seq_len], position t labelled with the
// parity of the bits up to it (not the next input), scored from length score_from on; the same
// example for the same (seed, task, split, index).
TEST(SyntheticTest, ParityLabelsEveryPrefixFromScoreFrom) {
  mesa::v1::SyntheticTask o;
  o.set_seq_len(64);
  o.set_min_length(20);
  o.set_score_from(10);
  const SyntheticTaskParams task = Task("parity", o);
  std::set<int> lengths;
  int odd = 0, labels = 0;
  for (int64_t i = 0; i < 200; ++i) {
    const SyntheticExample ex = GenerateExample(task, 5, 0, SyntheticSplit::kTrain, i);
    ASSERT_EQ(ex.inputs.size(), 64u);
    int length = 0, parity = 0;
    while (length < 64 && ex.inputs[length] != 0) {
      const int bit = ex.inputs[length] - spec::kParityBit0;
      ASSERT_TRUE(bit == 0 || bit == 1);
      parity ^= bit;
      if (length + 1 >= 10) {
        ASSERT_EQ(ex.targets[length], spec::kParityEven + parity) << i << " " << length;
        odd += parity;
        ++labels;
      } else {
        ASSERT_EQ(ex.targets[length], kNoTarget);
      }
      ++length;
    }
    for (int t = length; t < 64; ++t) ASSERT_EQ(ex.targets[t], kNoTarget);
    ASSERT_GE(length, 20);
    lengths.insert(length);
    const SyntheticExample again = GenerateExample(task, 5, 0, SyntheticSplit::kTrain, i);
    EXPECT_EQ(again.inputs, ex.inputs);
  }
  EXPECT_GT(lengths.size(), 20u);  // lengths vary over [20, 64]
  EXPECT_NEAR(static_cast<double>(odd) / labels, 0.5, 0.05);
  // Fixed length by default; a bad score_from or vocabulary is refused.
  EXPECT_EQ(Task("parity").min_length, 40);
  mesa::v1::SyntheticTask bad;
  bad.set_task("parity");
  bad.set_score_from(41);
  bad.set_vocab_size(6);
  const std::vector<std::string> problems = spec::SyntheticTaskProblems(bad, 256);
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_EQ(problems[0].rfind("vocab_size: parity uses 5", 0), 0u) << problems[0];
  EXPECT_EQ(problems[1].rfind("score_from: must be between 1 and seq_len (40)", 0), 0u)
      << problems[1];
  mesa::v1::SyntheticTask foreign;
  foreign.set_task("mqar");
  foreign.set_min_length(3);
  EXPECT_EQ(spec::SyntheticTaskProblems(foreign, 256).size(), 1u);
}

// RegBench: every string between delimiters is accepted by the example's automaton (a walk from
// state 0 along its edges), every next token is a target, and each position's valid set is the
// outgoing symbols of the state reached (state 0's after a delimiter), which holds the target
// unless the target is the delimiter.
TEST(SyntheticTest, RegBenchStringsAreAcceptedByTheirAutomaton) {
  mesa::v1::SyntheticTask o;
  o.set_num_states(5);
  o.set_strings_per_sequence(6);
  o.set_vocab_size(11);
  o.set_seq_len(96);
  const SyntheticTaskParams task = Task("regbench", o);
  for (int64_t index = 0; index < 50; ++index) {
    const SyntheticExample ex = GenerateExample(task, 3, 1, SyntheticSplit::kEval, index);
    const RegBenchAutomaton a = RegBenchAutomatonOf(task, 3, 1, SyntheticSplit::kEval, index);
    ASSERT_EQ(a.edges.size(), 5u);
    ASSERT_EQ(ex.valid_next.size(), ex.inputs.size());
    EXPECT_EQ(std::count(ex.inputs.begin(), ex.inputs.end(), spec::kRegBenchDelimiter), 6);
    EXPECT_EQ(ex.inputs.back(), spec::kRegBenchDelimiter);
    EXPECT_EQ(Answers(ex).size(), ex.inputs.size() - 1);
    auto out_symbols = [&a](int state) {
      uint64_t m = 0;
      for (auto [symbol, next] : a.edges[state]) m |= uint64_t{1} << symbol;
      return m;
    };
    int state = 0, length = 0;
    for (size_t t = 0; t < ex.inputs.size(); ++t) {
      const int32_t token = ex.inputs[t];
      if (token == spec::kRegBenchDelimiter) {
        EXPECT_GE(length, 1) << "an empty string at " << t;
        state = 0;
        length = 0;
      } else {
        // Deterministic: at most one edge per symbol.
        int next = -1;
        for (auto [symbol, to] : a.edges[state]) {
          if (symbol == token) {
            EXPECT_EQ(next, -1);
            next = to;
          }
        }
        ASSERT_GE(next, 0) << "example " << index << ": symbol " << token << " at " << t
                           << " is no transition of state " << state;
        state = next;
        ++length;
      }
      if (t + 1 == ex.inputs.size()) {
        EXPECT_EQ(ex.valid_next[t], 0u);
        continue;
      }
      EXPECT_EQ(ex.valid_next[t], out_symbols(state)) << t;
      EXPECT_NE(ex.valid_next[t], 0u);
      if (ex.targets[t] != spec::kRegBenchDelimiter) {
        EXPECT_TRUE(InValidSet(ex.valid_next[t], ex.targets[t])) << t;
      }
      EXPECT_FALSE(InValidSet(ex.valid_next[t], spec::kRegBenchDelimiter));
    }
  }
  // A fresh automaton per example.
  EXPECT_NE(RegBenchAutomatonOf(task, 3, 1, SyntheticSplit::kEval, 0).edges,
            RegBenchAutomatonOf(task, 3, 1, SyntheticSplit::kEval, 1).edges);
}

// RegBench as Akyürek et al. draw it: 2-9 states, an alphabet of as many symbols as states from
// 19 ids, 1 to min(4, alphabet - 1) edges per state, 10-19 strings of 0-49 symbols, padding;
// evaluation examples use 50 fixed test automata that no training example draws.
TEST(SyntheticTest, RegBenchAkyurekDrawsAndHeldOutTestAutomata) {
  mesa::v1::SyntheticTask o;
  o.set_seq_len(1024);
  o.set_vocab_size(20);
  o.set_num_states(9);
  o.set_min_states(2);
  o.set_alphabet_per_automaton(true);
  o.set_strings_per_sequence(19);
  o.set_min_strings(10);
  o.set_max_string_length(49);
  o.set_test_automata(50);
  o.set_task("regbench");
  ASSERT_TRUE(spec::SyntheticTaskProblems(o, 1024).empty());
  const SyntheticTaskParams task = spec::ResolveSyntheticTask(o);
  std::set<size_t> state_counts;
  std::set<int> string_counts;
  for (int64_t i = 0; i < 200; ++i) {
    const RegBenchAutomaton a = RegBenchAutomatonOf(task, 3, 0, SyntheticSplit::kTrain, i);
    state_counts.insert(a.edges.size());
    ASSERT_GE(a.edges.size(), 2u);
    ASSERT_LE(a.edges.size(), 9u);
    std::set<int32_t> alphabet;
    for (const auto& out : a.edges) {
      ASSERT_GE(out.size(), 1u);
      ASSERT_LE(out.size(), std::max<size_t>(1, std::min<size_t>(4, a.edges.size() - 1)));
      for (auto [symbol, to] : out) {
        alphabet.insert(symbol);
        ASSERT_GE(symbol, 1);
        ASSERT_LT(symbol, 20);
        ASSERT_LT(to, static_cast<int>(a.edges.size()));
      }
    }
    EXPECT_LE(alphabet.size(), a.edges.size());  // drawn from as many symbols as states
    // Never one of the test automata.
    for (int64_t k = 0; k < 50; ++k) {
      RegBenchAutomaton test = RegBenchAutomatonOf(task, 3, 0, SyntheticSplit::kEval, k);
      RegBenchAutomaton mine = a;
      if (test.edges.size() != mine.edges.size()) continue;
      for (size_t st = 0; st < mine.edges.size(); ++st) {
        std::sort(test.edges[st].begin(), test.edges[st].end());
        std::sort(mine.edges[st].begin(), mine.edges[st].end());
      }
      ASSERT_NE(test.edges, mine.edges) << "training example " << i << " drew test automaton " << k;
    }
    // Strings of 0..49 symbols between delimiters, then unscored padding.
    const SyntheticExample ex = GenerateExample(task, 3, 0, SyntheticSplit::kTrain, i);
    int strings = 0, length = 0, last_scored = -1;
    for (int t = 0; t < 1024; ++t) {
      if (ex.targets[t] != kNoTarget) last_scored = t;
    }
    for (int t = 0; t <= last_scored + 1 && t < 1024; ++t) {
      if (ex.inputs[t] == spec::kRegBenchDelimiter) {
        ASSERT_LE(length, 49);
        ++strings;
        length = 0;
      } else {
        ++length;
      }
    }
    string_counts.insert(strings);
    ASSERT_GE(strings, 10);
    ASSERT_LE(strings, 19);
  }
  EXPECT_GT(state_counts.size(), 5u);
  EXPECT_GT(string_counts.size(), 5u);
  // Evaluation example i uses test automaton i mod 50.
  EXPECT_EQ(RegBenchAutomatonOf(task, 3, 0, SyntheticSplit::kEval, 7).edges,
            RegBenchAutomatonOf(task, 3, 0, SyntheticSplit::kEval, 57).edges);
  // Shapes the window cannot hold are refused.
  o.set_max_string_length(60);
  o.set_min_states(10);
  const std::vector<std::string> problems = spec::SyntheticTaskProblems(o, 1024);
  ASSERT_EQ(problems.size(), 2u) << problems[0];
  EXPECT_EQ(problems[0].rfind("min_states: must be between 1 and num_states (9)", 0), 0u);
  EXPECT_EQ(problems[1].rfind("max_string_length: must be at least 0", 0), 0u);
}

TEST(SyntheticSourceTest, CarriesRegBenchsValidSetsForEachToken) {
  SyntheticSourceOptions o;
  o.tasks = {Task("regbench")};
  o.seed = 4;
  o.examples = 4;
  o.split = SyntheticSplit::kEval;
  o.only_task = 0;
  o.batch = 2;
  o.window = 130;  // two padded, unscored positions per row
  o.no_target = 256;
  SyntheticSource source(o);
  std::vector<int32_t> tokens, targets;
  ASSERT_TRUE(source.Next(&tokens, &targets, false).ok());
  ASSERT_EQ(source.valid_next().size(), tokens.size());
  const SyntheticExample ex = GenerateExample(o.tasks[0], 4, 0, SyntheticSplit::kEval, 1);
  for (int t = 0; t < 130; ++t) {
    EXPECT_EQ(source.valid_next()[130 + t], t < 128 ? ex.valid_next[t] : 0u) << t;
  }
  // Other tasks carry none.
  o.tasks = {Task("mqar")};
  SyntheticSource mqar(o);
  ASSERT_TRUE(mqar.Next(&tokens, &targets, false).ok());
  EXPECT_TRUE(mqar.valid_next().empty());
}

TEST(SyntheticSourceTest, RanksSplitTheStreamAndEvaluationEndsOnce) {
  SyntheticSourceOptions o;
  o.tasks = {Task("compression"), Task("memorization")};
  o.seed = 9;
  o.examples = 6;
  o.split = SyntheticSplit::kEval;
  o.only_task = 1;
  o.batch = 2;
  o.window = 40;  // longer than the tasks' 32: padded, unscored
  o.no_target = 256;
  std::vector<int32_t> tokens, targets;
  SyntheticSource source(o);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(source.Next(&tokens, &targets, false).ok());
  EXPECT_TRUE(absl::IsOutOfRange(source.Next(&tokens, &targets, false)));
  // Example 5 of task 1 is the second row of the third batch.
  const SyntheticExample ex = GenerateExample(o.tasks[1], 9, 1, SyntheticSplit::kEval, 5);
  for (int t = 0; t < 40; ++t) {
    EXPECT_EQ(tokens[40 + t], t < 32 ? ex.inputs[t] : 0);
    EXPECT_EQ(targets[40 + t], t < 32 && ex.targets[t] != kNoTarget ? ex.targets[t] : 256);
  }
  // Two ranks: rank 1 reads what rank 0 skips.
  o.world_size = 2;
  o.rank = 1;
  SyntheticSource rank1(o);
  ASSERT_TRUE(rank1.Next(&tokens, &targets, false).ok());
  const SyntheticExample third = GenerateExample(o.tasks[1], 9, 1, SyntheticSplit::kEval, 2);
  EXPECT_EQ(std::vector<int32_t>(tokens.begin(), tokens.begin() + 32), third.inputs);
  EXPECT_FALSE(rank1.SetPosition({.shard = 1}).ok());
}

}  // namespace
}  // namespace mesa::model
