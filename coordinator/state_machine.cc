#include "coordinator/state_machine.h"

#include "absl/strings/str_cat.h"

namespace mesa::coordinator {

using ::mesa::v1::JobState;

bool IsTerminal(JobState s) {
  return s == JobState::JOB_STATE_SUCCEEDED || s == JobState::JOB_STATE_FAILED ||
         s == JobState::JOB_STATE_CANCELLED;
}

bool IsPending(JobState s) {
  return s == JobState::JOB_STATE_QUEUED || s == JobState::JOB_STATE_RETRYING;
}

bool IsActive(JobState s) {
  return s == JobState::JOB_STATE_SCHEDULED || s == JobState::JOB_STATE_RUNNING;
}

bool IsValidTransition(JobState from, JobState to) {
  using S = JobState;
  switch (from) {
    case S::JOB_STATE_UNSPECIFIED:
      return to == S::JOB_STATE_QUEUED;  // submission
    case S::JOB_STATE_QUEUED:
      // FAILED: a dependency ended against its condition (JobSpec.depends_on).
      return to == S::JOB_STATE_SCHEDULED || to == S::JOB_STATE_CANCELLED ||
             to == S::JOB_STATE_FAILED;
    case S::JOB_STATE_RETRYING:
      return to == S::JOB_STATE_SCHEDULED || to == S::JOB_STATE_CANCELLED ||
             to == S::JOB_STATE_FAILED;
    case S::JOB_STATE_SCHEDULED:
    case S::JOB_STATE_RUNNING:
      // SCHEDULED may end without a RUNNING report (a trainer that fails at start-up).
      return (from == S::JOB_STATE_SCHEDULED && to == S::JOB_STATE_RUNNING) ||
             to == S::JOB_STATE_SUCCEEDED || to == S::JOB_STATE_FAILED ||
             to == S::JOB_STATE_CANCELLED || to == S::JOB_STATE_RETRYING;
    default:
      return false;  // terminal states and unknown values
  }
}

absl::Status CheckTransition(JobState from, JobState to) {
  if (IsValidTransition(from, to)) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "job state cannot change from ", ShortStateName(from), " to ", ShortStateName(to)));
}

const char* ShortStateName(JobState s) {
  switch (s) {
    case JobState::JOB_STATE_QUEUED:
      return "QUEUED";
    case JobState::JOB_STATE_SCHEDULED:
      return "SCHEDULED";
    case JobState::JOB_STATE_RUNNING:
      return "RUNNING";
    case JobState::JOB_STATE_SUCCEEDED:
      return "SUCCEEDED";
    case JobState::JOB_STATE_FAILED:
      return "FAILED";
    case JobState::JOB_STATE_CANCELLED:
      return "CANCELLED";
    case JobState::JOB_STATE_RETRYING:
      return "RETRYING";
    default:
      return "UNSPECIFIED";
  }
}

}  // namespace mesa::coordinator
