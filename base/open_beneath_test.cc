#include "base/open_beneath.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace mesa::base {
namespace {

namespace fs = std::filesystem;

std::string Read(int fd) {
  char buffer[64];
  const ssize_t n = pread(fd, buffer, sizeof(buffer), 0);
  return n > 0 ? std::string(buffer, n) : "";
}

// <tmp>/root/a/b/file (inside), <tmp>/outside/b/file and <tmp>/outside/secret; root/in is a link
// to a (inside the root), root/out a link to <tmp>/outside. Each test runs with openat2 and with
// the component walk that replaces it on old kernels (GetParam()).
class OpenBeneathTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    ForceOpenBeneathFallbackForTest(GetParam());
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = info->name();  // "Test/Openat2": one directory per test and mode
    std::replace(name.begin(), name.end(), '/', '_');
    dir_ = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
    fs::remove_all(dir_);
    fs::create_directories(dir_ + "/root/a/b");
    fs::create_directories(dir_ + "/outside/b");
    std::ofstream(dir_ + "/root/a/b/file") << "inside";
    std::ofstream(dir_ + "/outside/b/file") << "outside";
    fs::create_directory_symlink("a", dir_ + "/root/in");
    fs::create_directory_symlink(dir_ + "/outside", dir_ + "/root/out");
    root_ = open((dir_ + "/root").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(root_, 0);
  }
  void TearDown() override {
    close(root_);
    ForceOpenBeneathFallbackForTest(false);
  }
  bool walk() const { return GetParam(); }
  std::string dir_;
  int root_ = -1;
};

TEST_P(OpenBeneathTest, OpensBelowTheRootAndNotOutside) {
  absl::StatusOr<UniqueFd> fd = OpenBeneath(root_, "a/b/file", O_RDONLY);
  ASSERT_TRUE(fd.ok()) << fd.status();
  EXPECT_EQ(Read(fd->get()), "inside");
  absl::StatusOr<UniqueFd> out = OpenBeneath(root_, "out/b/file", O_RDONLY);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kPermissionDenied) << out.status();
  EXPECT_EQ(out.status().message().find(dir_ + "/outside"), std::string::npos);  // no target
  EXPECT_EQ(OpenBeneath(root_, "../outside/b/file", O_RDONLY).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenBeneath(root_, "a/missing", O_RDONLY).status().code(), absl::StatusCode::kNotFound);
  // A link that stays inside the root is followed by openat2; the walk follows no link.
  absl::StatusOr<UniqueFd> in = OpenBeneath(root_, "in/b/file", O_RDONLY);
  if (walk()) {
    EXPECT_EQ(in.status().code(), absl::StatusCode::kPermissionDenied) << in.status();
  } else {
    ASSERT_TRUE(in.ok()) << in.status();
    EXPECT_EQ(Read(in->get()), "inside");
  }
}

// The race this closes: a path checked (here: opened fine), then a component swapped for a
// symbolic link pointing outside. Opening by path would now read the outside file; opening
// below the root refuses.
TEST_P(OpenBeneathTest, AComponentSwappedForALinkOutsideIsRefused) {
  ASSERT_TRUE(OpenBeneath(root_, "a/b/file", O_RDONLY).ok());
  fs::rename(dir_ + "/root/a", dir_ + "/root/a.old");
  fs::create_directory_symlink(dir_ + "/outside", dir_ + "/root/a");
  std::string by_path;
  std::ifstream(dir_ + "/root/a/b/file") >> by_path;
  EXPECT_EQ(by_path, "outside");  // what a later open(path) would get
  absl::StatusOr<UniqueFd> fd = OpenBeneath(root_, "a/b/file", O_RDONLY);
  EXPECT_EQ(fd.status().code(), absl::StatusCode::kPermissionDenied) << fd.status();
}

TEST_P(OpenBeneathTest, MakeDirsCreatesBelowTheRootOnly) {
  absl::StatusOr<UniqueFd> made = MakeDirsBeneath(root_, "a/x/y", 0755);
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_TRUE(fs::is_directory(dir_ + "/root/a/x/y"));
  absl::StatusOr<std::string> where = FdPath(made->get());
  ASSERT_TRUE(where.ok()) << where.status();
  EXPECT_EQ(*where, fs::canonical(dir_ + "/root/a/x/y").string());
  // Through a link outside: refused before anything is created there.
  absl::StatusOr<UniqueFd> out = MakeDirsBeneath(root_, "out/new/deeper", 0755);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kPermissionDenied) << out.status();
  EXPECT_FALSE(fs::exists(dir_ + "/outside/new"));
  // The check sees every directory on the way and can stop the walk.
  int checked = 0;
  absl::StatusOr<UniqueFd> stopped =
      MakeDirsBeneath(root_, "a/p/q", 0755, [&](int fd) -> absl::Status {
        absl::StatusOr<std::string> path = FdPath(fd);
        if (!path.ok()) return path.status();
        ++checked;
        if (absl::EndsWith(*path, "/p")) return absl::PermissionDeniedError("not p");
        return absl::OkStatus();
      });
  EXPECT_EQ(stopped.status().message(), "not p");
  EXPECT_EQ(checked, 2);
  EXPECT_FALSE(fs::exists(dir_ + "/root/a/p/q"));
}

INSTANTIATE_TEST_SUITE_P(Openat2AndWalk, OpenBeneathTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "ComponentWalk" : "Openat2";
                         });

}  // namespace
}  // namespace mesa::base
