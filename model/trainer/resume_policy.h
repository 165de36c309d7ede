// Whether a training run resumes from a checkpoint it finds under its own checkpoint root
// (docs/trainer.md, "Resuming"). A pure function of the spec's checkpoint.resume, this run's id
// and what the found checkpoint's state.json says, so the policy is tested without training.
#ifndef MESANET_MODEL_TRAINER_RESUME_POLICY_H_
#define MESANET_MODEL_TRAINER_RESUME_POLICY_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "model/checkpoint/checkpoint.h"
#include "model/config/job_config.h"

namespace mesa::model {

struct ResumeDecision {
  bool resume = false;
  // For the run's log when a checkpoint was found and is not resumed; empty otherwise.
  std::string note;
};

// `found`: the state of the checkpoint the run would resume from (PeekCheckpointState), null
// when there is none. `run_id`: this run's job id (empty for runs by hand).
//   - found by the same job (a retry, or the job's trainer restarted): resume, whatever `mode`;
//   - otherwise kNever starts fresh, kAuto resumes when there is a checkpoint, kMust resumes and
//     fails without one; kAuto and kMust fail on a checkpoint of a finished run (its step >=
//     `total_steps`) rather than train nothing.
// Failures are FailedPrecondition (the job's own error: no retry) naming checkpoint.resume.
absl::StatusOr<ResumeDecision> DecideResume(CheckpointSettings::Resume mode,
                                            const std::string& run_id, int64_t total_steps,
                                            const TrainState* found, const std::string& root);

// data.reset_at_bos of a run resumed from the checkpoint `dir` whose state recorded `recorded`
// (nullopt: written before the record, whose runs had no resets): the record, unless the spec set
// the field, which must then agree (FailedPrecondition naming data.reset_at_bos otherwise: a run
// does not change how it reads its data half way).
absl::StatusOr<bool> ResumedResetAtBos(const DataSettings& data, std::optional<bool> recorded,
                                       const std::string& dir);

}  // namespace mesa::model

#endif  // MESANET_MODEL_TRAINER_RESUME_POLICY_H_
