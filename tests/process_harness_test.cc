#include "tests/process_harness.h"

#include <signal.h>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace mesa::testing {
namespace {

TEST(ProcessHarness, ReadsListenAddressAndKills) {
  auto p = Process::Start("/bin/sh", {"-c",
                                      "echo starting; echo oops >&2; "
                                      "echo 'listening on 127.0.0.1:4321'; exec sleep 30"});
  ASSERT_TRUE(p.ok()) << p.status();
  absl::StatusOr<std::string> address = WaitForListenAddress(**p, absl::Seconds(5));
  ASSERT_TRUE(address.ok()) << address.status();
  EXPECT_EQ(*address, "127.0.0.1:4321");
  absl::Time start = absl::Now();
  absl::StatusOr<int> status = (*p)->Kill();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, -SIGKILL);
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  EXPECT_TRUE(absl::StrContains((*p)->Stderr(), "oops"));
}

TEST(ProcessHarness, WaitForLineIsBounded) {
  auto p = Process::Start("/bin/sh", {"-c", "echo nothing; exec sleep 30"});
  ASSERT_TRUE(p.ok()) << p.status();
  absl::Time start = absl::Now();
  absl::StatusOr<std::string> line = (*p)->WaitForLinePrefix("never", absl::Milliseconds(300));
  EXPECT_EQ(line.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  // Wait is bounded too.
  EXPECT_EQ((*p)->Wait(absl::Milliseconds(100)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST(ProcessHarness, ClosedStdoutEndsTheWait) {
  auto p = Process::Start("/bin/sh", {"-c", "echo a; exit 3"});
  ASSERT_TRUE(p.ok()) << p.status();
  absl::StatusOr<std::string> line = (*p)->WaitForLinePrefix("never", absl::Seconds(10));
  EXPECT_EQ(line.status().code(), absl::StatusCode::kUnavailable);
  absl::StatusOr<int> status = (*p)->Wait(absl::Seconds(5));
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(*status, 3);
}

TEST(ProcessHarness, RunProcessCapturesOutputStdinAndEnv) {
  Process::Options options;
  options.stdin_data = "from stdin\n";
  options.env = {"MESA_TEST_VALUE=42"};
  auto r = RunProcess("/bin/sh", {"-c", "cat; echo \"v=$MESA_TEST_VALUE\"; echo err >&2; exit 5"},
                      absl::Seconds(10), options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_status, 5);
  EXPECT_EQ(r->out, "from stdin\nv=42\n");
  EXPECT_EQ(r->err, "err\n");
}

TEST(ProcessHarness, RunProcessTimesOut) {
  absl::Time start = absl::Now();
  auto r = RunProcess("/bin/sh", {"-c", "exec sleep 30"}, absl::Milliseconds(200));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(ProcessHarness, TerminateSendsSigterm) {
  auto p = Process::Start("/bin/sh", {"-c",
                                      "trap 'echo got-term; exit 7' TERM; echo ready; "
                                      "while true; do sleep 0.05; done"});
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE((*p)->WaitForLinePrefix("ready", absl::Seconds(5)).ok());
  absl::StatusOr<int> status = (*p)->Terminate(absl::Seconds(5));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, 7);
  EXPECT_TRUE(absl::StrContains((*p)->Stdout(), "got-term"));
}

TEST(ProcessHarness, MissingBinaryIsAnError) {
  EXPECT_FALSE(Process::Start("/nonexistent/binary", {}).ok());
}

}  // namespace
}  // namespace mesa::testing
