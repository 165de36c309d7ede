// How mesa-train's events (proto/mesa/v1/trainer.proto, parsed by proto/trainer_events.h) update
// what the agent reports for an attempt: its progress and its result.
#ifndef MESANET_WORKER_EVENTS_H_
#define MESANET_WORKER_EVENTS_H_

#include "mesa/v1/job.pb.h"
#include "mesa/v1/trainer.pb.h"

namespace mesa::worker {

// A step event updates every training figure; a skipped step only the step count.
void ApplyStep(const mesa::v1::StepEvent& step, mesa::v1::Progress& progress);

// Periodic validation: the step, and the latest validation loss and perplexity in the result.
void ApplyEval(const mesa::v1::EvalEvent& eval, mesa::v1::Progress& progress,
               mesa::v1::JobResult& result);

// The run's result. Figures beyond the typed fields go into result.metrics: "steps",
// "skipped_steps", "tokens", "seconds", and for validation figures "val_tokens", "batches",
// "cg_steps_mean", "cg_tol", "cg_max_steps".
void ApplyResult(const mesa::v1::ResultEvent& event, mesa::v1::JobResult& result);

}  // namespace mesa::worker

#endif  // MESANET_WORKER_EVENTS_H_
