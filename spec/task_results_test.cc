#include "spec/task_results.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "spec/bleu.h"
#include "spec/tasks.h"

namespace mesa::spec {
namespace {

using ::mesa::v1::TaskItemRecord;
using ::mesa::v1::TaskPartial;

// A multiple-choice item's record: per choice its log-likelihood, tokens and the choice's length.
TaskItemRecord Choice(int64_t index, std::vector<double> ll, std::vector<int64_t> tokens,
                      std::vector<int64_t> chars, int gold) {
  TaskItemRecord r;
  r.set_index(index);
  r.set_form(static_cast<int>(TaskItemForm::kMultipleChoice));
  for (size_t k = 0; k < ll.size(); ++k) {
    r.add_loglikelihood(ll[k]);
    r.add_tokens(tokens[k]);
    r.add_greedy(false);
    r.add_norm_chars(chars[k]);
    r.add_norm_bytes(chars[k]);
  }
  r.add_gold(gold);
  return r;
}

const mesa::v1::MetricValue& Metric(const mesa::v1::TaskResult& m, const std::string& name) {
  for (const mesa::v1::MetricValue& v : m.metrics()) {
    if (v.name() == name) return v;
  }
  static const mesa::v1::MetricValue kNone;
  ADD_FAILURE() << "no metric " << name;
  return kNone;
}

// Ten items with scores that make every metric differ between items.
std::vector<TaskItemRecord> TenItems() {
  std::vector<TaskItemRecord> records;
  for (int i = 0; i < 10; ++i) {
    records.push_back(Choice(i, {-1.0 - 0.37 * i, -2.0 + 0.11 * i * i, -1.5 - 0.05 * i},
                             {1 + i % 3, 2, 3}, {3 + i, 5, 4}, i % 3));
  }
  records[4].set_truncated(true);
  records[7].set_skipped(true);
  records[7].clear_loglikelihood();
  records[7].clear_tokens();
  records[7].clear_greedy();
  return records;
}

TEST(TaskResults, MetricsFromRecords) {
  mesa::v1::TaskResult r;
  std::vector<TaskItemRecord> two = {Choice(0, {-2.0, -3.0}, {1, 3}, {3, 8}, 0),
                                     Choice(1, {-5.0, -4.1}, {2, 2}, {4, 4}, 0)};
  two[1].set_norm_bytes(0, 5);  // "café": 4 code points, 5 bytes
  ASSERT_TRUE(ComputeTaskMetrics(two, {}, &r).ok());
  // The benchmark pack's items A and B: acc 0.5 (stderr 0.5), acc_tok 0, acc_norm 0, acc_bytes 0.5.
  EXPECT_EQ(Metric(r, "acc").value(), 0.5);
  EXPECT_DOUBLE_EQ(Metric(r, "acc").stderr(), 0.5);
  EXPECT_EQ(Metric(r, "acc_tok").value(), 0);
  EXPECT_EQ(Metric(r, "acc_norm").value(), 0);
  EXPECT_EQ(Metric(r, "acc_bytes").value(), 0.5);
  EXPECT_EQ(r.items(), 2);
  EXPECT_EQ(r.multiple_choice(), 2);
  // A record that disagrees with its form is refused, not scored.
  two[0].set_gold(0, 5);
  absl::Status bad = ComputeTaskMetrics(two, {}, &r);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(absl::StrContains(bad.message(), "right request 5 of 2")) << bad;
}

TEST(TaskResults, GroupAverage) {
  mesa::v1::MetricValue a, b;
  a.set_value(0.4);
  a.set_stderr(0.03);
  a.set_stderr_method("mean");
  a.set_count(100);
  b.set_value(0.6);
  b.set_stderr(0.04);
  b.set_stderr_method("mean");
  b.set_count(50);
  const mesa::v1::MetricValue g = AverageOfMetrics("global", {a, b});
  EXPECT_DOUBLE_EQ(g.value(), 0.5);
  EXPECT_DOUBLE_EQ(g.stderr(), 0.05 / 2);
  EXPECT_EQ(g.count(), 150);
}

TEST(MergeItemRecords, PartialsInAnyOrderGiveEveryItemInIndexOrder) {
  const std::vector<TaskItemRecord> items = TenItems();
  TaskPartial a, b;
  a.set_items(10);
  b.set_items(10);
  for (int i = 9; i >= 0; --i) *(i % 2 == 0 ? a : b).add_records() = items[i];
  absl::StatusOr<std::vector<TaskItemRecord>> merged = MergeItemRecords(10, {b, a});
  ASSERT_TRUE(merged.ok()) << merged.status();
  for (int i = 0; i < 10; ++i)
    EXPECT_EQ((*merged)[i].SerializeAsString(), items[i].SerializeAsString());
  // Only the expected items: the others may not come.
  std::vector<bool> expected(10, false);
  expected[2] = expected[5] = true;
  TaskPartial some;
  some.set_items(10);
  *some.add_records() = items[5];
  *some.add_records() = items[2];
  EXPECT_TRUE(MergeItemRecords(10, {some}, &expected).ok());
  *some.add_records() = items[3];
  EXPECT_EQ(MergeItemRecords(10, {some}, &expected).status().code(), absl::StatusCode::kInternal);
}

TEST(MergeItemRecords, MissingRepeatedOrForeignRecordsAreRefused) {
  TaskPartial p;
  p.set_task("t");
  p.set_items(2);
  *p.add_records() = Choice(0, {-1, -2}, {1, 1}, {1, 1}, 0);
  EXPECT_EQ(MergeItemRecords(2, {p}).status().code(), absl::StatusCode::kInternal);  // missing 1
  TaskPartial twice = p;
  *twice.add_records() = p.records(0);
  EXPECT_EQ(MergeItemRecords(2, {twice}).status().code(), absl::StatusCode::kInternal);
  TaskPartial outside = p;
  *outside.add_records() = Choice(2, {-1, -2}, {1, 1}, {1, 1}, 0);
  EXPECT_EQ(MergeItemRecords(2, {outside}).status().code(), absl::StatusCode::kInternal);
  TaskPartial other = p;
  other.set_items(3);
  EXPECT_EQ(MergeItemRecords(2, {other}).status().code(), absl::StatusCode::kInternal);
  TaskPartial malformed = p;
  *malformed.add_records() = Choice(1, {-1, -2}, {1, 1}, {1, 1}, 0);
  malformed.mutable_records(1)->clear_tokens();
  EXPECT_EQ(MergeItemRecords(2, {malformed}).status().code(), absl::StatusCode::kInternal);
}

// The benchmark pack's merging fixture: ten items scored whole and as 3 shard jobs give
// bit-identical metrics, standard errors and group averages.
TEST(MergeShardResults, ThreeShardsEqualTheWhole) {
  mesa::v1::EvalConfig eval;
  mesa::v1::EvalTask& task = *eval.add_tasks();
  task.set_name("mc");
  task.set_adapter("hellaswag");
  mesa::v1::EvalTaskGroup& group = *eval.add_task_groups();
  group.set_name("global");
  group.add_tasks("mc");
  const std::vector<TaskItemRecord> items = TenItems();

  mesa::v1::TaskResult whole;
  ASSERT_TRUE(ComputeTaskMetrics(items, {}, &whole).ok());
  whole.set_primary_metric(PrimaryMetricOf(task, whole));
  EXPECT_EQ(whole.primary_metric(), "acc_tok");

  std::vector<mesa::v1::JobResult> shards(3);
  for (int k = 0; k < 3; ++k) {
    mesa::v1::TaskResult& t = *shards[k].add_tasks();
    t.set_name("mc");
    t.set_items(10);
    t.set_file_sha256("abc");
    t.set_max_length(2048);
    TaskPartial& p = *shards[k].add_task_partials();
    p.set_task("mc");
    p.set_items(10);
    for (int i = k; i < 10; i += 3) *p.add_records() = items[i];
  }
  absl::StatusOr<mesa::v1::JobResult> merged =
      MergeShardResults(eval, {shards[2], shards[0], shards[1]});
  ASSERT_TRUE(merged.ok()) << merged.status();
  ASSERT_EQ(merged->tasks_size(), 1);
  const mesa::v1::TaskResult& t = merged->tasks(0);
  EXPECT_EQ(t.max_length(), 2048);  // the shards' settings
  EXPECT_EQ(t.file_sha256(), "abc");
  EXPECT_EQ(t.primary_metric(), "acc_tok");
  ASSERT_EQ(t.metrics_size(), whole.metrics_size());
  for (int m = 0; m < t.metrics_size(); ++m) {
    EXPECT_EQ(t.metrics(m).SerializeAsString(), whole.metrics(m).SerializeAsString())
        << t.metrics(m).name();
  }
  EXPECT_EQ(t.scored(), 9);
  EXPECT_EQ(t.truncated(), 1);
  ASSERT_EQ(merged->task_groups_size(), 1);
  EXPECT_EQ(merged->task_groups(0).value(), Metric(whole, "acc_tok").value());
  EXPECT_TRUE(merged->task_partials().empty());

  // A shard of another file, or a lost shard, fails the merge naming the task.
  std::vector<mesa::v1::JobResult> other = shards;
  other[1].mutable_tasks(0)->set_file_sha256("def");
  absl::StatusOr<mesa::v1::JobResult> mixed = MergeShardResults(eval, other);
  EXPECT_FALSE(mixed.ok());
  EXPECT_TRUE(absl::StrContains(mixed.status().message(), "task mc: shard 1 scored another file"))
      << mixed.status();
  absl::StatusOr<mesa::v1::JobResult> lost = MergeShardResults(eval, {shards[0], shards[1]});
  EXPECT_FALSE(lost.ok());
  EXPECT_TRUE(absl::StrContains(lost.status().message(), "7 of 10 items arrived")) << lost.status();
}

// A generation item's record: exact match, contains and its BLEU statistics.
TaskItemRecord Generated(int64_t index, bool exact, const std::string& output,
                         const std::string& reference) {
  TaskItemRecord r;
  r.set_index(index);
  r.set_form(static_cast<int>(TaskItemForm::kGeneration));
  r.set_exact(exact);
  r.set_contains(exact ? 1 : 0);
  for (int64_t v : SegmentBleu(output, reference).ToList()) r.add_bleu_stats(v);
  return r;
}

TEST(TaskResults, GenerationGivesExactMatchAndCorpusBleu) {
  const std::vector<TaskItemRecord> items = {
      Generated(0, false, "the cat sat on a mat", "the cat sat on the mat"),
      Generated(1, true, "a b c d", "a b c d e f"), Generated(2, false, "x y z w v", "a b c d e")};
  mesa::v1::TaskResult r;
  ASSERT_TRUE(ComputeTaskMetrics(items, {}, &r).ok());
  ASSERT_EQ(r.metrics_size(), 3);  // exact_match, contains, bleu: the records carry statistics
  EXPECT_DOUBLE_EQ(Metric(r, "exact_match").value(), 1.0 / 3);
  BleuStats sum;
  for (const auto& [hyp, ref] : std::vector<std::pair<std::string, std::string>>{
           {"the cat sat on a mat", "the cat sat on the mat"},
           {"a b c d", "a b c d e f"},
           {"x y z w v", "a b c d e"}}) {
    sum += SegmentBleu(hyp, ref);
  }
  const mesa::v1::MetricValue& bleu = Metric(r, "bleu");
  EXPECT_DOUBLE_EQ(bleu.value(), CorpusBleu(sum));
  EXPECT_EQ(bleu.count(), 3);
  EXPECT_EQ(bleu.stderr_method(), "bootstrap");
  EXPECT_GT(bleu.stderr(), 0.0);
  // Without statistics BLEU is not offered, and asking for it is an error.
  std::vector<TaskItemRecord> plain = items;
  for (TaskItemRecord& p : plain) p.clear_bleu_stats();
  mesa::v1::TaskResult without;
  ASSERT_TRUE(ComputeTaskMetrics(plain, {}, &without).ok());
  EXPECT_EQ(without.metrics_size(), 2);
  EXPECT_FALSE(ComputeTaskMetrics(plain, {"bleu"}, &without).ok());
  // Malformed statistics from another process are refused.
  std::vector<TaskItemRecord> broken = items;
  broken[1].add_bleu_stats(3);
  EXPECT_FALSE(ComputeTaskMetrics(broken, {}, &without).ok());
}

TEST(CombineDraws, MeanStdAndEveryDraw) {
  std::vector<mesa::v1::TaskResult> draws(3);
  const double values[] = {0.2, 0.5, 0.8};
  const double errors[] = {0.1, 0.2, 0.2};
  for (int d = 0; d < 3; ++d) {
    draws[d].set_name("scramble");
    draws[d].set_accuracy(values[d]);
    mesa::v1::MetricValue& m = *draws[d].add_metrics();
    m.set_name("exact_match");
    m.set_value(values[d]);
    m.set_stderr(errors[d]);
    m.set_stderr_method("mean");
    m.set_count(10);
  }
  absl::StatusOr<mesa::v1::TaskResult> combined = CombineDraws(draws);
  ASSERT_TRUE(combined.ok()) << combined.status();
  EXPECT_EQ(combined->fewshot_draws(), 3);
  ASSERT_EQ(combined->draws_size(), 3);
  EXPECT_EQ(combined->draws(1).metrics(0).value(), 0.5);
  const mesa::v1::MetricValue& m = combined->metrics(0);
  EXPECT_DOUBLE_EQ(m.value(), 0.5);
  EXPECT_DOUBLE_EQ(m.draw_std(), 0.3);  // sqrt((0.09 + 0 + 0.09) / 2)
  EXPECT_DOUBLE_EQ(m.stderr(), std::sqrt((0.01 + 0.04 + 0.04) / 3));
  EXPECT_EQ(m.stderr_method(), "draws");
  EXPECT_DOUBLE_EQ(combined->accuracy(), 0.5);
  draws[2].mutable_metrics(0)->set_name("contains");
  EXPECT_FALSE(CombineDraws(draws).ok());
}

// Shards of a task with few-shot draws report each draw's records; the merge scores each draw
// and combines them as one job does.
TEST(MergeShardResults, DrawsMergeApartThenCombine) {
  mesa::v1::EvalConfig eval;
  mesa::v1::EvalTask& task = *eval.add_tasks();
  task.set_name("mt");
  task.set_adapter("wmt_fr_en");
  std::vector<std::vector<TaskItemRecord>> per_draw(2);
  for (int i = 0; i < 6; ++i) {
    per_draw[0].push_back(Generated(i, i % 2 == 0, "a b c d e", i < 3 ? "a b c d e" : "a b x d"));
    per_draw[1].push_back(Generated(i, i % 3 == 0, "a b c d", "a b c d e f"));
  }
  std::vector<mesa::v1::TaskResult> whole(2);
  for (int d = 0; d < 2; ++d) {
    ASSERT_TRUE(ComputeTaskMetrics(per_draw[d], {}, &whole[d]).ok());
    whole[d].set_name("mt");
    whole[d].set_items(6);
    whole[d].set_fewshot_draws(2);
    whole[d].set_primary_metric(PrimaryMetricOf(task, whole[d]));
  }
  absl::StatusOr<mesa::v1::TaskResult> expected = CombineDraws(whole);
  ASSERT_TRUE(expected.ok());
  std::vector<mesa::v1::JobResult> shards(2);
  for (int k = 0; k < 2; ++k) {
    mesa::v1::TaskResult& t = *shards[k].add_tasks();
    t.set_name("mt");
    t.set_items(6);
    t.set_fewshot_draws(2);
    for (int d = 0; d < 2; ++d) {
      TaskPartial& p = *shards[k].add_task_partials();
      p.set_task("mt");
      p.set_items(6);
      p.set_draw(d);
      for (int i = k; i < 6; i += 2) *p.add_records() = per_draw[d][i];
    }
  }
  absl::StatusOr<mesa::v1::JobResult> merged = MergeShardResults(eval, shards);
  ASSERT_TRUE(merged.ok()) << merged.status();
  const mesa::v1::TaskResult& t = merged->tasks(0);
  EXPECT_EQ(t.primary_metric(), "bleu");
  ASSERT_EQ(t.metrics_size(), expected->metrics_size());
  for (int m = 0; m < t.metrics_size(); ++m) {
    EXPECT_EQ(t.metrics(m).SerializeAsString(), expected->metrics(m).SerializeAsString())
        << t.metrics(m).name();
  }
  ASSERT_EQ(t.draws_size(), 2);
  // Records of a draw the task does not have are refused.
  shards[1].mutable_task_partials(1)->set_draw(2);
  absl::StatusOr<mesa::v1::JobResult> stray = MergeShardResults(eval, shards);
  EXPECT_FALSE(stray.ok());
  EXPECT_TRUE(absl::StrContains(stray.status().message(), "records of draw 2 for 2 draws"))
      << stray.status();
}

}  // namespace
}  // namespace mesa::spec
