#include "model/tasks/task_scoring.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "model/backend/cpu_backend.h"
#include "model/net/test_models.h"
#include "model/tasks/niah.h"
#include "model/tasks/shared_context.h"
#include "model/tokenizer/byte_tokenizer.h"
#include "spec/bleu.h"
#include "spec/task_results.h"

namespace mesa::model {
namespace {

ModelConfig TinyMesa() {
  ModelConfig config;
  config.vocab_size = 257;  // the byte tokenizer's
  config.d_model = 16;
  config.n_layers = 2;
  config.n_heads = 2;
  config.head_dim = 16;
  config.mlp_hidden = 32;
  config.mixer = MixerKind::kMesa;
  config.cg_steps = 10;
  config.bos_token = ByteTokenizer::kBos;
  return config;
}

class TaskScoringTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CpuBackendOptions options;
    options.num_threads = 1;
    backend_ = std::make_unique<CpuBackend>(options);
    auto net = MesaNet::Create(TinyMesa(), backend_.get(), kBatch, kSeqLen);
    ASSERT_TRUE(net.ok()) << net.status();
    net_ = *std::move(net);
    net_->InitializeParams(11);
    params_.resize(net_->num_params());
    net_->GetParamsToHost(params_.data());
  }

  // log p(continuation | BOS context) from one forward of exactly that sequence at batch 1 (no
  // padding, no other rows): what the batched scorer must reproduce.
  double DirectLogLikelihood(const std::string& context, const std::string& continuation) {
    std::vector<int32_t> s = {ByteTokenizer::kBos};
    for (int32_t t : tokenizer_.Encode(context)) s.push_back(t);
    const int first = static_cast<int>(s.size()) - 1;
    for (int32_t t : tokenizer_.Encode(continuation)) s.push_back(t);
    const int n = static_cast<int>(s.size()) - 1;
    auto net = MesaNet::Create(TinyMesa(), backend_.get(), 1, n);
    EXPECT_TRUE(net.ok()) << net.status();
    (*net)->SetParamsFromHost(params_.data());
    std::vector<int32_t> tokens(s.begin(), s.end() - 1), targets(s.begin() + 1, s.end());
    EXPECT_TRUE((*net)->Forward(tokens.data(), targets.data(), 1, solve_).ok());
    std::vector<float> losses;
    (*net)->CopyLossesToHost(&losses);
    double ll = 0;
    for (int t = first; t < n; ++t) ll -= losses[t];
    return ll;
  }

  // The greedy continuation of `context`, `n` bytes, decoded one token at a time directly.
  std::string GreedyContinuation(const std::string& context, int n) {
    std::string text;
    for (int i = 0; i < n; ++i) {
      std::vector<int32_t> s = {ByteTokenizer::kBos};
      for (int32_t t : tokenizer_.Encode(context + text)) s.push_back(t);
      auto net = MesaNet::Create(TinyMesa(), backend_.get(), 1, static_cast<int>(s.size()));
      EXPECT_TRUE(net.ok());
      (*net)->SetParamsFromHost(params_.data());
      std::vector<int32_t> targets(s.size(), 0);
      EXPECT_TRUE((*net)->Forward(s.data(), targets.data(), 1, solve_).ok());
      std::vector<float> logits;
      (*net)->CopyLogitsToHost(&logits);
      const float* last = logits.data() + (s.size() - 1) * 257;
      const int best = static_cast<int>(std::max_element(last, last + 256) - last);
      EXPECT_LT(best, 256);
      text.push_back(static_cast<char>(best));
    }
    return text;
  }

  static constexpr int kBatch = 3, kSeqLen = 40;
  ByteTokenizer tokenizer_;
  std::unique_ptr<CpuBackend> backend_;
  std::unique_ptr<MesaNet> net_;
  std::vector<float> params_;
  MesaSolve solve_{10, 0.0f};
};

TaskExample Choices(int line, std::string context, std::vector<std::string> choices, int gold) {
  TaskExample e;
  e.line = line;
  e.context = std::move(context);
  e.choices = std::move(choices);
  e.gold = {gold};
  return e;
}

TaskExample Target(int line, std::string context, std::string target) {
  TaskExample e;
  e.line = line;
  e.form = TaskForm::kTarget;
  e.context = std::move(context);
  e.target = std::move(target);
  return e;
}

std::vector<TaskExample> Examples() {
  std::vector<TaskExample> examples;
  examples.push_back(Choices(1, "the cat sat on the", {" mat", " dog", " hat and coat"}, 0));
  examples.push_back(Choices(2, "1 2 3 4", {" 5", " 9"}, 0));
  examples.push_back(Choices(3, "abcabcab", {"c", "a", "b", "cab"}, 0));
  examples.push_back(Choices(4, "hello", {" world", " there"}, 0));
  return examples;
}

TEST_F(TaskScoringTest, LogLikelihoodsEqualDirectForwards) {
  std::vector<TaskExample> examples = Examples();
  TaskScoreOptions options;
  options.solve = solve_;
  auto score = ScoreTask(*net_, tokenizer_, examples, kBatch, kSeqLen, options);
  ASSERT_TRUE(score.ok()) << score.status();
  ASSERT_EQ(score->loglikelihood.size(), examples.size());
  for (size_t i = 0; i < examples.size(); ++i) {
    for (size_t c = 0; c < examples[i].choices.size(); ++c) {
      const double direct = DirectLogLikelihood(examples[i].context, examples[i].choices[c]);
      EXPECT_NEAR(score->loglikelihood[i][c], direct, 1e-4 * (1 + std::abs(direct)))
          << "example " << i << " choice " << c;
      EXPECT_LT(direct, 0);
    }
  }
}

// The CG steps of an item's scored rows (§5.2 of the benchmark pack): with fixed steps every
// token takes them; with a tolerance they are counted per token as a direct forward of the row
// alone counts them, and the task reports their mean.
TEST_F(TaskScoringTest, CgStepsPerItemAreCountedPerToken) {
  const std::vector<TaskExample> examples = Examples();
  TaskScoreOptions options;
  options.solve = solve_;
  options.reuse_context = true;  // fixed steps: shared contexts count as whole rows
  auto fixed = ScoreTask(*net_, tokenizer_, examples, kBatch, kSeqLen, options);
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  EXPECT_DOUBLE_EQ(fixed->metrics.cg_steps_mean_prefill(), solve_.max_steps);
  EXPECT_EQ(fixed->metrics.cg_steps_mean_decode(), 0.0);  // nothing decoded
  options.solve = {30, 1e-2f};
  auto tolerance = ScoreTask(*net_, tokenizer_, examples, kBatch, kSeqLen, options);
  ASSERT_TRUE(tolerance.ok()) << tolerance.status();
  EXPECT_EQ(tolerance->reused_contexts, 0);  // rows scored whole to count their steps
  double steps = 0;
  int64_t inputs = 0;
  for (size_t i = 0; i < examples.size(); ++i) {
    double direct_steps = 0;
    int64_t direct_inputs = 0;
    for (int c = 0; c < examples[i].num_requests(); ++c) {
      std::vector<int32_t> row = {ByteTokenizer::kBos};
      for (int32_t t :
           tokenizer_.Encode(examples[i].RequestContext(c) + examples[i].RequestContinuation(c))) {
        row.push_back(t);
      }
      const int n = static_cast<int>(row.size()) - 1;
      auto net = MesaNet::Create(TinyMesa(), backend_.get(), 1, n);
      ASSERT_TRUE(net.ok());
      (*net)->SetParamsFromHost(params_.data());
      ASSERT_TRUE((*net)->KeepTokenCgSteps(true).ok());
      std::vector<int32_t> targets(row.begin() + 1, row.end());
      ASSERT_TRUE((*net)->Forward(row.data(), targets.data(), 1, options.solve).ok());
      std::vector<int32_t> counts;
      (*net)->CopyTokenCgStepsToHost(&counts);
      for (int32_t k : counts) direct_steps += k;
      direct_inputs += n;
    }
    direct_steps /= 2.0 * TinyMesa().n_heads;  // both layers are Mesa layers
    EXPECT_NEAR(tolerance->items[i].cg_steps_prefill, direct_steps, 1e-9) << i;
    EXPECT_EQ(tolerance->items[i].cg_tokens_prefill, direct_inputs) << i;
    steps += direct_steps;
    inputs += direct_inputs;
  }
  const double mean = tolerance->metrics.cg_steps_mean_prefill();
  EXPECT_NEAR(mean, steps / inputs, 1e-9);
  EXPECT_GT(mean, 0.0);
  EXPECT_LT(mean, 30.0);
}

// Gold set to the choice the model prefers (or disprefers) gives accuracy 1 (or 0), under both
// the summed and the length-normalised rule.
TEST_F(TaskScoringTest, AccuracyFollowsTheMostLikelyChoice) {
  std::vector<TaskExample> best = Examples(), worst = Examples(), best_norm = Examples();
  for (size_t i = 0; i < best.size(); ++i) {
    std::vector<double> ll, norm;
    for (const std::string& c : best[i].choices) {
      ll.push_back(DirectLogLikelihood(best[i].context, c));
      norm.push_back(ll.back() / static_cast<double>(c.size()));
    }
    best[i].gold = {static_cast<int>(std::max_element(ll.begin(), ll.end()) - ll.begin())};
    worst[i].gold = {static_cast<int>(std::min_element(ll.begin(), ll.end()) - ll.begin())};
    best_norm[i].gold = {
        static_cast<int>(std::max_element(norm.begin(), norm.end()) - norm.begin())};
  }
  TaskScoreOptions options;
  options.solve = solve_;
  auto a = ScoreTask(*net_, tokenizer_, best, kBatch, kSeqLen, options);
  auto b = ScoreTask(*net_, tokenizer_, worst, kBatch, kSeqLen, options);
  auto c = ScoreTask(*net_, tokenizer_, best_norm, kBatch, kSeqLen, options);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->accuracy, 1.0);
  EXPECT_EQ(b->accuracy, 0.0);
  EXPECT_EQ(c->accuracy_norm, 1.0);
  EXPECT_EQ(a->multiple_choice, 4);
}

TEST_F(TaskScoringTest, TargetsScoreByGreedyExactMatch) {
  const std::string greedy = GreedyContinuation("the cat", 3);
  std::string wrong = greedy;
  wrong[1] = static_cast<char>(wrong[1] == 'q' ? 'z' : 'q');
  std::vector<TaskExample> examples;
  examples.push_back(Target(1, "the cat", greedy));
  examples.push_back(Target(2, "the cat", wrong));
  TaskScoreOptions options;
  options.solve = solve_;
  auto score = ScoreTask(*net_, tokenizer_, examples, kBatch, kSeqLen, options);
  ASSERT_TRUE(score.ok()) << score.status();
  EXPECT_TRUE(score->greedy_match[0]);
  EXPECT_FALSE(score->greedy_match[1]);
  EXPECT_EQ(score->accuracy, 0.5);
  EXPECT_NEAR(score->loglikelihood[0][0], DirectLogLikelihood("the cat", greedy), 1e-4);
}

// With the evaluation's generator the targets are decoded by the inference engine: its text is the
// greedy continuation recomputed from saved logits (one full forward per token), targets of
// different lengths share a decoding call, and the accuracy is the share recomputed from them.
TEST_F(TaskScoringTest, TargetsDecodedByTheGeneratorAreTheGreedyContinuation) {
  auto generator = Generator::Create(TinyMesa(), params_, backend_.get(), kBatch, kSeqLen);
  ASSERT_TRUE(generator.ok()) << generator.status();
  std::vector<TaskExample> examples;
  std::vector<std::string> greedy;
  int line = 0;
  for (const auto& [context, n] : std::vector<std::pair<std::string, int>>{
           {"the cat", 3}, {"1 2 3", 5}, {"hello", 1}, {"abcabc", 4}}) {
    greedy.push_back(GreedyContinuation(context, n));
    examples.push_back(Target(++line, context, greedy.back()));
    std::string wrong = greedy.back();
    wrong.back() = static_cast<char>(wrong.back() == 'q' ? 'z' : 'q');
    examples.push_back(Target(++line, context, wrong));
  }
  examples.push_back(Target(++line, "hello", " " + greedy[2] + "\n"));  // 3 tokens: not greedy's
  TaskScoreOptions options;
  options.solve = solve_;
  options.generator = generator->get();
  auto score = ScoreTask(*net_, tokenizer_, examples, kBatch, kSeqLen, options);
  ASSERT_TRUE(score.ok()) << score.status();
  double right = 0;
  for (size_t i = 0; i + 1 < examples.size(); ++i) {
    const std::string expected =
        GreedyContinuation(examples[i].context, static_cast<int>(examples[i].target.size()));
    EXPECT_EQ(score->greedy_text[i], expected) << i;
    EXPECT_EQ(score->greedy_match[i],
              NormalizeAnswer(expected) == NormalizeAnswer(examples[i].target))
        << i;
    right += score->greedy_match[i];
  }
  EXPECT_EQ(right, 4);
  right += score->greedy_match.back();
  EXPECT_EQ(score->greedy_text.back(), GreedyContinuation("hello", 3));
  EXPECT_DOUBLE_EQ(score->accuracy, right / examples.size());
}

// Generation items (the recall suite): decoded greedily by the generator, cut at the first stop
// string, right when an answer occurs in the text; an over-long prompt keeps its last tokens.
TEST_F(TaskScoringTest, GenerationItemsAreDecodedAndSearched) {
  auto generator = Generator::Create(TinyMesa(), params_, backend_.get(), kBatch, kSeqLen);
  ASSERT_TRUE(generator.ok()) << generator.status();
  auto item = [](std::string prompt, std::vector<std::string> answers, int max_new_tokens) {
    TaskExample e;
    e.form = TaskForm::kGeneration;
    e.context = std::move(prompt);
    e.answers = std::move(answers);
    e.max_new_tokens = max_new_tokens;
    return e;
  };
  const std::string cat = GreedyContinuation("the cat", 4);
  const std::string count = GreedyContinuation("1 2 3", 6);
  const std::string long_prompt = std::string(30, 'x') + "abcabcabcabc";  // 42 bytes
  std::vector<TaskExample> examples = {
      item("the cat", {"no such text", cat.substr(1, 2)}, 4),
      item("the cat", {"no such text"}, 4),
      item("1 2 3", {count}, 6),
      item(long_prompt, {}, 4),
  };
  // Item 2 stops at the first occurrence of its completion's third byte.
  examples[2].stop = std::vector<std::string>{count.substr(2, 1)};
  TaskScoreOptions options;
  options.solve = solve_;
  options.generator = generator->get();
  auto score = ScoreTask(*net_, tokenizer_, examples, kBatch, kSeqLen, options);
  ASSERT_TRUE(score.ok()) << score.status();
  EXPECT_EQ(score->greedy_text[0], cat);
  EXPECT_EQ(score->items[0].contains, 1);
  EXPECT_EQ(score->items[1].contains, 0);
  EXPECT_EQ(score->greedy_text[2], count.substr(0, count.find(count[2])));
  EXPECT_EQ(score->items[2].contains, 0);  // the whole answer was cut off
  // The window holds 40 - 4 = 36 prompt tokens: the first 6 are dropped.
  EXPECT_TRUE(score->items[3].truncated);
  EXPECT_EQ(score->greedy_text[3], GreedyContinuation(long_prompt.substr(6), 4));
  EXPECT_EQ(score->items[3].contains, 0);  // unanswerable
  ASSERT_EQ(score->metrics.metrics_size(), 2);
  EXPECT_EQ(score->metrics.metrics(0).name(), "exact_match");
  EXPECT_DOUBLE_EQ(score->metrics.metrics(0).value(), 0.0);
  EXPECT_EQ(score->metrics.metrics(1).name(), "contains");
  EXPECT_DOUBLE_EQ(score->metrics.metrics(1).value(), 0.25);
  EXPECT_EQ(score->metrics.truncated(), 1);
  // Without a generator they are refused.
  options.generator = nullptr;
  EXPECT_FALSE(ScoreTask(*net_, tokenizer_, examples, kBatch, kSeqLen, options).ok());
  options.generator = generator->get();
  options.truncation = Truncation::kFail;
  EXPECT_FALSE(ScoreTask(*net_, tokenizer_, examples, kBatch, kSeqLen, options).ok());
}

// Generated needle-in-a-haystack items through the scorer: decoded by the generator past the
// window (lengths 300 and 420 > seq_len 40), scored by match_all, broken down per variant and
// length.
TEST_F(TaskScoringTest, NeedleItemsAreDecodedPastTheWindowAndBrokenDown) {
  auto generator = Generator::Create(TinyMesa(), params_, backend_.get(), kBatch, kSeqLen);
  ASSERT_TRUE(generator.ok()) << generator.status();
  NiahConfig defaults;
  defaults.seed = 3;
  defaults.max_new_tokens = 8;
  auto items = NiahTaskItems({"single_1", "multikey_2"}, {300, 420}, 2, defaults, tokenizer_);
  ASSERT_TRUE(items.ok()) << items.status();
  ASSERT_EQ(items->size(), 8u);
  EXPECT_GT((*items)[0].context.size(), static_cast<size_t>(kSeqLen));
  TaskScoreOptions options;
  options.solve = solve_;
  options.generator = generator->get();
  auto score = ScoreTask(*net_, tokenizer_, *items, kBatch, kSeqLen, options);
  ASSERT_TRUE(score.ok()) << score.status();
  for (size_t i = 0; i < items->size(); ++i) {
    // The decoded text is the model's greedy continuation of the whole prompt.
    EXPECT_EQ(score->greedy_text[i],
              GreedyContinuation((*items)[i].context, 8).substr(0, score->greedy_text[i].size()))
        << i;
    EXPECT_EQ(score->items[i].match_all,
              ScoreNiah(score->greedy_text[i], (*items)[i].answers).match_all);
  }
  ASSERT_EQ(score->metrics.metrics_size(), 2);
  EXPECT_EQ(score->metrics.metrics(0).name(), "match_all");
  EXPECT_EQ(score->metrics.metrics(1).name(), "match_any");
  int per_variant = 0, per_length = 0;
  for (const mesa::v1::NiahCell& c : score->metrics.niah_cells()) {
    if (!c.variant().empty()) {
      ++per_variant;
      EXPECT_EQ(c.count(), 2);
    } else if (c.depth_decile() == -1) {
      ++per_length;
      EXPECT_EQ(c.count(), 4);
    }
  }
  EXPECT_EQ(per_variant, 4);
  EXPECT_EQ(per_length, 2);
  EXPECT_EQ(score->metrics.truncated(), 0);
  // niah.score greedy: " " + the value teacher-forced after the whole prompt; right exactly when
  // greedy decoding would produce it.
  defaults.score_greedy = true;
  auto forced_items = NiahTaskItems({"single_1"}, {300}, 2, defaults, tokenizer_);
  ASSERT_TRUE(forced_items.ok()) << forced_items.status();
  for (const TaskExample& e : *forced_items) EXPECT_EQ(e.target, " " + e.answers[0]);
  // And one whose target is the model's own greedy continuation: right.
  TaskExample own = forced_items->front();
  own.target = GreedyContinuation(own.context, 4);
  forced_items->push_back(own);
  auto forced = ScoreTask(*net_, tokenizer_, *forced_items, kBatch, kSeqLen, options);
  ASSERT_TRUE(forced.ok()) << forced.status();
  for (size_t i = 0; i < forced_items->size(); ++i) {
    const TaskExample& e = (*forced_items)[i];
    const bool decoded =
        GreedyContinuation(e.context, static_cast<int>(e.target.size())) == e.target;
    EXPECT_EQ(forced->items[i].match_all, decoded ? 1.0 : 0.0) << i;
    EXPECT_EQ(forced->items[i].match_any, decoded) << i;
  }
  EXPECT_EQ(forced->items.back().match_all, 1.0);
}

// Rows scored in a net planned for them (shorter rows, more per forward) give the scores of the
// caller's net; a net too short for the rows is refused.
TEST_F(TaskScoringTest, RowsInAPlannedNetScoreAlike) {
  const std::vector<TaskExample> examples = Examples();
  TaskScoreOptions options;
  options.solve = solve_;
  auto wide = ScoreTask(*net_, tokenizer_, examples, kBatch, kSeqLen, options);
  ASSERT_TRUE(wide.ok()) << wide.status();
  auto narrow = MesaNet::Create(TinyMesa(), backend_.get(), 5, 32);
  ASSERT_TRUE(narrow.ok()) << narrow.status();
  (*narrow)->SetParamsFromHost(params_.data());
  int asked = 0;
  options.net_for_rows = [&](int inputs) -> absl::StatusOr<TaskScoreOptions::ScoringNet> {
    asked = inputs;
    return TaskScoreOptions::ScoringNet{narrow->get(), 5, 32};
  };
  auto planned = ScoreTask(*net_, tokenizer_, examples, kBatch, kSeqLen, options);
  ASSERT_TRUE(planned.ok()) << planned.status();
  EXPECT_EQ(asked, 31);  // BOS, "the cat sat on the", " hat and coat": 32 tokens
  for (size_t i = 0; i < examples.size(); ++i) {
    for (size_t c = 0; c < examples[i].choices.size(); ++c) {
      EXPECT_NEAR(planned->loglikelihood[i][c], wide->loglikelihood[i][c],
                  1e-5 * (1 + std::abs(wide->loglikelihood[i][c])))
          << i << " " << c;
    }
  }
  EXPECT_EQ(planned->accuracy, wide->accuracy);
  options.net_for_rows = [&](int) -> absl::StatusOr<TaskScoreOptions::ScoringNet> {
    return TaskScoreOptions::ScoringNet{narrow->get(), 5, 16};
  };
  EXPECT_TRUE(
      absl::IsInternal(ScoreTask(*net_, tokenizer_, examples, kBatch, kSeqLen, options).status()));
}

TEST(NormalizeAnswer, TrimsWhitespaceAtBothEndsOnly) {
  EXPECT_EQ(NormalizeAnswer(" time\n"), "time");
  EXPECT_EQ(NormalizeAnswer("\t a  b \r\n"), "a  b");
  EXPECT_EQ(NormalizeAnswer(" \n "), "");
  EXPECT_EQ(NormalizeAnswer("Paris"), "Paris");
}

TEST_F(TaskScoringTest, FewshotPrependsOtherExamplesWithTheirAnswers) {
  std::vector<TaskExample> examples;
  examples.push_back(Choices(1, "A", {"1"}, 0));
  examples.push_back(Choices(2, "B", {"2"}, 0));
  TaskScoreOptions options;
  options.solve = solve_;
  options.num_fewshot = 1;
  auto score = ScoreTask(*net_, tokenizer_, examples, kBatch, kSeqLen, options);
  ASSERT_TRUE(score.ok()) << score.status();
  // With two examples the one shown is always the other.
  EXPECT_NEAR(score->loglikelihood[0][0], DirectLogLikelihood("B2\n\nA", "1"), 1e-4);
  EXPECT_NEAR(score->loglikelihood[1][0], DirectLogLikelihood("A1\n\nB", "2"), 1e-4);
  options.num_fewshot = 2;
  auto too_many = ScoreTask(*net_, tokenizer_, examples, kBatch, kSeqLen, options);
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.status().message().find("num_fewshot: 2"), std::string::npos);
}

// Few-shot generation (the paper's unscrambling and translation): the prompt is the
// demonstrations (context, space, first answer) and the item's context; the completion is scored
// by exact match after trimming, and by BLEU against the first answer when asked.
TEST_F(TaskScoringTest, FewshotGenerationShowsDemonstrationsAndScoresExactAndBleu) {
  auto generator = Generator::Create(TinyMesa(), params_, backend_.get(), kBatch, kSeqLen);
  ASSERT_TRUE(generator.ok()) << generator.status();
  auto item = [](std::string prompt, std::vector<std::string> answers) {
    TaskExample e;
    e.form = TaskForm::kGeneration;
    e.context = std::move(prompt);
    e.answers = std::move(answers);
    e.max_new_tokens = 5;
    return e;
  };
  const std::vector<TaskExample> shown = {item("d=", {"xy"})};
  const std::string first = GreedyContinuation("d= xy\n\np=", 5);
  const std::string second = GreedyContinuation("d= xy\n\nq=", 5);
  // The first item's answer is its completion with other surrounding spaces: exact after trimming.
  std::vector<TaskExample> examples = {item("p=", {" " + first + "\t"}), item("q=", {"zz zz"})};
  TaskScoreOptions options;
  options.solve = solve_;
  options.generator = generator->get();
  options.num_fewshot = 1;
  options.demonstrations = &shown;
  options.bleu = true;
  auto score = ScoreTask(*net_, tokenizer_, examples, kBatch, kSeqLen, options);
  ASSERT_TRUE(score.ok()) << score.status();
  EXPECT_EQ(score->greedy_text[0], first);
  EXPECT_EQ(score->greedy_text[1], second);
  EXPECT_TRUE(score->items[0].exact);
  EXPECT_EQ(score->items[1].exact, NormalizeAnswer(second) == "zz zz");
  EXPECT_EQ(score->items[0].bleu_stats, spec::SegmentBleu(first, examples[0].answers[0]).ToList());
  EXPECT_EQ(score->items[1].bleu_stats, spec::SegmentBleu(second, "zz zz").ToList());
  ASSERT_EQ(score->metrics.metrics_size(), 3);
  EXPECT_EQ(score->metrics.metrics(0).name(), "exact_match");
  EXPECT_EQ(score->metrics.metrics(2).name(), "bleu");
  spec::BleuStats sum = spec::SegmentBleu(first, examples[0].answers[0]);
  sum += spec::SegmentBleu(second, "zz zz");
  EXPECT_DOUBLE_EQ(score->metrics.metrics(2).value(), spec::CorpusBleu(sum));
  // Fixed CG steps: every prompt and decoded token took them.
  EXPECT_DOUBLE_EQ(score->metrics.cg_steps_mean_prefill(), solve_.max_steps);
  EXPECT_DOUBLE_EQ(score->metrics.cg_steps_mean_decode(), solve_.max_steps);
  // Two demonstrations from a pool of one, or a demonstration without an answer, are refused.
  options.num_fewshot = 2;
  EXPECT_FALSE(ScoreTask(*net_, tokenizer_, examples, kBatch, kSeqLen, options).ok());
  const std::vector<TaskExample> unanswered = {item("d=", {})};
  options.num_fewshot = 1;
  options.demonstrations = &unanswered;
  auto refused = ScoreTask(*net_, tokenizer_, examples, kBatch, kSeqLen, options);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("no answer to show"), std::string::npos);
}

TEST_F(TaskScoringTest, TooLongFailsOnRequestOrKeepsTheLastTokens) {
  std::vector<TaskExample> examples = Examples();
  examples[2].line = 7;
  examples[2].context = std::string(kSeqLen - 5, 'x') + "0123456789";
  TaskScoreOptions options;
  options.solve = solve_;
  options.truncation = Truncation::kFail;
  auto failed = ScoreTask(*net_, tokenizer_, examples, kBatch, kSeqLen, options);
  ASSERT_FALSE(failed.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(failed.status()));
  EXPECT_NE(failed.status().message().find("line 7: request 0:"), std::string::npos)
      << failed.status();
  EXPECT_NE(failed.status().message().find("at most 41"), std::string::npos);
  // Left truncation (the default): BOS and the last seq_len tokens, scored as that row is.
  options.truncation = Truncation::kLeft;
  auto score = ScoreTask(*net_, tokenizer_, examples, kBatch, kSeqLen, options);
  ASSERT_TRUE(score.ok()) << score.status();
  EXPECT_EQ(score->metrics.truncated(), 1);
  EXPECT_EQ(score->metrics.scored(), 4);
  for (size_t c = 0; c < examples[2].choices.size(); ++c) {
    const std::string& choice = examples[2].choices[c];
    const std::string kept =
        examples[2].context.substr(examples[2].context.size() - (kSeqLen - choice.size()));
    EXPECT_NEAR(score->loglikelihood[2][c], DirectLogLikelihood(kept, choice), 1e-4) << c;
  }
  // A shorter window (max_length) truncates more; a continuation as long as it is skipped.
  options.max_length = 4;
  auto short_window = ScoreTask(*net_, tokenizer_, examples, kBatch, kSeqLen, options);
  ASSERT_TRUE(short_window.ok()) << short_window.status();
  // Items 0 (" mat", " dog": 4 bytes) and 3 (" world") are skipped; 1 and 2 truncated.
  EXPECT_EQ(short_window->metrics.skipped(), 2);
  EXPECT_EQ(short_window->metrics.truncated(), 2);
  EXPECT_EQ(short_window->metrics.scored(), 2);
  EXPECT_NEAR(short_window->loglikelihood[1][0], DirectLogLikelihood(" 4", " 5"), 1e-4);
}

// The forms with a delimiter: the continuation is delimiter + text; trailing whitespace of the
// context moves into it; WinoGrande-style items score one continuation after each context.
TEST_F(TaskScoringTest, DelimitedAndMultiContextItemsScoreTheirPairs) {
  TaskExample choices = Choices(1, "the cat sat on the ", {"mat", "dog"}, 0);
  choices.delimiter = "";  // the context's own trailing space moves to the continuation
  TaskExample delimited = Choices(2, "1 2 3 4", {"5", "9"}, 1);
  delimited.delimiter = " ";
  TaskExample multi;
  multi.line = 3;
  multi.form = TaskForm::kMultiContext;
  multi.contexts = {"Maria was cold so Maria", "Maria was cold so Julia"};
  multi.target = "shivered.";
  multi.gold = {0};
  multi.delimiter = " ";
  TaskExample cloze;
  cloze.line = 4;
  cloze.form = TaskForm::kCloze;
  cloze.context = "the cat";
  cloze.target = GreedyContinuation("the cat", 3);
  TaskExample wrong_cloze = cloze;
  wrong_cloze.target[1] = static_cast<char>(wrong_cloze.target[1] == 'q' ? 'z' : 'q');
  const std::vector<TaskExample> examples = {choices, delimited, multi, cloze, wrong_cloze};
  TaskScoreOptions options;
  options.solve = solve_;
  auto score = ScoreTask(*net_, tokenizer_, examples, kBatch, kSeqLen, options);
  ASSERT_TRUE(score.ok()) << score.status();
  EXPECT_NEAR(score->loglikelihood[0][0], DirectLogLikelihood("the cat sat on the", " mat"), 1e-4);
  EXPECT_EQ(score->items[0].requests[0].tokens, 4);  // " mat": the moved space counts
  EXPECT_NEAR(score->loglikelihood[1][1], DirectLogLikelihood("1 2 3 4", " 9"), 1e-4);
  for (int c = 0; c < 2; ++c) {
    EXPECT_NEAR(score->loglikelihood[2][c], DirectLogLikelihood(multi.contexts[c], " shivered."),
                1e-4);
  }
  EXPECT_TRUE(score->greedy_match[3]);
  EXPECT_FALSE(score->greedy_match[4]);
  EXPECT_NEAR(score->loglikelihood[3][0], DirectLogLikelihood("the cat", cloze.target), 1e-4);
  std::vector<std::string> names;
  for (const mesa::v1::MetricValue& m : score->metrics.metrics()) names.push_back(m.name());
  EXPECT_EQ(names, (std::vector<std::string>{"acc", "acc_norm", "acc_bytes", "acc_tok",
                                             "exact_match", "target_ppl", "target_nll_per_token"}));
  EXPECT_EQ(score->metrics.metrics(0).count(), 5);  // acc: every item
  EXPECT_EQ(score->metrics.metrics(1).count(), 2);  // acc_norm: the two with choices
  EXPECT_EQ(score->metrics.metrics(5).count(), 2);  // target_ppl: the cloze items
  EXPECT_NEAR(score->metrics.metrics(5).value(),
              std::exp(-(score->loglikelihood[3][0] + score->loglikelihood[4][0]) / 2), 1e-9);
}

// eval.shard: three shard jobs each score their share and report its records; merged, they give
// the metrics the whole task gives, byte for byte (the coordinator's merge of an array's shards).
TEST_F(TaskScoringTest, ShardJobsReportRecordsThatMergeIntoTheWhole) {
  TaskExample choices = Choices(1, "the cat sat on the ", {"mat", "dog"}, 0);
  choices.delimiter = "";
  TaskExample delimited = Choices(2, "1 2 3 4", {"5", "9", "10"}, 1);
  delimited.delimiter = " ";
  TaskExample cloze;
  cloze.line = 4;
  cloze.form = TaskForm::kCloze;
  cloze.context = "the cat";
  cloze.target = GreedyContinuation("the cat", 3);
  const std::vector<TaskExample> examples = {choices, delimited, cloze,
                                             Choices(5, "a b", {"c", "d"}, 1),
                                             Choices(6, "x", {"y", "zz", "w"}, 2)};
  TaskScoreOptions options;
  options.solve = solve_;
  auto whole = ScoreTask(*net_, tokenizer_, examples, kBatch, kSeqLen, options);
  ASSERT_TRUE(whole.ok()) << whole.status();
  std::vector<mesa::v1::TaskPartial> partials;
  for (int k = 0; k < 3; ++k) {
    options.job_shard = {k, 3};
    auto shard = ScoreTask(*net_, tokenizer_, examples, kBatch, kSeqLen, options);
    ASSERT_TRUE(shard.ok()) << shard.status();
    EXPECT_EQ(shard->metrics.metrics_size(), 0);  // the merge computes them
    EXPECT_EQ(shard->metrics.items(), 5);
    EXPECT_EQ(shard->partial.records_size(), k < 2 ? 2 : 1);
    partials.push_back(shard->partial);
  }
  auto records = spec::MergeItemRecords(5, partials);
  ASSERT_TRUE(records.ok()) << records.status();
  mesa::v1::TaskResult merged;
  ASSERT_TRUE(spec::ComputeTaskMetrics(*records, {}, &merged).ok());
  EXPECT_EQ(merged.SerializeAsString(), whole->metrics.SerializeAsString());
  options.job_shard = {3, 3};
  EXPECT_EQ(ScoreTask(*net_, tokenizer_, examples, kBatch, kSeqLen, options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Context reuse: each multiple-choice item's context runs once and its continuations resume from
// the saved state; every mixer's state is copied per choice. The scores equal whole rows' (to
// float32 rounding: the context is cut in other pieces), on a model with every kind of layer.
TEST_F(TaskScoringTest, ReusedContextsScoreAsWholeRowsInEveryMixer) {
  ModelConfig config = SmallTestConfig(
      {MixerKind::kMesa, MixerKind::kGla, MixerKind::kDeltaNet, MixerKind::kGatedDeltaNet,
       MixerKind::kAttention, MixerKind::kSwa, MixerKind::kHawk, MixerKind::kMamba2Mesa,
       MixerKind::kMlstm, MixerKind::kMamba2},
      257, ByteTokenizer::kBos);
  config.attention_window = 8;  // the sliding-window layer wraps its cache
  const std::vector<float> params = NoisyTestParams(config, backend_.get(), 5, 6, 0.05f);
  auto net = MesaNet::Create(config, backend_.get(), 9, kSeqLen);
  ASSERT_TRUE(net.ok()) << net.status();
  (*net)->SetParamsFromHost(params.data());
  std::vector<TaskExample> examples = Examples();
  examples.push_back(
      Choices(5, "a much longer context than the others, to be", {" cut", " kept"}, 1));
  examples.push_back(Choices(6, "x", {" y", " z", " w", " v", " u"}, 3));
  TaskExample cloze;  // not shared: scored as a whole row beside the waves
  cloze.line = 7;
  cloze.form = TaskForm::kCloze;
  cloze.context = "the cat";
  cloze.target = " sat";
  examples.push_back(cloze);
  TaskScoreOptions options;
  options.solve = {30, 0.0f};
  auto whole = ScoreTask(**net, tokenizer_, examples, 9, kSeqLen, options);
  ASSERT_TRUE(whole.ok()) << whole.status();
  options.reuse_context = true;
  auto reused = ScoreTask(**net, tokenizer_, examples, 9, kSeqLen, options);
  ASSERT_TRUE(reused.ok()) << reused.status();
  EXPECT_EQ(whole->reused_contexts, 0);
  // Every multiple-choice item but the long one: cut to the window, its rows keep different
  // context tokens (one choice is longer), so it is scored as whole rows.
  EXPECT_EQ(reused->reused_contexts, 5);
  EXPECT_TRUE(reused->items[4].truncated);
  for (size_t i = 0; i < examples.size(); ++i) {
    ASSERT_EQ(reused->items[i].requests.size(), whole->items[i].requests.size()) << i;
    for (size_t c = 0; c < whole->items[i].requests.size(); ++c) {
      const RequestScore &a = reused->items[i].requests[c], &b = whole->items[i].requests[c];
      EXPECT_NEAR(a.loglikelihood, b.loglikelihood, 2e-4 * (1 + std::abs(b.loglikelihood)))
          << i << " " << c;
      EXPECT_EQ(a.tokens, b.tokens) << i << " " << c;
      EXPECT_EQ(a.greedy, b.greedy) << i << " " << c;
      EXPECT_NE(a.loglikelihood, 0.0);
    }
  }
  ASSERT_EQ(reused->metrics.metrics_size(), whole->metrics.metrics_size());
  for (int m = 0; m < whole->metrics.metrics_size(); ++m) {
    EXPECT_EQ(reused->metrics.metrics(m).value(), whole->metrics.metrics(m).value())
        << whole->metrics.metrics(m).name();
  }
  // In a net of more rows and a window of 8 tokens (net_for_waves): every context and
  // continuation runs in pieces, the prefix without logits, and scores the same.
  auto pieces_net = MesaNet::Create(config, backend_.get(), 24, 8);
  ASSERT_TRUE(pieces_net.ok()) << pieces_net.status();
  (*pieces_net)->SetParamsFromHost(params.data());
  TaskScoreOptions in_pieces = options;
  in_pieces.net_for_waves = [&]() -> absl::StatusOr<TaskScoreOptions::ScoringNet> {
    return TaskScoreOptions::ScoringNet{pieces_net->get(), 24, 8};
  };
  auto pieced = ScoreTask(**net, tokenizer_, examples, 9, kSeqLen, in_pieces);
  ASSERT_TRUE(pieced.ok()) << pieced.status();
  EXPECT_EQ(pieced->reused_contexts, 5);
  for (size_t i = 0; i < examples.size(); ++i) {
    for (size_t c = 0; c < whole->items[i].requests.size(); ++c) {
      const RequestScore &a = pieced->items[i].requests[c], &b = whole->items[i].requests[c];
      EXPECT_NEAR(a.loglikelihood, b.loglikelihood, 2e-4 * (1 + std::abs(b.loglikelihood)))
          << i << " " << c;
      EXPECT_EQ(a.greedy, b.greedy) << i << " " << c;
    }
  }
  // Three shard jobs with reuse merge into the reused whole, bit for bit: waves are units.
  std::vector<mesa::v1::TaskPartial> partials;
  for (int k = 0; k < 3; ++k) {
    options.job_shard = {k, 3};
    auto shard = ScoreTask(**net, tokenizer_, examples, 9, kSeqLen, options);
    ASSERT_TRUE(shard.ok()) << shard.status();
    partials.push_back(shard->partial);
  }
  auto records = spec::MergeItemRecords(static_cast<int64_t>(examples.size()), partials);
  ASSERT_TRUE(records.ok()) << records.status();
  mesa::v1::TaskResult merged;
  ASSERT_TRUE(spec::ComputeTaskMetrics(*records, {}, &merged).ok());
  EXPECT_EQ(merged.SerializeAsString(), reused->metrics.SerializeAsString());
}

TEST(SharedContext, PrefixAndWaves) {
  const std::vector<int32_t> a = {0, 5, 6, 7, 8}, b = {0, 5, 6, 9}, c = {0, 5, 4, 9};
  EXPECT_EQ(SharedPrefixLength({&a, &b}, {3, 3}), 3);
  EXPECT_EQ(SharedPrefixLength({&a, &c}, {3, 3}), 0);  // the contexts differ
  EXPECT_EQ(SharedPrefixLength({&a, &b}, {3, 2}), 0);  // the continuations start apart
  EXPECT_EQ(SharedPrefixLength({&a}, {3}), 0);         // one row: nothing to share
  std::vector<SharedContextItem> items(4);
  for (int i = 0; i < 4; ++i) {
    items[i].rows.assign(i == 1 ? 3 : 2, &a);
    items[i].first_target = 10 + (i % 2) * 5;
  }
  // Longest prefixes first (items 1, 3, then 0, 2), at most 5 rows a wave.
  EXPECT_EQ(PackWaves(items, 5), (std::vector<std::vector<int>>{{1, 3}, {0, 2}}));
  EXPECT_EQ(PackWaves(items, 4), (std::vector<std::vector<int>>{{1}, {3, 0}, {2}}));
}

}  // namespace
}  // namespace mesa::model
