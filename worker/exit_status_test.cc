#include "worker/exit_status.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gtest/gtest.h"

namespace mesa::worker {
namespace {

using mesa::v1::ATTEMPT_PHASE_FAILED;
using mesa::v1::ATTEMPT_PHASE_STOPPED;
using mesa::v1::ATTEMPT_PHASE_SUCCEEDED;
using mesa::v1::FAILURE_KIND_INFRA;
using mesa::v1::FAILURE_KIND_USER;

// Real wait statuses from real children, so the test does not depend on the encoding.
int StatusOfExit(int code) {
  const pid_t pid = fork();
  if (pid == 0) _exit(code);
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

int StatusOfSignal(int sig) {
  const pid_t pid = fork();
  if (pid == 0) {
    signal(sig, SIG_DFL);
    raise(sig);
    _exit(100);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

TEST(ExitStatusTest, ZeroIsSuccess) {
  const ExitOutcome outcome = ClassifyExit(StatusOfExit(0), {});
  EXPECT_EQ(outcome.phase, ATTEMPT_PHASE_SUCCEEDED);
}

TEST(ExitStatusTest, ZeroAfterStopIsStopped) {
  ExitContext context;
  context.stop_requested = true;
  EXPECT_EQ(ClassifyExit(StatusOfExit(0), context).phase, ATTEMPT_PHASE_STOPPED);
  ExitContext event_only;
  event_only.stopped_event = true;
  EXPECT_EQ(ClassifyExit(StatusOfExit(0), event_only).phase, ATTEMPT_PHASE_STOPPED);
}

TEST(ExitStatusTest, UserErrorCodeIsUserFailure) {
  const ExitOutcome outcome = ClassifyExit(StatusOfExit(kTrainerUserErrorExitCode), {});
  EXPECT_EQ(outcome.phase, ATTEMPT_PHASE_FAILED);
  EXPECT_EQ(outcome.failure_kind, FAILURE_KIND_USER);
  EXPECT_NE(outcome.message.find("exit code 2"), std::string::npos) << outcome.message;
}

TEST(ExitStatusTest, DivergedLossIsUserFailure) {
  const ExitOutcome outcome = ClassifyExit(StatusOfExit(kTrainerDivergedExitCode), {});
  EXPECT_EQ(outcome.phase, ATTEMPT_PHASE_FAILED);
  EXPECT_EQ(outcome.failure_kind, FAILURE_KIND_USER);
}

TEST(ExitStatusTest, OtherCodesAreInfra) {
  for (int code : {1, 4, 127, 255}) {
    const ExitOutcome outcome = ClassifyExit(StatusOfExit(code), {});
    EXPECT_EQ(outcome.phase, ATTEMPT_PHASE_FAILED) << code;
    EXPECT_EQ(outcome.failure_kind, FAILURE_KIND_INFRA) << code;
  }
}

TEST(ExitStatusTest, SignalsAreInfra) {
  for (int sig : {SIGKILL, SIGSEGV, SIGBUS, SIGABRT, SIGTERM}) {
    const ExitOutcome outcome = ClassifyExit(StatusOfSignal(sig), {});
    EXPECT_EQ(outcome.phase, ATTEMPT_PHASE_FAILED) << sig;
    EXPECT_EQ(outcome.failure_kind, FAILURE_KIND_INFRA) << sig;
  }
  const ExitOutcome killed = ClassifyExit(StatusOfSignal(SIGKILL), {});
  EXPECT_NE(killed.message.find("SIGKILL"), std::string::npos) << killed.message;
  EXPECT_NE(killed.message.find("out of memory"), std::string::npos) << killed.message;
  const ExitOutcome segv = ClassifyExit(StatusOfSignal(SIGSEGV), {});
  EXPECT_NE(segv.message.find("SIGSEGV"), std::string::npos) << segv.message;
}

TEST(ExitStatusTest, KilledAfterGraceWhileStoppingIsStopped) {
  ExitContext context;
  context.stop_requested = true;
  const ExitOutcome outcome = ClassifyExit(StatusOfSignal(SIGKILL), context);
  EXPECT_EQ(outcome.phase, ATTEMPT_PHASE_STOPPED);
  EXPECT_NE(outcome.message.find("grace"), std::string::npos) << outcome.message;
}

TEST(ExitStatusTest, CombineOutcomesPrefersUserThenInfraThenStopped) {
  ExitOutcome ok;
  ok.phase = ATTEMPT_PHASE_SUCCEEDED;
  ExitOutcome stopped;
  stopped.phase = ATTEMPT_PHASE_STOPPED;
  ExitOutcome infra;
  infra.phase = ATTEMPT_PHASE_FAILED;
  infra.failure_kind = FAILURE_KIND_INFRA;
  infra.message = "infra";
  ExitOutcome user;
  user.phase = ATTEMPT_PHASE_FAILED;
  user.failure_kind = FAILURE_KIND_USER;
  user.message = "user";
  EXPECT_EQ(CombineOutcomes({ok, ok}).phase, ATTEMPT_PHASE_SUCCEEDED);
  EXPECT_EQ(CombineOutcomes({ok, stopped}).phase, ATTEMPT_PHASE_STOPPED);
  EXPECT_EQ(CombineOutcomes({stopped, infra}).message, "infra");
  EXPECT_EQ(CombineOutcomes({infra, user, stopped}).message, "user");
}

}  // namespace
}  // namespace mesa::worker
