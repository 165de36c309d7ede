// The job lifecycle (docs/design.md §6): which state changes are legal.
//
//   QUEUED -> SCHEDULED -> RUNNING -> SUCCEEDED | FAILED | CANCELLED
//                  \            \--> RETRYING (infrastructure failure) -> SCHEDULED ...
//                   \--> (same terminal / RETRYING targets as RUNNING)
//   QUEUED | RETRYING -> CANCELLED (cancelled before it ran), RETRYING -> FAILED (retries used up
//   while waiting, e.g. after a restart).
#ifndef MESANET_COORDINATOR_STATE_MACHINE_H_
#define MESANET_COORDINATOR_STATE_MACHINE_H_

#include "absl/status/status.h"
#include "mesa/v1/job.pb.h"

namespace mesa::coordinator {

using ::mesa::v1::JobState;

// SUCCEEDED, FAILED and CANCELLED: no transition leaves them.
bool IsTerminal(JobState state);
// QUEUED and RETRYING: the job waits for the scheduler.
bool IsPending(JobState state);
// SCHEDULED and RUNNING: the job holds resources on workers.
bool IsActive(JobState state);

bool IsValidTransition(JobState from, JobState to);

// OK, or FAILED_PRECONDITION naming both states.
absl::Status CheckTransition(JobState from, JobState to);

// "QUEUED", "RUNNING", ... (the enum name without the JOB_STATE_ prefix).
const char* ShortStateName(JobState state);

}  // namespace mesa::coordinator

#endif  // MESANET_COORDINATOR_STATE_MACHINE_H_
