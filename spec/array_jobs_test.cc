#include "spec/array_jobs.h"

#include <cstdlib>
#include <filesystem>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "spec/testing.h"

namespace mesa::spec {
namespace {

mesa::v1::JobSpec Sweep() {
  mesa::v1::JobSpec s = ValidEvalSpec("a-rather-long-sweep-name-that-fills-most-of-the-63-chars");
  s.mutable_array()->add_checkpoints("/ckpt/a");
  s.mutable_array()->add_cg_settings()->set_mode("fixed");
  s.mutable_array()->mutable_cg_settings(0)->set_steps(8);
  s.mutable_array()->add_cg_settings()->set_mode("tolerance");
  s.mutable_array()->mutable_cg_settings(1)->set_tol(1e-3f);
  s.mutable_array()->set_shards(12);
  return s;
}

TEST(ExpandArray, ChildrenInProductOrderWithShortenedNames) {
  absl::StatusOr<std::vector<ArrayChildSpec>> children = ExpandArray(Sweep());
  ASSERT_TRUE(children.ok()) << children.status();
  ASSERT_EQ(children->size(), 24u);
  const ArrayChildSpec& last = children->back();
  EXPECT_EQ(last.cg_index, 1);
  EXPECT_EQ(last.shard, 11);
  EXPECT_LE(last.spec.name().size(), 63u);
  EXPECT_TRUE(absl::EndsWith(last.spec.name(), "-c0-s1-k11")) << last.spec.name();
  EXPECT_NE(last.spec.name()[last.spec.name().size() - 11], '-');  // no "--" where it was cut
  EXPECT_EQ(last.spec.labels().at(kArrayIndexLabel), "23");
  EXPECT_FLOAT_EQ(last.spec.model().cg_tol(), 1e-3f);
  EXPECT_EQ(last.spec.model().cg_max_steps(), 30);
  EXPECT_EQ((*children)[0].spec.model().cg_steps(), 8);
  EXPECT_EQ(CgSettingName(Sweep().array(), 1), "tolerance 0.001 max 30");
  EXPECT_EQ(CgSettingName(mesa::v1::ArraySpec(), 0), "model");
}

TEST(ExpandCheckpointSteps, SavedStepsThatAreMultiplesOldestFirst) {
  const std::string root = std::string(std::getenv("TEST_TMPDIR")) + "/run";
  for (const char* dir :
       {"step_00000100", "step_00000150", "step_00000200", "step_00000300.tmp.123", "other"}) {
    std::filesystem::create_directories(root + "/" + std::string(dir));
  }
  mesa::v1::JobSpec s = Sweep();
  s.mutable_array()->clear_checkpoints();
  s.mutable_array()->mutable_checkpoint_steps()->set_root(root);
  s.mutable_array()->mutable_checkpoint_steps()->set_every(100);
  // Unexpanded, the coordinator's expansion refuses it.
  EXPECT_TRUE(absl::StrContains(ExpandArray(s).status().message(), "array.checkpoint_steps"));
  ASSERT_TRUE(ExpandCheckpointSteps(s).ok());
  ASSERT_EQ(s.array().checkpoints_size(), 2);
  EXPECT_EQ(s.array().checkpoints(0), root + "/step_00000100");
  EXPECT_EQ(s.array().checkpoints(1), root + "/step_00000200");
  EXPECT_FALSE(s.array().has_checkpoint_steps());
  // Nothing that matches, or both forms, is an error naming the field.
  mesa::v1::JobSpec none = Sweep();
  none.mutable_array()->clear_checkpoints();
  none.mutable_array()->mutable_checkpoint_steps()->set_root(root);
  none.mutable_array()->mutable_checkpoint_steps()->set_every(7);
  EXPECT_TRUE(absl::StrContains(ExpandCheckpointSteps(none).message(), "is a multiple of 7"));
  mesa::v1::JobSpec both = Sweep();
  both.mutable_array()->mutable_checkpoint_steps()->set_root(root);
  both.mutable_array()->mutable_checkpoint_steps()->set_every(100);
  EXPECT_TRUE(absl::StrContains(ExpandCheckpointSteps(both).message(), "not both"));
}

}  // namespace
}  // namespace mesa::spec
