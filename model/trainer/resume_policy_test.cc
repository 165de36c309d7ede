#include "model/trainer/resume_policy.h"

#include <optional>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace mesa::model {
namespace {

using Resume = CheckpointSettings::Resume;

TrainState Found(int64_t step, const std::string& run_id) {
  TrainState s;
  s.step = step;
  s.run_id = run_id;
  return s;
}

TEST(ResumePolicyTest, AResumedRunKeepsItsDocumentResets) {
  DataSettings absent;  // the spec leaves data.reset_at_bos out: the default would be on
  absent.reset_at_bos = true;
  for (bool recorded : {false, true}) {
    auto kept = ResumedResetAtBos(absent, recorded, "/ck/step_00000010");
    ASSERT_TRUE(kept.ok()) << kept.status();
    EXPECT_EQ(*kept, recorded);
  }
  // A checkpoint from before the record: its run had no resets.
  auto old = ResumedResetAtBos(absent, std::nullopt, "/ck/step_00000010");
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_FALSE(*old);
  // The spec's explicit value must agree with the run's.
  DataSettings on = absent;
  on.reset_at_bos_set = true;
  EXPECT_TRUE(*ResumedResetAtBos(on, true, "/ck/step_00000010"));
  for (std::optional<bool> recorded : {std::optional<bool>(false), std::optional<bool>()}) {
    auto mismatch = ResumedResetAtBos(on, recorded, "/ck/step_00000010");
    EXPECT_EQ(mismatch.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_TRUE(absl::StrContains(mismatch.status().message(), "data.reset_at_bos"))
        << mismatch.status();
    EXPECT_TRUE(absl::StrContains(mismatch.status().message(), "/ck/step_00000010"));
  }
}

TEST(ResumePolicyTest, ARetryOfTheSameJobAlwaysResumes) {
  const TrainState mine = Found(200, "job-7");  // finished, even: the retry's work is done
  for (Resume mode : {Resume::kNever, Resume::kAuto, Resume::kMust}) {
    auto d = DecideResume(mode, "job-7", 200, &mine, "/ck");
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_TRUE(d->resume);
  }
}

TEST(ResumePolicyTest, ANewJobStartsFreshByDefault) {
  const TrainState finished = Found(200, "job-1");
  auto d = DecideResume(Resume::kNever, "job-2", 200, &finished, "/ck");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_FALSE(d->resume);
  EXPECT_TRUE(absl::StrContains(d->note, "starting fresh")) << d->note;
  EXPECT_TRUE(absl::StrContains(d->note, "job job-1")) << d->note;
  // Runs by hand have no id: two of them are two runs, never the same one.
  const TrainState by_hand = Found(50, "");
  d = DecideResume(Resume::kNever, "", 200, &by_hand, "/ck");
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->resume);
  d = DecideResume(Resume::kNever, "job-2", 200, nullptr, "/ck");
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->resume);
  EXPECT_TRUE(d->note.empty());
}

TEST(ResumePolicyTest, AutoAndMustContinueAnUnfinishedRun) {
  const TrainState half = Found(100, "job-1");
  for (Resume mode : {Resume::kAuto, Resume::kMust}) {
    auto d = DecideResume(mode, "job-2", 200, &half, "/ck");
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_TRUE(d->resume);
  }
  auto none = DecideResume(Resume::kAuto, "job-2", 200, nullptr, "/ck");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->resume);
  auto must = DecideResume(Resume::kMust, "job-2", 200, nullptr, "/ck");
  EXPECT_EQ(must.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(must.status().message(), "no checkpoint under /ck"));
}

TEST(ResumePolicyTest, AFinishedRunIsNeverResumedSilently) {
  const TrainState finished = Found(200, "job-1");
  for (Resume mode : {Resume::kAuto, Resume::kMust}) {
    auto d = DecideResume(mode, "job-2", 200, &finished, "/ck");
    EXPECT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_TRUE(absl::StrContains(d.status().message(), "finished run (step 200")) << d.status();
    EXPECT_TRUE(absl::StrContains(d.status().message(), "Raise training.steps")) << d.status();
  }
  // More steps asked for: continuing the finished run is what the user wants.
  auto more = DecideResume(Resume::kAuto, "job-2", 400, &finished, "/ck");
  ASSERT_TRUE(more.ok());
  EXPECT_TRUE(more->resume);
}

}  // namespace
}  // namespace mesa::model
