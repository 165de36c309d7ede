#include "spec/confined_paths.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "spec/testing.h"
#include "spec/validate_job_spec.h"

namespace mesa::spec {
namespace {

TEST(ConfinedPathsTest, NormalizesAndRefusesDotDot) {
  EXPECT_EQ(*NormalizeConfinedPath("/data//tiny/./train_*.bin"), "/data/tiny/train_*.bin");
  EXPECT_EQ(*NormalizeConfinedPath("/data/"), "/data");
  EXPECT_EQ(*NormalizeConfinedPath("//"), "/");
  EXPECT_FALSE(NormalizeConfinedPath("data/x").ok());
  EXPECT_FALSE(NormalizeConfinedPath("").ok());
  EXPECT_FALSE(NormalizeConfinedPath("/data/../etc/passwd").ok());
  EXPECT_FALSE(NormalizeConfinedPath("/data/.*/secret").ok());
  EXPECT_TRUE(NormalizeConfinedPath("/data/.hidden/x").ok());
  EXPECT_TRUE(NormalizeConfinedPath("/data/..x/y").ok());
}

TEST(ConfinedPathsTest, InsideRootIsByComponent) {
  EXPECT_TRUE(IsInsideRoot("/data", "/data"));
  EXPECT_TRUE(IsInsideRoot("/data/a", "/data"));
  EXPECT_FALSE(IsInsideRoot("/database/a", "/data"));
  EXPECT_FALSE(IsInsideRoot("/", "/data"));
  EXPECT_TRUE(IsInsideRoot("/anything", "/"));
}

TEST(ConfinedPathsTest, PerJobDirectoriesAreReserved) {
  EXPECT_EQ(CheckpointDirProblem("/ckpt/named/mine", "/ckpt", ""), "");
  EXPECT_EQ(CheckpointDirProblem("/ckpt/job-7", "/ckpt", "job-7"), "");
  EXPECT_TRUE(absl::StrContains(CheckpointDirProblem("/ckpt/job-7/x", "/ckpt", ""), "/ckpt/job-7"));
  // The hint names the place the owner rule lets a user write, never one it then refuses.
  const std::string hint = CheckpointDirProblem("/ckpt/job-7/x", "/ckpt", "");
  EXPECT_TRUE(absl::StrContains(hint, "below /ckpt/users/USER/")) << hint;
  EXPECT_FALSE(absl::StrContains(hint, "named")) << hint;
  EXPECT_FALSE(CheckpointDirProblem("/ckpt/job-7", "/ckpt", "job-8").empty());
  EXPECT_FALSE(CheckpointDirProblem("/ckpt", "/ckpt", "").empty());
}

TEST(ConfinedPathsTest, AreaOfTellsJobAndUserDirectories) {
  using Kind = CheckpointArea::Kind;
  EXPECT_EQ(AreaOf("/ckpt", "/ckpt").kind, Kind::kRoot);
  CheckpointArea job = AreaOf("/ckpt/job-7/step-100", "/ckpt");
  EXPECT_EQ(job.kind, Kind::kJob);
  EXPECT_EQ(job.name, "job-7");
  CheckpointArea user = AreaOf("/ckpt/users/alice/run1", "/ckpt");
  EXPECT_EQ(user.kind, Kind::kUser);
  EXPECT_EQ(user.name, "alice");
  EXPECT_EQ(AreaOf("/ckpt/users/alice", "/ckpt").name, "alice");
  EXPECT_EQ(AreaOf("/ckpt/users", "/ckpt").kind, Kind::kOther);
  EXPECT_EQ(AreaOf("/ckpt/named/x", "/ckpt").kind, Kind::kOther);
  EXPECT_EQ(AreaOf("/users/bob/x", "/").name, "bob");
  EXPECT_TRUE(IsPathComponent("alice"));
  EXPECT_FALSE(IsPathComponent(".."));
  EXPECT_FALSE(IsPathComponent("a/b"));
  EXPECT_FALSE(IsPathComponent(""));
}

TEST(ConfinedPathsTest, ResolvesSymlinksAndKeepsMissingComponents) {
  const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/resolve");
  std::filesystem::create_directories(dir + "/root/real");
  std::filesystem::create_directories(dir + "/outside");
  std::filesystem::create_directory_symlink(dir + "/outside", dir + "/root/escape");
  std::filesystem::create_symlink(dir + "/nowhere", dir + "/root/dangling");
  const std::string root = *ResolveExistingPrefix(dir + "/root");
  EXPECT_EQ(*ResolveExistingPrefix(dir + "/root/real/new/deeper"), root + "/real/new/deeper");
  const auto escaped = ResolveExistingPrefix(dir + "/root/escape/new");
  ASSERT_TRUE(escaped.ok()) << escaped.status();
  EXPECT_FALSE(IsInsideRoot(*escaped, root)) << *escaped;
  EXPECT_EQ(ResolveExistingPrefix(dir + "/root/dangling/x").status().code(),
            absl::StatusCode::kPermissionDenied);
}

// Two workers of one job make the same checkpoint directories at the same moment: a path whose
// parents another thread is creating resolves (as existing, or with its missing components kept),
// never as a dangling link. The writer makes 400 nested trees while the reader resolves into each.
TEST(ConfinedPathsTest, PathsBeingCreatedResolve) {
  const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/racing");
  std::filesystem::create_directories(dir);
  const std::string root = *ResolveExistingPrefix(dir);
  constexpr int kTrees = 400;
  std::thread writer([&] {
    for (int i = 0; i < kTrees; ++i) {
      std::filesystem::create_directories(absl::StrCat(dir, "/job-", i, "/a/b/c"));
    }
  });
  int failures = 0;
  std::string first_failure;
  for (int i = 0; i < kTrees; ++i) {
    for (int j = 0; j < 4; ++j) {
      const absl::StatusOr<std::string> r =
          ResolveExistingPrefix(absl::StrCat(dir, "/job-", i, "/a/b/c/d"));
      if (!r.ok() || *r != absl::StrCat(root, "/job-", i, "/a/b/c/d")) {
        if (failures++ == 0) first_failure = r.ok() ? *r : r.status().ToString();
      }
    }
  }
  writer.join();
  EXPECT_EQ(failures, 0) << first_failure;
}

TEST(ConfinedPathsTest, ValidatorNamesTheFieldOfAPathOutsideTheRoots) {
  ValidateOptions options{.require_absolute_paths = true,
                          .data_roots = {"/data", "/shared/corpora/"},
                          .checkpoint_root = "/ckpt"};
  mesa::v1::JobSpec s = ValidTrainSpec();
  EXPECT_TRUE(ValidateJobSpec(s, options).ok()) << ValidateJobSpec(s, options);
  s.mutable_checkpoint()->set_dir("/ckpt//named/./mine");
  s.mutable_checkpoint()->set_init_from("/ckpt/job-3/step-100");  // reading another's: allowed
  s.mutable_data()->set_val_path("/shared/corpora/val_*.bin, /data/v2.bin");
  EXPECT_TRUE(ValidateJobSpec(s, options).ok()) << ValidateJobSpec(s, options);

  auto problem = [&](void (*change)(mesa::v1::JobSpec&)) {
    mesa::v1::JobSpec t = s;
    change(t);
    return std::string(ValidateJobSpec(t, options).message());
  };
  EXPECT_EQ(problem([](auto& t) { t.mutable_checkpoint()->set_dir("/elsewhere/c"); }),
            "spec.checkpoint.dir: \"/elsewhere/c\" is outside the checkpoint root (/ckpt)");
  EXPECT_EQ(problem([](auto& t) { t.mutable_checkpoint()->set_dir("/ckpt/named/../../etc"); }),
            "spec.checkpoint.dir: must not have a \"..\" component, got \"/ckpt/named/../../etc\"");
  EXPECT_TRUE(absl::StartsWith(
      problem([](auto& t) { t.mutable_checkpoint()->set_dir("/ckpt/job-3/mine"); }),
      "spec.checkpoint.dir: \"/ckpt/job-3/mine\" is inside /ckpt/job-3, a per-job checkpoint"));
  EXPECT_TRUE(absl::StartsWith(problem([](auto& t) { t.mutable_checkpoint()->set_dir("/ckpt/"); }),
                               "spec.checkpoint.dir: \"/ckpt/\" must be a directory below"));
  EXPECT_EQ(
      problem([](auto& t) { t.mutable_data()->set_train_path("/data/a.bin,/etc/b.bin"); }),
      "spec.data.train_path: \"/etc/b.bin\" is outside the data roots (/data, /shared/corpora)");
  EXPECT_EQ(problem([](auto& t) { t.mutable_data()->set_train_path("/data/.*/x"); }),
            "spec.data.train_path: must not have a component that starts with \".\" and has a "
            "wildcard (it could match \"..\"), got \"/data/.*/x\"");
  EXPECT_EQ(problem([](auto& t) { t.mutable_data()->set_train_path("/database/a.bin"); }),
            "spec.data.train_path: \"/database/a.bin\" is outside the data roots (/data, "
            "/shared/corpora)");
  EXPECT_EQ(problem([](auto& t) { t.mutable_checkpoint()->set_init_from("/home/x"); }),
            "spec.checkpoint.init_from: \"/home/x\" is outside the data roots or the checkpoint "
            "root (/data, /shared/corpora, /ckpt)");
  // A relative path is reported once, as before.
  EXPECT_TRUE(absl::StartsWith(
      problem([](auto& t) { t.mutable_data()->set_train_path("rel/a.bin"); }),
      "spec.data.train_path: must be an absolute path (the trainer runs on a worker"));

  mesa::v1::JobSpec eval = ValidEvalSpec();
  eval.mutable_eval()->set_checkpoint("/tmp/x");
  EXPECT_TRUE(absl::StrContains(ValidateJobSpec(eval, options).message(),
                                "spec.eval.checkpoint: \"/tmp/x\" is outside"));
}

TEST(ConfinedPathsTest, EachRootConfinesOnlyItsFields) {
  mesa::v1::JobSpec s = ValidTrainSpec();
  s.mutable_checkpoint()->set_dir("/anywhere");
  EXPECT_TRUE(ValidateJobSpec(s, {.data_roots = {"/data"}}).ok());
  s.mutable_data()->set_train_path("/elsewhere/a.bin");
  s.mutable_checkpoint()->set_dir("/ckpt/named/x");
  EXPECT_TRUE(ValidateJobSpec(s, {.checkpoint_root = "/ckpt"}).ok());
  EXPECT_TRUE(ValidateJobSpec(s).ok());
}

}  // namespace
}  // namespace mesa::spec
