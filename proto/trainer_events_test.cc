#include "proto/trainer_events.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace mesa {
namespace {

TEST(TrainerEvents, RoundTripOneLine) {
  mesa::v1::TrainerEvent event;
  event.set_time(1.5e9);
  event.set_rank(1);
  auto* step = event.mutable_step();
  step->set_step(12);
  step->set_total_steps(100);
  step->set_loss(2.5);
  step->set_tokens_per_second(1234.5);
  const std::string line = FormatEventLine(event);
  EXPECT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1) << "one line";
  EXPECT_TRUE(absl::StrContains(line, "\"tokens_per_second\":1234.5")) << line;
  EXPECT_TRUE(absl::StrContains(line, "\"skipped\":false")) << "defaults are printed: " << line;
  auto parsed = ParseEventLine(line);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->event_case(), mesa::v1::TrainerEvent::kStep);
  EXPECT_EQ(parsed->step().step(), 12);
  EXPECT_EQ(parsed->step().loss(), 2.5);
  EXPECT_EQ(parsed->rank(), 1);
}

TEST(TrainerEvents, UnknownFieldsAndEventsAreIgnored) {
  auto known = ParseEventLine(
      R"({"time": 1, "checkpoint": {"step": "5", "path": "/c/step_5", "new_field": [1, 2]},)"
      R"( "future": true})");
  ASSERT_TRUE(known.ok()) << known.status();
  EXPECT_EQ(known->checkpoint().path(), "/c/step_5");
  EXPECT_EQ(known->checkpoint().step(), 5);
  auto unknown = ParseEventLine(R"({"time": 1, "telemetry": {"gpu_temp": 71}})");
  ASSERT_TRUE(unknown.ok()) << unknown.status();
  EXPECT_EQ(unknown->event_case(), mesa::v1::TrainerEvent::EVENT_NOT_SET);
}

TEST(TrainerEvents, GarbageIsAnError) {
  for (const char* bad :
       {"", "not json", "[1, 2]", R"({"step": {"step": "x"}})", R"({"step": 5})"}) {
    auto parsed = ParseEventLine(bad);
    EXPECT_FALSE(parsed.ok()) << bad;
    if (!parsed.ok()) {
      EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    }
  }
}

TEST(TrainerEvents, ExitCodesAreTheDocumentedOnes) {
  EXPECT_EQ(mesa::v1::TRAINER_EXIT_OK, 0);
  EXPECT_EQ(mesa::v1::TRAINER_EXIT_INFRA_ERROR, 1);
  EXPECT_EQ(mesa::v1::TRAINER_EXIT_USER_ERROR, 2);
  EXPECT_EQ(mesa::v1::TRAINER_EXIT_DIVERGED, 3);
}

}  // namespace
}  // namespace mesa
