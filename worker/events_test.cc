#include "worker/events.h"

#include "gtest/gtest.h"
#include "proto/trainer_events.h"

namespace mesa::worker {
namespace {

// Events as they come off the pipe: each test goes through the wire format.
mesa::v1::TrainerEvent Parse(const std::string& line) {
  auto event = ParseEventLine(line);
  EXPECT_TRUE(event.ok()) << event.status();
  return event.ok() ? *event : mesa::v1::TrainerEvent();
}

TEST(EventsTest, StepEvent) {
  auto event = Parse(R"({"time":1,"step":{"step":"12","total_steps":"100","loss":3.25,"lr":0.001,)"
                     R"("grad_norm":0.5,"tokens_per_second":1500.5,"mfu":0.01,"cg_steps_mean":7.5,)"
                     R"("eta_seconds":30}})");
  ASSERT_TRUE(event.has_step());
  mesa::v1::Progress progress;
  ApplyStep(event.step(), progress);
  EXPECT_EQ(progress.step(), 12);
  EXPECT_EQ(progress.total_steps(), 100);
  EXPECT_FLOAT_EQ(progress.loss(), 3.25f);
  EXPECT_FLOAT_EQ(progress.tokens_per_second(), 1500.5f);
  EXPECT_FLOAT_EQ(progress.cg_steps_mean(), 7.5f);
  EXPECT_FLOAT_EQ(progress.eta_seconds(), 30.0f);
}

TEST(EventsTest, SkippedStepKeepsTheLastGoodFigures) {
  mesa::v1::Progress progress;
  progress.set_loss(2.0f);
  progress.set_total_steps(50);
  auto event = Parse(R"({"step":{"step":"3","skipped":true,"skipped_steps":"1"}})");
  ApplyStep(event.step(), progress);
  EXPECT_EQ(progress.step(), 3);
  EXPECT_EQ(progress.total_steps(), 50);
  EXPECT_FLOAT_EQ(progress.loss(), 2.0f);
}

TEST(EventsTest, EvalUpdatesTheValidationFigures) {
  auto event = Parse(R"({"eval":{"step":"40","metrics":{"val_loss":2.5,"val_perplexity":12.2}}})");
  mesa::v1::Progress progress;
  mesa::v1::JobResult result;
  ApplyEval(event.eval(), progress, result);
  EXPECT_EQ(progress.step(), 40);
  EXPECT_FLOAT_EQ(result.val_loss(), 2.5f);
  EXPECT_FLOAT_EQ(result.val_perplexity(), 12.2f);
}

TEST(EventsTest, TrainingResult) {
  auto event =
      Parse(R"({"result":{"final_loss":1.5,"step":"100","skipped_steps":"2","tokens":"12345",)"
            R"("checkpoint_path":"/ck/step_100","seconds":9.5,)"
            R"("eval":{"val_loss":1.75,"val_perplexity":5.75,"tokens":"640","batches":"10"}}})");
  mesa::v1::JobResult result;
  ApplyResult(event.result(), result);
  EXPECT_FLOAT_EQ(result.final_loss(), 1.5f);
  EXPECT_FLOAT_EQ(result.val_loss(), 1.75f);
  EXPECT_FLOAT_EQ(result.val_perplexity(), 5.75f);
  EXPECT_EQ(result.checkpoint_path(), "/ck/step_100");
  EXPECT_DOUBLE_EQ(result.metrics().at("steps"), 100);
  EXPECT_DOUBLE_EQ(result.metrics().at("skipped_steps"), 2);
  EXPECT_DOUBLE_EQ(result.metrics().at("tokens"), 12345);
  EXPECT_DOUBLE_EQ(result.metrics().at("val_tokens"), 640);
  EXPECT_DOUBLE_EQ(result.metrics().at("batches"), 10);
}

TEST(EventsTest, EvaluationResultHasNoTrainingLoss) {
  auto event =
      Parse(R"({"result":{"step":"30","checkpoint_path":"/ck/step_30","eval":{"val_loss":2.0,)"
            R"("val_perplexity":7.39,"tokens":"512","batches":"4","cg_steps_mean":8.5,)"
            R"("cg_mode":"tolerance","cg_tol":0.0001,"cg_max_steps":30}}})");
  mesa::v1::JobResult result;
  ApplyResult(event.result(), result);
  EXPECT_EQ(result.final_loss(), 0.0f);
  EXPECT_FLOAT_EQ(result.val_loss(), 2.0f);
  EXPECT_DOUBLE_EQ(result.metrics().at("cg_steps_mean"), 8.5);
  EXPECT_DOUBLE_EQ(result.metrics().at("cg_max_steps"), 30);
  EXPECT_EQ(result.metrics().count("val_loss"), 0u) << "typed fields are not repeated as metrics";
}

// An evaluation over two datasets with long curves: larger than a log line, still one event, and
// every dataset, curve, average and the CG figures reach the job's result.
TEST(EventsTest, EvaluationDatasetsAndCurvesReachTheResult) {
  mesa::v1::TrainerEvent event;
  mesa::v1::EvalMetrics& eval = *event.mutable_result()->mutable_eval();
  eval.set_val_loss(2.0);
  eval.set_cg_mode("tolerance");
  eval.set_cg_tol(1e-4);
  eval.set_cg_max_steps(30);
  eval.set_cg_steps_mean(8.25);
  eval.set_average_loss(2.5);
  eval.set_average_perplexity(12.5);
  for (const char* name : {"val", "long"}) {
    mesa::v1::DatasetResult& d = *eval.add_datasets();
    d.set_name(name);
    d.set_seq_len(4096);
    for (int k = 0; k < 4096; ++k) {
      d.add_nll_at_position(3.0 - k * 1e-4);
      d.add_mean_nll_so_far(3.0 - k * 5e-5);
      d.add_count_at_position(1000 + k);
    }
  }
  eval.add_internals()->set_cg_steps_mean(7.5);
  const std::string line = FormatEventLine(event);
  ASSERT_GT(line.size(), 64u * 1024) << "the test is meant to exceed a log line";
  ASSERT_LT(line.size(), kMaxEventLineBytes);
  mesa::v1::JobResult result;
  ApplyResult(Parse(line.substr(0, line.size() - 1)).result(), result);
  ASSERT_EQ(result.datasets_size(), 2);
  EXPECT_EQ(result.datasets(1).name(), "long");
  ASSERT_EQ(result.datasets(1).nll_at_position_size(), 4096);
  EXPECT_DOUBLE_EQ(result.datasets(1).nll_at_position(4095), 3.0 - 4095 * 1e-4);
  EXPECT_EQ(result.datasets(0).count_at_position(17), 1017);
  EXPECT_DOUBLE_EQ(result.average_loss(), 2.5);
  EXPECT_DOUBLE_EQ(result.average_perplexity(), 12.5);
  EXPECT_EQ(result.cg().cg_mode(), "tolerance");
  EXPECT_EQ(result.cg().cg_max_steps(), 30);
  EXPECT_DOUBLE_EQ(result.cg().cg_steps_mean(), 8.25);
  ASSERT_EQ(result.internals_size(), 1);
  EXPECT_DOUBLE_EQ(result.internals(0).cg_steps_mean(), 7.5);
}

}  // namespace
}  // namespace mesa::worker
