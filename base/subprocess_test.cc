#include "base/subprocess.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace mesa::base {
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

TEST(SubprocessTest, CapturesStdoutStderrAndEventsLineByLine) {
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

TEST(SubprocessTest, ExitCodeEnvAndWorkingDirectory) {
  const std::string dir = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp");
  Collected collected;
  auto process =
      Shell("echo $MESA_RANK; pwd; exit 7", collected, {"PATH=/usr/bin:/bin", "MESA_RANK=3"}, dir);
  const int status = process->Wait();
  EXPECT_EQ(WEXITSTATUS(status), 7);
  const auto out = collected.Of(Stream::kStdout);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0], "3");
  EXPECT_EQ(std::filesystem::canonical(out[1]), std::filesystem::canonical(dir));
}

TEST(SubprocessTest, SigtermHandledExitsCleanly) {
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

TEST(SubprocessTest, SigkillAfterGraceWhenSigtermIgnored) {
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

TEST(SubprocessTest, GrandchildrenAreKilledWithTheGroup) {
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

TEST(SubprocessTest, MissingProgramFailsToSpawn) {
  SpawnOptions options;
  options.argv = {"/nonexistent/mesa-train"};
  auto process = Subprocess::Spawn(options, nullptr);
  EXPECT_FALSE(process.ok());
  options.argv = {"no-such-program-anywhere"};
  EXPECT_FALSE(Subprocess::Spawn(options, nullptr).ok());
}

TEST(SubprocessTest, BadWorkingDirectoryFailsToSpawn) {
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

TEST(SubprocessTest, LongLinesAreSplit) {
  const auto out = StdoutLinesOf("head -c 10000 /dev/zero | tr '\\0' x; echo");
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].size(), 4096u);
  EXPECT_EQ(out[2].size(), 10000u - 2 * 4096u);
}

TEST(SubprocessTest, LongLineArrivingWholeIsSplit) {
  // The whole line and its newline are in the pipe before the reader looks: one read gets both.
  const auto out = StdoutLinesOf("printf '%s\\n' \"$(head -c 10000 /dev/zero | tr '\\0' y)\"");
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0], std::string(4096, 'y'));
  EXPECT_EQ(out[2].size(), 10000u - 2 * 4096u);
}

// Runs `script` with `options` (argv and env filled in) to its end, collecting lines and raw
// output.
struct ScriptRun {
  Collected lines;
  absl::Mutex mu;
  std::string raw[3];
  int ends[3] = {0, 0, 0};
  int status = -1;
};

void RunScript(const std::string& script, SpawnOptions options, ScriptRun& run) {
  options.argv = {"/bin/sh", "-c", script};
  options.env = {"PATH=/usr/bin:/bin"};
  options.on_output = [&run](Stream stream, absl::string_view data) {
    absl::MutexLock lock(&run.mu);
    const int i = static_cast<int>(stream);
    if (data.empty()) {
      ++run.ends[i];
    } else {
      run.raw[i].append(data.data(), data.size());
    }
  };
  auto process = Subprocess::Spawn(options, [&run](Stream stream, std::string line) {
    absl::MutexLock lock(&run.lines.mu);
    run.lines.lines.emplace_back(stream, std::move(line));
  });
  ASSERT_TRUE(process.ok()) << process.status();
  run.status = (*process)->Wait();
}

TEST(SubprocessTest, EventLinesHaveTheirOwnBound) {
  SpawnOptions options;
  options.events_fd = 3;
  options.max_line_bytes = 4096;
  options.max_event_line_bytes = 1 << 20;
  ScriptRun run;
  RunScript("line=$(head -c 300000 /dev/zero | tr '\\0' e); echo \"$line\" >&3; echo \"$line\"",
            options, run);
  const std::vector<std::string> events = run.lines.Of(Stream::kEvents);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0], std::string(300000, 'e'));
  EXPECT_EQ(run.lines.Of(Stream::kStdout).size(), 74u);  // ceil(300000 / 4096)
}

TEST(SubprocessTest, StdinDataIsFedWhole) {
  SpawnOptions options;
  options.stdin_data = std::string(3 << 20, 'i');  // far more than a pipe holds
  options.stdin_data += "\nlast line\n";
  ScriptRun run;
  RunScript("wc -c", options, run);
  ASSERT_TRUE(WIFEXITED(run.status));
  EXPECT_EQ(run.lines.Of(Stream::kStdout),
            (std::vector<std::string>{absl::StrCat(options.stdin_data.size())}));
  ScriptRun echo;
  options.stdin_data = "one\ntwo";
  RunScript("cat", options, echo);
  EXPECT_EQ(echo.raw[0], "one\ntwo");
}

TEST(SubprocessTest, UnreadStdinIsNoError) {
  SpawnOptions options;
  options.stdin_data = std::string(3 << 20, 'i');
  ScriptRun run;
  // The child exits at once; writing the rest raises SIGPIPE/EPIPE, which must not kill us.
  RunScript("exec 0<&-; echo closed", options, run);
  ASSERT_TRUE(WIFEXITED(run.status));
  EXPECT_EQ(WEXITSTATUS(run.status), 0);
  EXPECT_EQ(run.lines.Of(Stream::kStdout), (std::vector<std::string>{"closed"}));
}

TEST(SubprocessTest, WithoutStdinDataStdinIsEmpty) {
  ScriptRun run;
  RunScript("wc -c", SpawnOptions(), run);
  EXPECT_EQ(run.lines.Of(Stream::kStdout), (std::vector<std::string>{"0"}));
}

TEST(SubprocessTest, StderrToStdoutInterleaves) {
  SpawnOptions options;
  options.stderr_to_stdout = true;
  ScriptRun run;
  RunScript("echo a; echo b >&2; echo c", options, run);
  EXPECT_EQ(run.lines.Of(Stream::kStdout), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_TRUE(run.lines.Of(Stream::kStderr).empty());
  EXPECT_EQ(run.ends[0], 1);
  EXPECT_EQ(run.ends[1], 0);  // no stderr pipe at all
}

TEST(SubprocessTest, RawOutputAndEndOfStream) {
  ScriptRun run;
  RunScript(
      "printf 'x\ny'; printf 'e\n' >&2; printf '' >&3",
      [] {
        SpawnOptions options;
        options.events_fd = 3;
        return options;
      }(),
      run);
  absl::MutexLock lock(&run.mu);
  EXPECT_EQ(run.raw[0], "x\ny");
  EXPECT_EQ(run.raw[1], "e\n");
  EXPECT_EQ(run.raw[2], "");
  EXPECT_EQ(run.ends[0], 1);
  EXPECT_EQ(run.ends[1], 1);
  EXPECT_EQ(run.ends[2], 1);
  EXPECT_EQ(run.lines.Of(Stream::kStdout), (std::vector<std::string>{"x", "y"}));
}

TEST(SubprocessTest, InheritedEnvironment) {
  setenv("MESA_SUBPROCESS_TEST_DROP", "1", 1);
  setenv("MESA_SUBPROCESS_TEST_KEEP", "1", 1);
  const std::vector<std::string> env = InheritedEnvironment(
      {"MESA_SUBPROCESS_TEST_KEEP=2", "MESA_SUBPROCESS_TEST_DROP=3", "MESA_SUBPROCESS_TEST_NEW=4"},
      {"MESA_SUBPROCESS_TEST_D"});
  auto count = [&env](const std::string& var) { return std::count(env.begin(), env.end(), var); };
  EXPECT_EQ(count("MESA_SUBPROCESS_TEST_KEEP=2"), 1);
  EXPECT_EQ(count("MESA_SUBPROCESS_TEST_KEEP=1"), 0);
  EXPECT_EQ(count("MESA_SUBPROCESS_TEST_DROP=1"), 0);
  EXPECT_EQ(count("MESA_SUBPROCESS_TEST_DROP=3"), 1);  // overrides are never dropped
  EXPECT_EQ(count("MESA_SUBPROCESS_TEST_NEW=4"), 1);
  EXPECT_EQ(count(std::string("PATH=") + getenv("PATH")), 1);
}

}  // namespace
}  // namespace mesa::base
