// The training and evaluation drivers behind `mesa-train` (docs/trainer.md).
#ifndef MESANET_MODEL_TRAINER_TRAINER_H_
#define MESANET_MODEL_TRAINER_TRAINER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/mesa/mesa_op.h"
#include "mesa/v1/trainer.pb.h"
#include "model/comm/communicator_factory.h"
#include "model/config/job_config.h"
#include "model/trainer/events.h"

namespace mesa::model {

struct TrainerOptions {
  std::string workdir = ".";  // checkpoints default to WORKDIR/checkpoints
  std::string resume;         // a checkpoint root or step directory; empty = checkpoint.resume
  // This run's identity, recorded in its checkpoints: the job id under the worker agent
  // (MESA_JOB_ID), the same for every attempt, so a retry resumes from the job's own
  // checkpoints; empty for runs by hand (resume_policy.h).
  std::string run_id;
  std::string device = "";  // overrides training.device when set
  int rank = 0;
  int world_size = 1;
  // Build the communicator from the launcher's environment (mpirun, or MESA_* from a worker
  // agent; model/comm/communicator_factory.h). Off: single process (rank 0 of 1 only).
  bool comm_from_env = false;
  CommEnvironment comm_env;
  int num_threads = 0;  // 0 = all cores
  kernels::MesaImpl mesa_impl = kernels::MesaImpl::kChunked;
  int max_consecutive_nonfinite = 5;
  // Plain data parallelism (several ranks, no ZeRO): the last micro-batch's gradients are
  // all-reduced in buckets of about this many bytes of float32 while its backward pass runs
  // (GradientBucketer). 25 MiB as PyTorch DDP; 0 = one blocking all-reduce after the backward.
  // mesa-train reads it from $MESA_GRAD_BUCKET_MB.
  int64_t grad_bucket_bytes = int64_t{25} << 20;
  // Peak FLOP/s of one process for MFU; 0 = the device's (mesa-train: $MESA_PEAK_FLOPS).
  double peak_flops = 0;
  const std::atomic<bool>* stop_requested = nullptr;  // SIGTERM: finish the step, checkpoint, stop
  // Testing: return right after this many steps of this run, without a checkpoint (as if killed).
  int64_t crash_after_steps = -1;
  // Testing: multiply the loss scale to provoke non-finite steps (inf/nan injection).
  bool inject_nonfinite = false;
  // Testing: when it returns true, this process takes the forward of (step, micro-batch) as
  // non-finite (a rank-local non-finite loss; step counts completed steps).
  std::function<bool(int64_t step, int micro_batch)> nonfinite_forward;
};

enum class RunOutcome { kCompleted, kStopped };

struct RunResult {
  RunOutcome outcome = RunOutcome::kCompleted;
  int64_t steps_done = 0;
  double final_loss = 0;
  std::string checkpoint_dir;
  mesa::v1::ResultEvent result;  // the "result" event
};

// Errors: InvalidArgument/NotFound/FailedPrecondition/DataLoss/ResourceExhausted are user errors;
// Aborted means the loss diverged (non-finite for max_consecutive_nonfinite steps); others are
// infrastructure. main() maps them to exit codes.
absl::StatusOr<RunResult> RunTraining(const JobConfig& config, const TrainerOptions& options,
                                      EventSink& events);

// Evaluates a checkpoint (eval.checkpoint, else --resume, else WORKDIR/checkpoints) on
// data.val_path, in CG tolerance mode when model.cg_tol > 0.
absl::StatusOr<RunResult> RunEvaluation(const JobConfig& config, const TrainerOptions& options,
                                        EventSink& events);

// JOB_TYPE_GENERATE: completions of spec.generate's prompts from its checkpoint (its own model and
// tokenizer), on training.device (or --device); the result event carries them.
absl::StatusOr<RunResult> RunGeneration(const JobConfig& config, const TrainerOptions& options,
                                        EventSink& events);

struct Completion;  // model/generate/generator.h
// One completion as the result event carries it. Its text is bytes (a completion cut by
// max_new_tokens may end inside a character) and a proto string must be UTF-8, else the whole
// event could not be sent: invalid sequences become U+FFFD, as in log lines, and the text is cut
// on a character boundary at spec::kMaxCompletionBytes (the coordinator's bound).
mesa::v1::Completion CompletionResult(const Completion& c);

// Process exit code for a run's status (proto/mesa/v1/trainer.proto).
mesa::v1::TrainerExitCode ExitCodeFor(const absl::Status& status);

}  // namespace mesa::model

#endif  // MESANET_MODEL_TRAINER_TRAINER_H_
