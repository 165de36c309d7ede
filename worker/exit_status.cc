#include "worker/exit_status.h"

#include <signal.h>
#include <string.h>
#include <sys/wait.h>

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace mesa::worker {
namespace {

std::string SignalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? absl::StrCat("SIG", abbrev) : absl::StrCat("signal ", sig);
}

}  // namespace

std::string DescribeWaitStatus(int wait_status) {
  if (WIFEXITED(wait_status)) return absl::StrCat("exit code ", WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    const int sig = WTERMSIG(wait_status);
    return absl::StrCat("killed by signal ", sig, " (", SignalName(sig), ")",
                        WCOREDUMP(wait_status) ? ", core dumped" : "");
  }
  return absl::StrCat("wait status ", wait_status);
}

ExitOutcome ClassifyExit(int wait_status, const ExitContext& context) {
  ExitOutcome outcome;
  const std::string how = DescribeWaitStatus(wait_status);
  if (WIFEXITED(wait_status)) {
    const int code = WEXITSTATUS(wait_status);
    if (code == 0) {
      // A trainer that stops on SIGTERM checkpoints and exits 0 after a "stopped" event.
      if (context.stop_requested || context.stopped_event) {
        outcome.phase = mesa::v1::ATTEMPT_PHASE_STOPPED;
        outcome.message = "trainer stopped after checkpointing";
      } else {
        outcome.phase = mesa::v1::ATTEMPT_PHASE_SUCCEEDED;
      }
      return outcome;
    }
    if (context.stop_requested) {
      // Exiting non-zero while being stopped still ends the attempt as requested.
      outcome.phase = mesa::v1::ATTEMPT_PHASE_STOPPED;
      outcome.message = absl::StrCat("trainer stopped (", how, ")");
      return outcome;
    }
    outcome.phase = mesa::v1::ATTEMPT_PHASE_FAILED;
    const bool user = std::find(context.user_error_codes.begin(), context.user_error_codes.end(),
                                code) != context.user_error_codes.end();
    outcome.failure_kind = user ? mesa::v1::FAILURE_KIND_USER : mesa::v1::FAILURE_KIND_INFRA;
    outcome.message = absl::StrCat("trainer failed: ", how);
    return outcome;
  }
  if (WIFSIGNALED(wait_status)) {
    const int sig = WTERMSIG(wait_status);
    if (context.stop_requested) {
      // SIGKILL after the grace period, or death by our own SIGTERM: stopped, but maybe without
      // a final checkpoint (the periodic ones remain).
      outcome.phase = mesa::v1::ATTEMPT_PHASE_STOPPED;
      outcome.message =
          absl::StrCat("trainer stopped: ", how, sig == SIGKILL ? " after the grace period" : "");
      return outcome;
    }
    outcome.phase = mesa::v1::ATTEMPT_PHASE_FAILED;
    outcome.failure_kind = mesa::v1::FAILURE_KIND_INFRA;
    std::string hint;
    if (sig == SIGKILL) hint = "; out of memory (OOM killer) or killed externally";
    if (sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE || sig == SIGABRT) {
      hint = "; trainer crashed (device or kernel fault?)";
    }
    outcome.message = absl::StrCat("trainer ", how, hint);
    return outcome;
  }
  outcome.phase = mesa::v1::ATTEMPT_PHASE_FAILED;
  outcome.failure_kind = mesa::v1::FAILURE_KIND_INFRA;
  outcome.message = absl::StrCat("trainer ended with ", how);
  return outcome;
}

ExitOutcome CombineOutcomes(const std::vector<ExitOutcome>& ranks) {
  auto find = [&](auto predicate) { return std::find_if(ranks.begin(), ranks.end(), predicate); };
  if (auto it = find([](const ExitOutcome& o) {
        return o.phase == mesa::v1::ATTEMPT_PHASE_FAILED &&
               o.failure_kind == mesa::v1::FAILURE_KIND_USER;
      });
      it != ranks.end()) {
    return *it;
  }
  if (auto it =
          find([](const ExitOutcome& o) { return o.phase == mesa::v1::ATTEMPT_PHASE_FAILED; });
      it != ranks.end()) {
    return *it;
  }
  if (auto it =
          find([](const ExitOutcome& o) { return o.phase == mesa::v1::ATTEMPT_PHASE_STOPPED; });
      it != ranks.end()) {
    return *it;
  }
  ExitOutcome success;
  success.phase = mesa::v1::ATTEMPT_PHASE_SUCCEEDED;
  return success;
}

}  // namespace mesa::worker
