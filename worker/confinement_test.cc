#include "worker/confinement.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace mesa::worker {
namespace {

namespace fs = std::filesystem;

// <tmp>/data (a data root) with a.bin and a link to a file outside it, <tmp>/ckpt (the checkpoint
// root) with a link "named/escape" to <tmp>/outside and "named/steal" to <tmp>/ckpt/job-1.
class ConfinementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(std::getenv("TEST_TMPDIR"), "/",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_ + "/data");
    fs::create_directories(dir_ + "/outside");
    fs::create_directories(dir_ + "/ckpt/named");
    fs::create_directories(dir_ + "/ckpt/job-1");
    std::ofstream(dir_ + "/data/a.bin") << "x";
    std::ofstream(dir_ + "/outside/secret.bin") << "x";
    fs::create_symlink(dir_ + "/outside/secret.bin", dir_ + "/data/b.bin");
    fs::create_directory_symlink(dir_ + "/outside", dir_ + "/ckpt/named/escape");
    fs::create_directory_symlink(dir_ + "/ckpt/job-1", dir_ + "/ckpt/named/steal");
    a_.set_job_id("job-2");
    a_.add_data_roots(dir_ + "/data");
    a_.set_checkpoint_root(dir_ + "/ckpt");
    a_.mutable_spec()->mutable_data()->set_train_path(dir_ + "/data/a.bin");
  }
  std::string dir_;
  mesa::v1::Assignment a_;
};

TEST_F(ConfinementTest, PathsInsideTheRootsPass) {
  EXPECT_TRUE(CheckConfinedPaths(a_, dir_ + "/ckpt/job-2").ok());
  EXPECT_TRUE(CheckConfinedPaths(a_, dir_ + "/ckpt/named/new/deeper").ok());
  a_.mutable_spec()->mutable_checkpoint()->set_init_from(dir_ + "/ckpt/job-1");
  EXPECT_TRUE(CheckConfinedPaths(a_, dir_ + "/ckpt/job-2").ok());
}

TEST_F(ConfinementTest, CheckpointDirThroughASymlinkOutsideTheRootIsRefused) {
  absl::Status s = CheckConfinedPaths(a_, dir_ + "/ckpt/named/escape/run");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(absl::StartsWith(s.message(), "spec.checkpoint.dir: ")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "outside the checkpoint root")) << s;
  EXPECT_FALSE(absl::StrContains(s.message(), "/outside")) << s;  // not the link's target
}

TEST_F(ConfinementTest, CheckpointDirThroughASymlinkIntoAnotherJobIsRefused) {
  absl::Status s = CheckConfinedPaths(a_, dir_ + "/ckpt/named/steal");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(absl::StrContains(s.message(), "another job's directory")) << s;
}

TEST_F(ConfinementTest, DataThroughASymlinkOutsideTheRootsIsRefused) {
  a_.mutable_spec()->mutable_data()->set_train_path(dir_ + "/data/a.bin," + dir_ + "/data/b.bin");
  absl::Status s = CheckConfinedPaths(a_, "");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(absl::StartsWith(s.message(), "spec.data.train_path: ")) << s;
  // A pattern that matches the link is refused too.
  a_.mutable_spec()->mutable_data()->set_train_path(dir_ + "/data/*.bin");
  s = CheckConfinedPaths(a_, "");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(absl::StrContains(s.message(), "b.bin")) << s;
}

TEST_F(ConfinementTest, CheckpointReadsThroughALinkOutsideTheRootsAreRefused) {
  a_.mutable_spec()->mutable_eval()->set_checkpoint(dir_ + "/ckpt/named/escape");
  absl::Status s = CheckConfinedPaths(a_, "");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(absl::StartsWith(s.message(), "spec.eval.checkpoint: ")) << s;
  a_.mutable_spec()->mutable_eval()->clear_checkpoint();
  a_.mutable_spec()->mutable_checkpoint()->set_init_from(dir_ + "/ckpt/named/escape/step-1");
  s = CheckConfinedPaths(a_, "");
  EXPECT_TRUE(absl::StartsWith(s.message(), "spec.checkpoint.init_from: ")) << s;
}

TEST_F(ConfinementTest, DanglingLinkIsRefusedAndNoRootsMeansNoCheck) {
  fs::create_symlink(dir_ + "/nowhere", dir_ + "/ckpt/named/dangling");
  EXPECT_EQ(CheckConfinedPaths(a_, dir_ + "/ckpt/named/dangling").code(),
            absl::StatusCode::kPermissionDenied);
  mesa::v1::Assignment unconfined = a_;
  unconfined.clear_data_roots();
  unconfined.clear_checkpoint_root();
  unconfined.mutable_spec()->mutable_data()->set_train_path(dir_ + "/data/b.bin");
  EXPECT_TRUE(CheckConfinedPaths(unconfined, dir_ + "/ckpt/named/escape").ok());
}

// Owner-scoped paths at use: a link from alice's directory into bob's is refused for alice's job
// (checkpoint.dir, init_from, eval.checkpoint), her own directory is fine, and admins' jobs and
// jobs without an owner are not owner-scoped.
TEST_F(ConfinementTest, OwnerPathsRefuseLinksIntoAnotherUsersDirectory) {
  fs::create_directories(dir_ + "/ckpt/users/alice/mine");
  fs::create_directories(dir_ + "/ckpt/users/bob/run");
  fs::create_directory_symlink(dir_ + "/ckpt/users/bob/run", dir_ + "/ckpt/users/alice/link");
  const std::string mine = dir_ + "/ckpt/users/alice/mine";
  const std::string link = dir_ + "/ckpt/users/alice/link";
  a_.set_owner("alice");
  EXPECT_TRUE(CheckConfinedPaths(a_, mine).ok());
  absl::Status s = CheckConfinedPaths(a_, link);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "spec.checkpoint.dir")) << s;
  EXPECT_FALSE(absl::StrContains(s.message(), "bob")) << s;
  a_.mutable_spec()->mutable_checkpoint()->set_init_from(link + "/step-1");
  EXPECT_TRUE(absl::StrContains(CheckConfinedPaths(a_, mine).message(), "checkpoint.init_from"));
  a_.mutable_spec()->mutable_checkpoint()->clear_init_from();
  a_.mutable_spec()->mutable_eval()->set_checkpoint(link);
  EXPECT_TRUE(absl::StrContains(CheckConfinedPaths(a_, "").message(), "eval.checkpoint"));
  a_.set_owner_is_admin(true);
  EXPECT_TRUE(CheckConfinedPaths(a_, link).ok());
  a_.set_owner_is_admin(false);
  a_.set_owner("bob");
  EXPECT_TRUE(CheckConfinedPaths(a_, link).ok());
  a_.clear_owner();
  EXPECT_TRUE(CheckConfinedPaths(a_, link).ok());
}

TEST_F(ConfinementTest, CreateCheckpointDirMakesItBelowTheRoot) {
  const std::string dir = dir_ + "/ckpt/named/new/deeper";
  ASSERT_TRUE(CheckConfinedPaths(a_, dir).ok());
  absl::Status made = CreateCheckpointDir(a_, dir);
  ASSERT_TRUE(made.ok()) << made;
  EXPECT_TRUE(fs::is_directory(dir));
  EXPECT_TRUE(CreateCheckpointDir(a_, dir).ok());  // again: it exists
  EXPECT_TRUE(CreateCheckpointDir(a_, dir_ + "/ckpt/job-2").ok());
  EXPECT_EQ(CreateCheckpointDir(a_, dir_ + "/ckpt").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(CreateCheckpointDir(a_, dir_ + "/elsewhere").code(),
            absl::StatusCode::kPermissionDenied);
  mesa::v1::Assignment unconfined = a_;
  unconfined.clear_checkpoint_root();
  EXPECT_TRUE(CreateCheckpointDir(unconfined, dir_ + "/elsewhere/run").ok());
  EXPECT_TRUE(fs::is_directory(dir_ + "/elsewhere/run"));
}

// The check-to-use race: the spec's checkpoint.dir passes CheckConfinedPaths, then a component of
// it is swapped for a symbolic link (outside the root, into another job's directory, into another
// user's). Creating the directory afterwards is refused, and nothing is created at the target.
TEST_F(ConfinementTest, AComponentSwappedForALinkAfterTheCheckIsRefused) {
  fs::create_directories(dir_ + "/ckpt/named/run");
  const std::string dir = dir_ + "/ckpt/named/run/step-dir";
  struct Swap {
    std::string link;  // what ckpt/named becomes a link to
    std::string must_not_exist;
    std::string why;
  };
  const Swap swaps[] = {
      {dir_ + "/outside", dir_ + "/outside/run", "cannot be created below the checkpoint root"},
      // Relative, so it stays below the root (an absolute link is refused there in any case).
      {"job-1", dir_ + "/ckpt/job-1/run", "another job's directory"}};
  for (const Swap& swap : swaps) {
    SCOPED_TRACE(swap.link);
    ASSERT_TRUE(CheckConfinedPaths(a_, dir).ok());
    fs::rename(dir_ + "/ckpt/named", dir_ + "/ckpt/named.checked");
    fs::create_directory_symlink(swap.link, dir_ + "/ckpt/named");
    absl::Status made = CreateCheckpointDir(a_, dir);
    EXPECT_EQ(made.code(), absl::StatusCode::kPermissionDenied) << made;
    EXPECT_TRUE(absl::StartsWith(made.message(), "spec.checkpoint.dir: ")) << made;
    EXPECT_TRUE(absl::StrContains(made.message(), swap.why)) << made;
    EXPECT_FALSE(absl::StrContains(made.message(), dir_ + "/outside")) << made;
    EXPECT_FALSE(fs::exists(swap.must_not_exist));
    fs::remove(dir_ + "/ckpt/named");
    fs::rename(dir_ + "/ckpt/named.checked", dir_ + "/ckpt/named");
  }
  // Owner-scoped: alice's directory swapped for a link into bob's.
  fs::create_directories(dir_ + "/ckpt/users/alice/run");
  fs::create_directories(dir_ + "/ckpt/users/bob");
  a_.set_owner("alice");
  const std::string mine = dir_ + "/ckpt/users/alice/run/new";
  ASSERT_TRUE(CheckConfinedPaths(a_, mine).ok());
  fs::rename(dir_ + "/ckpt/users/alice/run", dir_ + "/ckpt/users/alice/run.checked");
  fs::create_directory_symlink("../bob", dir_ + "/ckpt/users/alice/run");
  absl::Status made = CreateCheckpointDir(a_, mine);
  EXPECT_EQ(made.code(), absl::StatusCode::kPermissionDenied) << made;
  EXPECT_TRUE(absl::StrContains(made.message(), "another user")) << made;
  EXPECT_FALSE(fs::exists(dir_ + "/ckpt/users/bob/new"));
}

}  // namespace
}  // namespace mesa::worker
