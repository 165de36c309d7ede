#include "base/memory_limit.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace mesa::base {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

std::string Fixture(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string root = std::string(tmp != nullptr ? tmp : "/tmp") + "/" + name;
  std::filesystem::remove_all(root);
  return root;
}

void Write(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << text;
}

TEST(MemoryLimitTest, CgroupV2LimitOfAParentLessItsUsageWins) {
  // Regression: the trainer compared against 90 % of physical RAM, ignoring a pod's limit.
  const std::string root = Fixture("v2");
  Write(root + "/proc/meminfo", "MemTotal: 67108864 kB\nMemAvailable:    8388608 kB\n");
  Write(root + "/proc/self/cgroup", "0::/kubepods/pod1/trainer\n");
  Write(root + "/cg/kubepods/pod1/trainer/memory.max", "max\n");
  Write(root + "/cg/kubepods/pod1/memory.max", std::to_string(2 * kGiB) + "\n");
  Write(root + "/cg/kubepods/pod1/memory.current", std::to_string(kGiB / 2) + "\n");
  const MemoryHeadroom got = AvailableMemory(
      {.proc_root = root + "/proc", .cgroup_root = root + "/cg", .use_rlimit = false});
  EXPECT_EQ(got.bytes, 3 * kGiB / 2);
  EXPECT_TRUE(
      absl::StrContains(got.source, "memory.max of " + root + "/cg/kubepods/pod1 (2048 MiB"))
      << got.source;
}

TEST(MemoryLimitTest, CgroupV1LimitAndMemAvailable) {
  const std::string root = Fixture("v1");
  Write(root + "/proc/meminfo", "MemAvailable:    524288 kB\n");  // 512 MiB
  Write(root + "/proc/self/cgroup", "5:devices:/\n4:memory:/process_api/abc\n0::/\n");
  Write(root + "/cg/memory/memory.limit_in_bytes", std::to_string(kGiB) + "\n");
  Write(root + "/cg/memory/memory.usage_in_bytes", std::to_string(kGiB / 4) + "\n");
  MemoryLimitPaths paths{
      .proc_root = root + "/proc", .cgroup_root = root + "/cg", .use_rlimit = false};
  MemoryHeadroom got = AvailableMemory(paths);
  EXPECT_EQ(got.bytes, 512LL << 20);  // MemAvailable is tighter than 768 MiB of cgroup room
  EXPECT_EQ(got.source, "the machine's MemAvailable");
  Write(root + "/proc/meminfo", "MemAvailable:    8388608 kB\n");
  got = AvailableMemory(paths);
  EXPECT_EQ(got.bytes, 3 * kGiB / 4);
  EXPECT_TRUE(absl::StrContains(got.source, "cgroup v1 memory.limit_in_bytes")) << got.source;
  // v1's "no limit" (a huge value) is no limit.
  Write(root + "/cg/memory/memory.limit_in_bytes", "9223372036854771712\n");
  EXPECT_EQ(AvailableMemory(paths).source, "the machine's MemAvailable");
}

TEST(MemoryLimitTest, ThisMachineAndARealAddressSpaceLimit) {
  const MemoryHeadroom here = AvailableMemory();
  EXPECT_GT(here.bytes, 0) << here.source;
  EXPECT_LT(here.bytes, int64_t{1} << 50) << here.source;
  // A child process with RLIMIT_AS: the limit is found and named.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    rlimit limit{static_cast<rlim_t>(64 * kGiB), static_cast<rlim_t>(64 * kGiB)};
    rlimit current;
    getrlimit(RLIMIT_AS, &current);
    if (current.rlim_cur != RLIM_INFINITY || setrlimit(RLIMIT_AS, &limit) != 0) _exit(2);
    // Only the tightest limit is named: compare against one the machine surely has less of.
    limit = {static_cast<rlim_t>(kGiB) * 1, static_cast<rlim_t>(64 * kGiB)};
    if (setrlimit(RLIMIT_AS, &limit) != 0) _exit(3);
    const MemoryHeadroom got = AvailableMemory();
    _exit(absl::StartsWith(got.source, "RLIMIT_AS (1024 MiB") && got.bytes < kGiB ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 2) GTEST_SKIP() << "RLIMIT_AS is already set here";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace mesa::base
