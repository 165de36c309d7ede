// How a trainer's exit turns into an attempt outcome (phase and failure kind).
//
// The contract with mesa-train (docs/trainer.md): exit 0 = finished (or stopped on SIGTERM after
// checkpointing); the user-error exit codes (2, and 3 for a diverged loss) = the job's spec or
// data is at fault, so retrying cannot help; anything else (other codes, death by signal: SIGKILL
// from the OOM killer, SIGSEGV from a kernel fault) is an infrastructure failure that a retry from
// the last checkpoint may fix.
#ifndef MESANET_WORKER_EXIT_STATUS_H_
#define MESANET_WORKER_EXIT_STATUS_H_

#include <string>
#include <vector>

#include "mesa/v1/trainer.pb.h"
#include "mesa/v1/worker_service.pb.h"

namespace mesa::worker {

// mesa-train's exit codes that mean "the job's fault" (proto/mesa/v1/trainer.proto): errors in
// the user's spec or data, and a diverged loss. Such jobs fail without a retry; any other code is
// an infrastructure error.
inline constexpr int kTrainerUserErrorExitCode = mesa::v1::TRAINER_EXIT_USER_ERROR;
inline constexpr int kTrainerDivergedExitCode = mesa::v1::TRAINER_EXIT_DIVERGED;

struct ExitOutcome {
  mesa::v1::AttemptPhase phase = mesa::v1::ATTEMPT_PHASE_UNSPECIFIED;
  mesa::v1::FailureKind failure_kind = mesa::v1::FAILURE_KIND_UNSPECIFIED;
  std::string message;
};

struct ExitContext {
  // The agent asked the trainer to stop (cancel, preemption, agent shutdown).
  bool stop_requested = false;
  // The trainer reported a "stopped" event before exiting.
  bool stopped_event = false;
  // Exit codes that mean "the user's fault".
  std::vector<int> user_error_codes = {kTrainerUserErrorExitCode, kTrainerDivergedExitCode};
};

// Maps a wait() status of one trainer process.
ExitOutcome ClassifyExit(int wait_status, const ExitContext& context);

// "exit code 3", "killed by signal 9 (SIGKILL)".
std::string DescribeWaitStatus(int wait_status);

// Combines the outcomes of all ranks of an attempt: any USER failure makes the attempt a USER
// failure (the other ranks were usually stopped because of it), else any INFRA failure, else
// STOPPED if any rank stopped, else SUCCEEDED. The message is taken from the deciding rank.
ExitOutcome CombineOutcomes(const std::vector<ExitOutcome>& ranks);

}  // namespace mesa::worker

#endif  // MESANET_WORKER_EXIT_STATUS_H_
