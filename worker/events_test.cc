#include "worker/events.h"

#include "gtest/gtest.h"

namespace mesa::worker {
namespace {

TEST(EventsTest, StepEvent) {
  auto event = ParseEventLine(
      R"({"event":"step","step":12,"total_steps":100,"loss":3.25,"lr":0.001,"grad_norm":0.5,)"
      R"("tokens_per_second":1500.5,"mfu":0.01,"cg_steps_mean":7.5,"eta_seconds":30})");
  ASSERT_TRUE(event.ok()) << event.status();
  EXPECT_EQ(event->type, EventType::kStep);
  EXPECT_EQ(*event->step, 12);
  mesa::v1::Progress progress;
  ApplyToProgress(*event, progress);
  EXPECT_EQ(progress.step(), 12);
  EXPECT_EQ(progress.total_steps(), 100);
  EXPECT_FLOAT_EQ(progress.loss(), 3.25f);
  EXPECT_FLOAT_EQ(progress.tokens_per_second(), 1500.5f);
  EXPECT_FLOAT_EQ(progress.cg_steps_mean(), 7.5f);
  EXPECT_FLOAT_EQ(progress.eta_seconds(), 30.0f);
}

TEST(EventsTest, MissingFieldsKeepEarlierValues) {
  mesa::v1::Progress progress;
  progress.set_loss(2.0f);
  auto event = ParseEventLine(R"({"type":"step","step":3})");
  ASSERT_TRUE(event.ok());
  ApplyToProgress(*event, progress);
  EXPECT_EQ(progress.step(), 3);
  EXPECT_FLOAT_EQ(progress.loss(), 2.0f);
}

TEST(EventsTest, CheckpointStoppedAndError) {
  auto checkpoint = ParseEventLine(R"({"event":"checkpoint","step":20,"path":"/ck/step_20"})");
  ASSERT_TRUE(checkpoint.ok());
  EXPECT_EQ(checkpoint->type, EventType::kCheckpoint);
  EXPECT_EQ(checkpoint->path, "/ck/step_20");
  auto stopped = ParseEventLine(R"({"event":"stopped","step":21,"checkpoint":"/ck/step_21"})");
  ASSERT_TRUE(stopped.ok());
  EXPECT_EQ(stopped->type, EventType::kStopped);
  EXPECT_EQ(stopped->path, "/ck/step_21");
  auto error = ParseEventLine(
      R"({"event":"error","kind":"user","message":"data.train_path: no file matches /nope"})");
  ASSERT_TRUE(error.ok());
  EXPECT_EQ(error->type, EventType::kError);
  EXPECT_EQ(error->kind, "user");
  EXPECT_EQ(error->message, "data.train_path: no file matches /nope");
}

TEST(EventsTest, ResultKeepsMetrics) {
  auto event = ParseEventLine(
      R"({"event":"result","final_loss":2.5,"val_loss":2.75,"val_perplexity":15.6,)"
      R"("checkpoint_path":"/ck/step_100","tokens":12345,"metrics":{"nll_pos_64":2.1}})");
  ASSERT_TRUE(event.ok()) << event.status();
  mesa::v1::JobResult result;
  ApplyToResult(*event, result);
  EXPECT_FLOAT_EQ(result.final_loss(), 2.5f);
  EXPECT_FLOAT_EQ(result.val_loss(), 2.75f);
  EXPECT_FLOAT_EQ(result.val_perplexity(), 15.6f);
  EXPECT_EQ(result.checkpoint_path(), "/ck/step_100");
  EXPECT_DOUBLE_EQ(result.metrics().at("tokens"), 12345);
  EXPECT_DOUBLE_EQ(result.metrics().at("nll_pos_64"), 2.1);
  EXPECT_EQ(result.metrics().count("val_loss"), 0u);
}

TEST(EventsTest, BadLines) {
  EXPECT_FALSE(ParseEventLine("").ok());
  EXPECT_FALSE(ParseEventLine("step 10 loss 3").ok());
  EXPECT_FALSE(ParseEventLine("[1,2]").ok());
  EXPECT_FALSE(ParseEventLine(R"({"step":1})").ok());
  auto other = ParseEventLine(R"({"event":"hello","x":1})");
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->type, EventType::kOther);
}

}  // namespace
}  // namespace mesa::worker
