#include "model/tasks/task_metrics.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace mesa::model {
namespace {

TaskExample Choices(std::vector<std::string> choices, std::vector<int> gold) {
  TaskExample e;
  e.form = TaskForm::kMultipleChoice;
  e.context = "Q:";
  e.choices = std::move(choices);
  e.gold = std::move(gold);
  e.delimiter = " ";
  return e;
}

ItemScore Scores(std::vector<double> ll, std::vector<int64_t> tokens,
                 std::vector<bool> greedy = {}) {
  ItemScore s;
  for (size_t r = 0; r < ll.size(); ++r) {
    s.requests.push_back({ll[r], tokens[r], r < greedy.size() && greedy[r]});
  }
  return s;
}

const mesa::v1::MetricValue& Metric(const mesa::v1::TaskResult& m, const std::string& name) {
  for (const mesa::v1::MetricValue& v : m.metrics()) {
    if (v.name() == name) return v;
  }
  static const mesa::v1::MetricValue kNone;
  ADD_FAILURE() << "no metric " << name;
  return kNone;
}

// The mocked values of the benchmark pack's specification: items A and B.
TEST(TaskMetricsTest, NormalisationsPickDifferentChoices) {
  const std::vector<TaskExample> items = {Choices({"cat", "elephant"}, {0}),
                                          Choices({"caf\xC3\xA9", "cafe"}, {0})};
  const std::vector<ItemScore> scores = {Scores({-2.0, -3.0}, {1, 3}),
                                         Scores({-5.0, -4.1}, {2, 2})};
  // Item A alone: acc 1, acc_tok 0 (-2.0 vs -1.0), acc_norm 0 (-0.667 vs -0.375), acc_bytes 0.
  absl::StatusOr<mesa::v1::TaskResult> a = ComputeTaskMetrics({items[0]}, {scores[0]}, {});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(Metric(*a, "acc").value(), 1);
  EXPECT_EQ(Metric(*a, "acc_tok").value(), 0);
  EXPECT_EQ(Metric(*a, "acc_norm").value(), 0);
  EXPECT_EQ(Metric(*a, "acc_bytes").value(), 0);
  EXPECT_TRUE(Metric(*a, "acc").stderr_method().empty());  // one item: no standard error
  // Item B alone: acc 0, acc_tok 0, acc_norm 0 (4 code points each), acc_bytes 1 (5 vs 4 bytes).
  absl::StatusOr<mesa::v1::TaskResult> b = ComputeTaskMetrics({items[1]}, {scores[1]}, {});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(Metric(*b, "acc").value(), 0);
  EXPECT_EQ(Metric(*b, "acc_tok").value(), 0);
  EXPECT_EQ(Metric(*b, "acc_norm").value(), 0);
  EXPECT_EQ(Metric(*b, "acc_bytes").value(), 1);
  // Both: acc 0.5 (stderr 0.5), acc_tok 0, acc_norm 0, acc_bytes 0.5.
  absl::StatusOr<mesa::v1::TaskResult> ab = ComputeTaskMetrics(items, scores, {});
  ASSERT_TRUE(ab.ok()) << ab.status();
  EXPECT_EQ(Metric(*ab, "acc").value(), 0.5);
  EXPECT_DOUBLE_EQ(Metric(*ab, "acc").stderr(), 0.5);
  EXPECT_EQ(Metric(*ab, "acc").stderr_method(), "mean");
  EXPECT_EQ(Metric(*ab, "acc_tok").value(), 0);
  EXPECT_EQ(Metric(*ab, "acc_norm").value(), 0);
  EXPECT_EQ(Metric(*ab, "acc_bytes").value(), 0.5);
  EXPECT_EQ(Metric(*ab, "acc").count(), 2);
  EXPECT_FALSE(ab->legacy_norm());
  std::vector<std::string> names;
  for (const mesa::v1::MetricValue& m : ab->metrics()) names.push_back(m.name());
  EXPECT_EQ(names,
            (std::vector<std::string>{"acc", "acc_norm", "acc_bytes", "acc_tok", "exact_match"}));
}

TEST(TaskMetricsTest, TiesPickTheLowestIndexAndGoldListsAcceptAny) {
  absl::StatusOr<mesa::v1::TaskResult> tie =
      ComputeTaskMetrics({Choices({"a", "b"}, {1})}, {Scores({-1.0, -1.0}, {1, 1})}, {"acc"});
  ASSERT_TRUE(tie.ok());
  EXPECT_EQ(Metric(*tie, "acc").value(), 0);
  absl::StatusOr<mesa::v1::TaskResult> any = ComputeTaskMetrics(
      {Choices({"a", "b", "c"}, {0, 2})},
      {Scores({-3.0, -2.0, -1.0}, {1, 1, 1}, {false, true, true})}, {"acc", "exact_match"});
  ASSERT_TRUE(any.ok());
  EXPECT_EQ(Metric(*any, "acc").value(), 1);
  EXPECT_EQ(Metric(*any, "exact_match").value(), 1);  // gold 2 is greedy
}

TEST(TaskMetricsTest, Cloze) {
  TaskExample cloze;
  cloze.form = TaskForm::kCloze;
  cloze.context = "c";
  cloze.target = "t";
  cloze.delimiter = " ";
  // LL (-1.0, -3.0), greedy (true, false), T (1, 2).
  absl::StatusOr<mesa::v1::TaskResult> m = ComputeTaskMetrics(
      {cloze, cloze}, {Scores({-1.0}, {1}, {true}), Scores({-3.0}, {2}, {false})}, {});
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->metrics_size(), 3);
  EXPECT_EQ(Metric(*m, "acc").value(), 0.5);
  EXPECT_DOUBLE_EQ(Metric(*m, "acc").stderr(), 0.5);
  EXPECT_NEAR(Metric(*m, "target_ppl").value(), 7.389056, 1e-6);
  // Delta method: ppl · sd(LL) / √n = e² · √2 / √2.
  EXPECT_NEAR(Metric(*m, "target_ppl").stderr(), std::exp(2.0), 1e-9);
  EXPECT_EQ(Metric(*m, "target_ppl").stderr_method(), "delta");
  EXPECT_DOUBLE_EQ(Metric(*m, "target_nll_per_token").value(), 4.0 / 3.0);
}

TEST(TaskMetricsTest, SkippedItemsCountButAreNotScored) {
  ItemScore skipped;
  skipped.skipped = true;
  ItemScore truncated = Scores({-1.0, -2.0}, {1, 1});
  truncated.truncated = true;
  truncated.boundary_merge = true;
  absl::StatusOr<mesa::v1::TaskResult> m = ComputeTaskMetrics(
      {Choices({"a", "b"}, {0}), Choices({"a", "b"}, {0})}, {skipped, truncated}, {"acc"});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->items(), 2);
  EXPECT_EQ(m->scored(), 1);
  EXPECT_EQ(m->skipped(), 1);
  EXPECT_EQ(m->truncated(), 1);
  EXPECT_EQ(m->boundary_merges(), 1);
  EXPECT_EQ(Metric(*m, "acc").value(), 1);
  EXPECT_EQ(Metric(*m, "acc").count(), 1);
}

TEST(TaskMetricsTest, MetricNoItemGivesIsAnError) {
  absl::StatusOr<mesa::v1::TaskResult> m = ComputeTaskMetrics(
      {Choices({"a", "b"}, {0})}, {Scores({-1.0, -2.0}, {1, 1})}, {"target_ppl"});
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(
      absl::StrContains(m.status().message(), "metric target_ppl: no scored item gives it"));
}

TEST(TaskMetricsTest, LegacyChoicesCountTheirOwnSpace) {
  TaskExample legacy = Choices({" ab", " abcd"}, {1});
  legacy.delimiter.reset();
  // LL -3.0 / 3 = -1.0 vs -4.4 / 5 = -0.88: acc_norm picks the longer choice.
  absl::StatusOr<mesa::v1::TaskResult> m =
      ComputeTaskMetrics({legacy}, {Scores({-3.0, -4.4}, {1, 1})}, {"acc", "acc_norm"});
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(m->legacy_norm());
  EXPECT_EQ(Metric(*m, "acc").value(), 0);
  EXPECT_EQ(Metric(*m, "acc_norm").value(), 1);
  EXPECT_EQ(m->accuracy(), 0);
  EXPECT_EQ(m->accuracy_norm(), 1);
}

// The recall suite's rule, on the spec's fixtures: case-insensitive literal substrings.
TEST(TaskMetricsTest, ContainsAnswer) {
  EXPECT_TRUE(ContainsAnswer(" ana ruiz", {"Ana Ruiz"}));
  EXPECT_FALSE(ContainsAnswer(" about 305 pages", {"3.5"}));  // the dot is literal
  EXPECT_FALSE(ContainsAnswer(" Lyon", {"Paris", "Paris, France"}));
  EXPECT_TRUE(ContainsAnswer("PARIS, france.", {"Lyon", "Paris, France"}));
  EXPECT_FALSE(ContainsAnswer("anything", {}));  // unanswerable
  TaskExample item;
  item.form = TaskForm::kGeneration;
  item.context = "p";
  item.answers = {"a"};
  ItemScore right, wrong;
  right.contains = 1;
  absl::StatusOr<mesa::v1::TaskResult> m = ComputeTaskMetrics({item, item}, {right, wrong}, {});
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->metrics_size(), 2);
  EXPECT_EQ(m->metrics(0).name(), "exact_match");
  EXPECT_EQ(m->metrics(0).value(), 0.0);
  EXPECT_EQ(m->metrics(1).name(), "contains");
  EXPECT_EQ(m->metrics(1).value(), 0.5);
  EXPECT_DOUBLE_EQ(m->metrics(1).stderr(), 0.5);
  EXPECT_FALSE(ComputeTaskMetrics({item}, {right}, {"acc"}).ok());
}

// A record carries the scores back unchanged and the facts the metrics need of the item.
TEST(TaskMetricsTest, RecordsCarryScoresAndFacts) {
  TaskExample item = Choices({"caf\xC3\xA9", "cafe"}, {1});
  ItemScore score = Scores({-1.25, -2.5}, {3, 2}, {true, false});
  score.truncated = true;
  const mesa::v1::TaskItemRecord r = ItemRecordOf(7, item, score);
  EXPECT_EQ(r.index(), 7);
  EXPECT_EQ(r.form(), static_cast<int>(TaskForm::kMultipleChoice));
  EXPECT_EQ(std::vector<int>(r.gold().begin(), r.gold().end()), std::vector<int>{1});
  EXPECT_EQ(std::vector<int64_t>(r.norm_chars().begin(), r.norm_chars().end()),
            (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(std::vector<int64_t>(r.norm_bytes().begin(), r.norm_bytes().end()),
            (std::vector<int64_t>{5, 4}));
  EXPECT_FALSE(r.without_delimiter());
  const ItemScore back = ItemScoreOf(r);
  ASSERT_EQ(back.requests.size(), 2u);
  EXPECT_EQ(back.requests[0].loglikelihood, -1.25);
  EXPECT_EQ(back.requests[0].tokens, 3);
  EXPECT_TRUE(back.requests[0].greedy);
  EXPECT_TRUE(back.truncated);
}

}  // namespace
}  // namespace mesa::model
