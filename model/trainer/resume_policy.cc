#include "model/trainer/resume_policy.h"

#include "absl/strings/str_cat.h"

namespace mesa::model {
namespace {

std::string WhoWrote(const TrainState& found) {
  return found.run_id.empty() ? std::string("a run by hand or an older trainer")
                              : absl::StrCat("job ", found.run_id);
}

}  // namespace

absl::StatusOr<ResumeDecision> DecideResume(CheckpointSettings::Resume mode,
                                            const std::string& run_id, int64_t total_steps,
                                            const TrainState* found, const std::string& root) {
  using Resume = CheckpointSettings::Resume;
  if (found != nullptr && !run_id.empty() && found->run_id == run_id) {
    return ResumeDecision{.resume = true};  // this job's own progress: a retry
  }
  if (found == nullptr) {
    if (mode == Resume::kMust) {
      return absl::FailedPreconditionError(
          absl::StrCat("checkpoint.resume is must, but there is no checkpoint under ", root,
                       "; set checkpoint.resume to auto or never (or omit it) to start fresh"));
    }
    return ResumeDecision{};
  }
  if (mode == Resume::kNever) {
    return ResumeDecision{
        .note = absl::StrCat("starting fresh (checkpoint.resume: never, the default): the "
                             "checkpoint at step ",
                             found->step, " under ", root, " was written by ", WhoWrote(*found),
                             "; set checkpoint.resume: auto to continue it instead")};
  }
  if (found->step >= total_steps) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint.resume is ", mode == Resume::kAuto ? "auto" : "must",
                     ", but the checkpoint "
                     "under ",
                     root, " is of a finished run (step ", found->step, ", written by ",
                     WhoWrote(*found), ") and training.steps is ", total_steps,
                     ": nothing would be trained. Raise training.steps to continue it, or set "
                     "checkpoint.resume: never (or another checkpoint.dir) to train afresh"));
  }
  return ResumeDecision{.resume = true};
}

absl::StatusOr<bool> ResumedResetAtBos(const DataSettings& data, std::optional<bool> recorded,
                                       const std::string& dir) {
  const bool ran_with = recorded.value_or(false);
  if (data.reset_at_bos_set && data.reset_at_bos != ran_with) {
    return absl::FailedPreconditionError(absl::StrCat(
        "data.reset_at_bos: the spec says ", data.reset_at_bos ? "true" : "false",
        " but the run being resumed (", dir, ") trained with ", ran_with ? "true" : "false",
        recorded.has_value() ? "" : " (its checkpoint predates the setting)",
        "; leave the field out to keep the run's setting, or start a new run"));
  }
  return ran_with;
}

}  // namespace mesa::model
