#include "worker/process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace mesa::worker {
namespace {

struct Collected {
  absl::Mutex mu;
  std::vector<std::pair<Stream, std::string>> lines;
  std::vector<std::string> Of(Stream stream) {
    absl::MutexLock lock(&mu);
    std::vector<std::string> out;
    for (const auto& [s, line] : lines) {
      if (s == stream) out.push_back(line);
    }
    return out;
  }
};

std::unique_ptr<Subprocess> Shell(const std::string& script, Collected& collected,
                                  std::vector<std::string> env = {"PATH=/usr/bin:/bin"},
                                  std::string cwd = "") {
  SpawnOptions options;
  options.argv = {"/bin/sh", "-c", script};
  options.env = std::move(env);
  options.cwd = std::move(cwd);
  options.events_fd = 3;
  auto process = Subprocess::Spawn(options, [&collected](Stream stream, std::string line) {
    absl::MutexLock lock(&collected.mu);
    collected.lines.emplace_back(stream, std::move(line));
  });
  EXPECT_TRUE(process.ok()) << process.status();
  return process.ok() ? std::move(*process) : nullptr;
}

TEST(ProcessTest, CapturesStdoutStderrAndEventsLineByLine) {
  Collected collected;
  auto process = Shell(
      "echo out1; echo err1 >&2; echo '{\"event\":\"step\"}' >&3; printf 'out2\\npartial'; "
      "exit 0",
      collected);
  const int status = process->Wait();
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(collected.Of(Stream::kStdout), (std::vector<std::string>{"out1", "out2", "partial"}));
  EXPECT_EQ(collected.Of(Stream::kStderr), (std::vector<std::string>{"err1"}));
  EXPECT_EQ(collected.Of(Stream::kEvents), (std::vector<std::string>{"{\"event\":\"step\"}"}));
}

TEST(ProcessTest, ExitCodeEnvAndWorkingDirectory) {
  const std::string dir = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp");
  Collected collected;
  auto process = Shell("echo $MESA_RANK; pwd; exit 7", collected,
                       {"PATH=/usr/bin:/bin", "MESA_RANK=3"}, dir);
  const int status = process->Wait();
  EXPECT_EQ(WEXITSTATUS(status), 7);
  const auto out = collected.Of(Stream::kStdout);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0], "3");
  EXPECT_EQ(std::filesystem::canonical(out[1]), std::filesystem::canonical(dir));
}

TEST(ProcessTest, SigtermHandledExitsCleanly) {
  Collected collected;
  auto process = Shell(
      "trap 'echo stopping; echo \"{\\\"event\\\":\\\"stopped\\\"}\" >&3; exit 0' TERM; "
      "echo ready; while true; do sleep 0.05; done",
      collected);
  // Wait until the trap is installed.
  for (int i = 0; i < 200 && collected.Of(Stream::kStdout).empty(); ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  const absl::Time start = absl::Now();
  const int status = process->Terminate(absl::Seconds(10));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(collected.Of(Stream::kEvents), (std::vector<std::string>{"{\"event\":\"stopped\"}"}));
}

TEST(ProcessTest, SigkillAfterGraceWhenSigtermIgnored) {
  Collected collected;
  auto process = Shell("trap '' TERM; echo ready; while true; do sleep 0.05; done", collected);
  for (int i = 0; i < 200 && collected.Of(Stream::kStdout).empty(); ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  const absl::Time start = absl::Now();
  const int status = process->Terminate(absl::Milliseconds(500));
  const absl::Duration took = absl::Now() - start;
  EXPECT_GE(took, absl::Milliseconds(450));
  EXPECT_LT(took, absl::Seconds(5));
  ASSERT_TRUE(WIFSIGNALED(status)) << status;
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
}

TEST(ProcessTest, GrandchildrenAreKilledWithTheGroup) {
  Collected collected;
  // The background sleeper keeps stdout open; it must not keep the process "running".
  auto process = Shell("sleep 1000 & echo $!; exit 0", collected);
  const auto status = process->WaitFor(absl::Seconds(10));
  ASSERT_TRUE(status.has_value());
  const auto out = collected.Of(Stream::kStdout);
  ASSERT_EQ(out.size(), 1u);
  const pid_t grandchild = std::atoi(out[0].c_str());
  bool gone = false;
  for (int i = 0; i < 200 && !gone; ++i) {
    // Not our child, so it becomes a zombie of init and disappears, or kill() fails.
    gone = kill(grandchild, 0) != 0;
    if (!gone) absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(gone);
}

TEST(ProcessTest, MissingProgramFailsToSpawn) {
  SpawnOptions options;
  options.argv = {"/nonexistent/mesa-train"};
  auto process = Subprocess::Spawn(options, nullptr);
  EXPECT_FALSE(process.ok());
  options.argv = {"no-such-program-anywhere"};
  EXPECT_FALSE(Subprocess::Spawn(options, nullptr).ok());
}

TEST(ProcessTest, BadWorkingDirectoryFailsToSpawn) {
  SpawnOptions options;
  options.argv = {"/bin/true"};
  options.cwd = "/nonexistent/dir";
  auto process = Subprocess::Spawn(options, nullptr);
  ASSERT_FALSE(process.ok());
  EXPECT_NE(process.status().message().find("/nonexistent/dir"), std::string::npos);
}

// The stdout lines of a shell script run with 4096-byte lines.
std::vector<std::string> StdoutLinesOf(const std::string& script) {
  Collected collected;
  SpawnOptions options;
  options.argv = {"/bin/sh", "-c", script};
  options.env = {"PATH=/usr/bin:/bin"};
  options.max_line_bytes = 4096;
  auto process = Subprocess::Spawn(options, [&collected](Stream stream, std::string line) {
    absl::MutexLock lock(&collected.mu);
    collected.lines.emplace_back(stream, std::move(line));
  });
  EXPECT_TRUE(process.ok()) << process.status();
  if (!process.ok()) return {};
  (*process)->Wait();
  return collected.Of(Stream::kStdout);
}

TEST(ProcessTest, LongLinesAreSplit) {
  const auto out = StdoutLinesOf("head -c 10000 /dev/zero | tr '\\0' x; echo");
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].size(), 4096u);
  EXPECT_EQ(out[2].size(), 10000u - 2 * 4096u);
}

TEST(ProcessTest, LongLineArrivingWholeIsSplit) {
  // The whole line and its newline are in the pipe before the reader looks: one read gets both.
  const auto out = StdoutLinesOf("printf '%s\\n' \"$(head -c 10000 /dev/zero | tr '\\0' y)\"");
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0], std::string(4096, 'y'));
  EXPECT_EQ(out[2].size(), 10000u - 2 * 4096u);
}

}  // namespace
}  // namespace mesa::worker
