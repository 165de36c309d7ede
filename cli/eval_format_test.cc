#include "cli/eval_format.h"

#include <cmath>
#include <tuple>

#include "absl/strings/match.h"
#include "cli/format.h"
#include "gtest/gtest.h"

namespace mesa::cli {
namespace {

// An EVAL job with one dataset whose NLL_k = base + slope * k (counts: 10 at every position but
// the last, which nobody scored).
mesa::v1::Job EvalJob(const std::string& id, double base, double slope) {
  mesa::v1::Job job;
  job.set_id(id);
  mesa::v1::DatasetResult* d = job.mutable_result()->add_datasets();
  d->set_name("val");
  d->set_seq_len(4);
  d->set_loss(base + slope);
  d->set_perplexity(std::exp(base + slope));
  double sum = 0;
  for (int k = 0; k < 4; ++k) {
    const int64_t count = k < 3 ? 10 : 0;
    d->add_nll_at_position(count > 0 ? base + slope * k : 0.0);
    d->add_count_at_position(count);
    sum += base + slope * std::min(k, 2);
    d->add_mean_nll_so_far(sum / (std::min(k, 2) + 1));
  }
  return job;
}

TEST(CompareNllTest, AModelAgainstItselfIsZeroEverywhere) {
  const mesa::v1::Job a = EvalJob("job-a", 2.0, -0.25);
  auto c = CompareNll(a, a);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->datasets_size(), 1);
  const mesa::v1::DatasetComparison& d = c->datasets(0);
  EXPECT_EQ(d.positions_size(), 3);  // position 3 has no scored target
  EXPECT_EQ(d.delta_loss(), 0.0);
  for (int i = 0; i < d.positions_size(); ++i) {
    EXPECT_EQ(d.delta_nll(i), 0.0);
    EXPECT_EQ(d.delta_mean_nll_so_far(i), 0.0);
  }
}

TEST(CompareNllTest, DeltaIsModelMinusReferencePerPosition) {
  const mesa::v1::Job a = EvalJob("job-a", 2.0, -0.25);
  const mesa::v1::Job b = EvalJob("job-b", 1.5, 0.0);
  auto c = CompareNll(a, b);
  ASSERT_TRUE(c.ok()) << c.status();
  const mesa::v1::DatasetComparison& d = c->datasets(0);
  ASSERT_EQ(d.positions_size(), 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(d.positions(i), i);
    EXPECT_DOUBLE_EQ(d.delta_nll(i), 0.5 - 0.25 * i);  // eq. 28: NLL_k(A) - NLL_k(B)
    EXPECT_DOUBLE_EQ(d.nll_a(i), 2.0 - 0.25 * i);
    EXPECT_DOUBLE_EQ(d.nll_b(i), 1.5);
  }
  EXPECT_DOUBLE_EQ(d.delta_loss(), 0.25);
  const std::string text = FormatNllComparison(*c);
  EXPECT_TRUE(absl::StrContains(text, "NLL(job-a) - NLL(job-b)")) << text;
  EXPECT_TRUE(absl::StrContains(text, "+0.2500")) << text;  // position 1
  EXPECT_TRUE(absl::StrContains(text, "DELTA_NLL")) << text;
}

TEST(CompareNllTest, JobsWithoutCurvesOrSharedDatasetsAreRefusedByName) {
  mesa::v1::Job a = EvalJob("job-a", 2.0, 0.0);
  mesa::v1::Job plain = a;
  plain.set_id("job-plain");
  plain.mutable_result()->mutable_datasets(0)->clear_nll_at_position();
  auto missing = CompareNll(a, plain);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(missing.status().message(), "job-plain"));
  mesa::v1::Job other = EvalJob("job-o", 2.0, 0.0);
  other.mutable_result()->mutable_datasets(0)->set_name("wiki");
  auto disjoint = CompareNll(a, other);
  ASSERT_FALSE(disjoint.ok());
  EXPECT_TRUE(absl::StrContains(disjoint.status().message(), "no dataset in common"));
}

TEST(EvalResultFieldsTest, DatasetsAverageAndCgAreReadable) {
  mesa::v1::Job job = EvalJob("job-a", 2.0, 0.0);
  mesa::v1::DatasetResult* second = job.mutable_result()->add_datasets();
  second->set_name("long");
  second->set_seq_len(128);
  second->set_loss(3.0);
  job.mutable_result()->set_average_loss(2.5);
  job.mutable_result()->set_average_perplexity(13.4);
  mesa::v1::CgStats* cg = job.mutable_result()->mutable_cg();
  cg->set_cg_mode("tolerance");
  cg->set_cg_tol(1e-4f);
  cg->set_cg_max_steps(30);
  cg->set_cg_steps_mean(8.7);
  mesa::v1::LayerInternals* layer = job.mutable_result()->add_internals();
  layer->set_layer(1);
  layer->set_mixer("mesa");
  layer->set_cg_steps_mean(6.25);
  mesa::v1::HeadInternals* head = layer->add_heads();
  head->set_lambda_min(0.5);
  head->set_lambda_mean(1.0);
  head->set_lambda_max(2.0);
  head->set_gamma_mean(0.9);
  head->set_gamma_std(0.05);
  head->set_gamma_max(0.99);
  head->set_beta_mean(0.5);
  head->set_beta_std(0.25);
  head->set_cg_steps_mean(6.5);
  head->set_condition_rows(4);
  head->set_condition_mean(12.5);
  head->set_condition_min(3);
  head->set_condition_max(40);
  const std::string text = FormatJobDetails(job, absl::Now());
  EXPECT_TRUE(absl::StrContains(text, "Average")) << text;
  EXPECT_TRUE(absl::StrContains(text, "loss 2.5000, ppl 13.400 over 2 datasets")) << text;
  EXPECT_TRUE(absl::StrContains(text, "Dataset val")) << text;
  EXPECT_TRUE(absl::StrContains(text, "per-position curve of 4 positions")) << text;
  EXPECT_TRUE(absl::StrContains(text, "Dataset long")) << text;
  EXPECT_TRUE(absl::StrContains(text, "seq_len 128: loss 3.0000")) << text;
  EXPECT_TRUE(absl::StrContains(
      text, "head 0 λ 0.5..2 (mean 1), γ 0.900±0.050, β 0.500±0.250, CG 6.50, cond 12.5 (3..40)"))
      << text;
  // A synthetic task (no val_path) shows its accuracy; a shard dataset does not.
  second->set_accuracy(0.9966);
  job.mutable_result()->mutable_datasets(0)->set_val_path("/data/val.bin");
  const std::string with_accuracy = FormatJobDetails(job, absl::Now());
  EXPECT_TRUE(absl::StrContains(with_accuracy, "mean CG steps 0.00, accuracy 0.9966"))
      << with_accuracy;
  EXPECT_EQ(with_accuracy.find("accuracy"), with_accuracy.rfind("accuracy")) << with_accuracy;
  EXPECT_TRUE(absl::StrContains(text, "tolerance 0.0001 (max 30 steps): mean 8.70 steps")) << text;
  EXPECT_TRUE(absl::StrContains(text, "Layer 1")) << text;
  EXPECT_TRUE(absl::StrContains(text, "mesa, mean CG steps 6.25; head 0 λ 0.5..2 (mean 1)"))
      << text;
}

TEST(EvalResultFieldsTest, TasksShowBothAccuracies) {
  mesa::v1::Job job = EvalJob("job-a", 2.0, 0.0);
  mesa::v1::TaskResult* task = job.mutable_result()->add_tasks();
  task->set_name("arith");
  task->set_examples(12);
  task->set_multiple_choice(10);
  task->set_num_fewshot(2);
  task->set_accuracy(0.75);
  task->set_accuracy_norm(0.8333);
  const std::string text = FormatJobDetails(job, absl::Now());
  EXPECT_TRUE(absl::StrContains(text, "Task arith")) << text;
  EXPECT_TRUE(absl::StrContains(
      text, "acc 0.7500, acc_norm 0.8333 over 12 examples (10 multiple choice), 2-shot"))
      << text;
}

// Few-shot draws show each metric's spread over draws; Mesa models the task's CG means.
TEST(EvalResultFieldsTest, TasksShowDrawsAndCgSteps) {
  mesa::v1::Job job = EvalJob("job-a", 2.0, 0.0);
  mesa::v1::TaskResult* task = job.mutable_result()->add_tasks();
  task->set_name("scramble");
  task->set_examples(50);
  task->set_num_fewshot(10);
  task->set_fewshot_draws(10);
  task->set_cg_steps_mean_prefill(8.75);
  task->set_cg_steps_mean_decode(6.5);
  mesa::v1::MetricValue* m = task->add_metrics();
  m->set_name("exact_match");
  m->set_value(0.25);
  m->set_stderr(0.05);
  m->set_stderr_method("draws");
  m->set_draw_std(0.0625);
  const std::string text = FormatJobDetails(job, absl::Now());
  EXPECT_TRUE(absl::StrContains(text, "exact_match 0.2500 ±0.0500 (sd 0.0625)")) << text;
  EXPECT_TRUE(absl::StrContains(text, "10-shot x 10 draws, CG steps 8.75 prefill, 6.50 decode"))
      << text;
}

TEST(EvalResultFieldsTest, TasksShowTheirMetricsAndGroups) {
  mesa::v1::Job job = EvalJob("job-a", 2.0, 0.0);
  mesa::v1::TaskResult* task = job.mutable_result()->add_tasks();
  task->set_name("hellaswag");
  task->set_adapter("hellaswag");
  task->set_examples(100);
  task->set_multiple_choice(100);
  task->set_truncated(3);
  task->set_primary_metric("acc_tok");
  for (auto [name, value, se] :
       {std::tuple{"acc", 0.41, 0.049}, std::tuple{"acc_tok", 0.45, 0.05}}) {
    mesa::v1::MetricValue* m = task->add_metrics();
    m->set_name(name);
    m->set_value(value);
    m->set_stderr(se);
    m->set_stderr_method("mean");
  }
  mesa::v1::TaskGroupResult* g = job.mutable_result()->add_task_groups();
  g->set_name("global");
  g->add_members("hellaswag");
  g->add_members("lambada");
  g->set_value(0.4);
  g->set_stderr(0.03);
  const std::string text = FormatJobDetails(job, absl::Now());
  EXPECT_TRUE(absl::StrContains(text,
                                "acc 0.4100 ±0.0490, *acc_tok 0.4500 ±0.0500 over 100 "
                                "examples (100 multiple choice, 3 truncated), 0-shot, "
                                "adapter hellaswag"))
      << text;
  EXPECT_TRUE(absl::StrContains(text, "Group global"));
  EXPECT_TRUE(absl::StrContains(text, "0.4000 ±0.0300, the mean of hellaswag, lambada")) << text;
}

TEST(EvalResultFieldsTest, CgSweepShowsItsPerPositionCurveInBrief) {
  mesa::v1::Job job = EvalJob("job-a", 2.0, 0.0);
  mesa::v1::CgSweepPoint* fixed = job.mutable_result()->add_cg_sweep();
  fixed->set_cg_mode("fixed");
  fixed->set_cg_max_steps(4);
  fixed->set_val_loss(2.5);
  fixed->set_cg_steps_mean(4);
  mesa::v1::CgSweepPoint* tol = job.mutable_result()->add_cg_sweep();
  tol->set_cg_mode("tolerance");
  tol->set_cg_max_steps(30);
  tol->set_cg_tol(1e-3f);
  tol->set_val_loss(2.25);
  tol->set_cg_steps_mean(5.5);
  for (double steps : {1.0, 4.0, 9.5, 7.0}) tol->add_cg_steps_at_position(steps);
  const std::string text = FormatJobDetails(job, absl::Now());
  EXPECT_TRUE(absl::StrContains(text, "fixed 4: loss 2.5000")) << text;
  EXPECT_TRUE(absl::StrContains(text, "tolerance 0.001 (max 30): loss 2.2500")) << text;
  EXPECT_TRUE(absl::StrContains(text, "by position (4): k=0 1.00, k=3 7.00, max 9.50 at k=2"))
      << text;
}

}  // namespace
}  // namespace mesa::cli
