#include "spec/task_results.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
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

}  // namespace
}  // namespace mesa::spec
