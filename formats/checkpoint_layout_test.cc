#include "formats/checkpoint_layout.h"

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "base/file_util.h"
#include "gtest/gtest.h"

namespace mesa::formats {
namespace {

namespace fs = std::filesystem;

std::string FreshRoot(const std::string& name) {
  const std::string root = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  fs::remove_all(root);
  fs::create_directories(root);
  return root;
}

void MakeStep(const std::string& dir) {
  fs::create_directories(dir);
  ASSERT_TRUE(base::WriteFileAtomically(dir + "/" + kCheckpointStateFile, "{}").ok());
}

TEST(CheckpointLayoutTest, NamesSortByStepAndTemporariesAreNotSteps) {
  EXPECT_EQ(StepDirName(100), "step_00000100");
  EXPECT_EQ(TempStepDirName(100, 42), "step_00000100.tmp.42");
  EXPECT_TRUE(IsStepDirName("step_00000100"));
  EXPECT_FALSE(IsStepDirName("step_00000100.tmp.42"));
  EXPECT_TRUE(IsTempStepDirName("step_00000100.tmp.42"));
  EXPECT_FALSE(IsTempStepDirName("step_00000100"));
  EXPECT_FALSE(IsStepDirName("latest"));
  EXPECT_LT(StepDirName(99), StepDirName(100));
}

TEST(CheckpointLayoutTest, CandidatesAreTheStepItselfOrLatestThenNewestFirst) {
  const std::string root = FreshRoot("candidates");
  for (int step : {5, 20, 100}) MakeStep(root + "/" + StepDirName(step));
  fs::create_directories(root + "/" + TempStepDirName(200, 7));
  ASSERT_TRUE(base::WriteFileAtomically(root + "/latest", "step_00000020\n").ok());
  absl::StatusOr<std::vector<std::string>> c = CheckpointCandidates(root);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(*c, (std::vector<std::string>{root + "/step_00000020", root + "/step_00000100",
                                          root + "/step_00000005"}));
  EXPECT_EQ(ListStepDirs(root).size(), 3u);
  // A step directory named explicitly stands for itself alone.
  c = CheckpointCandidates(root + "/step_00000005");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, std::vector<std::string>{root + "/step_00000005"});
  EXPECT_EQ(CheckpointCandidates(root + "/missing").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(CheckpointCandidates(FreshRoot("empty")).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace mesa::formats
