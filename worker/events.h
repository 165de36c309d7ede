// Parsing of mesa-train's JSON-lines progress events (the --events_fd stream, docs/trainer.md).
//
// One JSON object per line with an "event" (or "type") field. The agent needs:
//   step        step, total_steps, loss, lr, grad_norm, tokens_per_second, mfu, cg_steps_mean,
//               eta_seconds (any may be missing)
//   eval        step, val_loss, val_perplexity (periodic validation during training)
//   checkpoint  step, path (a complete checkpoint directory)
//   result      final_loss, val_loss, val_perplexity, checkpoint_path, metrics{...}; any other
//               numeric top-level field is kept as a metric too (eval jobs report theirs this way)
//   stopped     step, checkpoint/path (exiting on SIGTERM after checkpointing)
//   error       message, kind ("user"/"infra"): why the trainer is about to fail
// Other event types are accepted and ignored, so the trainer can add events freely.
#ifndef MESANET_WORKER_EVENTS_H_
#define MESANET_WORKER_EVENTS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "mesa/v1/job.pb.h"

namespace mesa::worker {

enum class EventType { kStep, kEval, kCheckpoint, kResult, kStopped, kError, kOther };

struct TrainerEvent {
  EventType type = EventType::kOther;
  std::string type_name;  // As written by the trainer.
  std::optional<int64_t> step;
  std::optional<int64_t> total_steps;
  std::optional<double> loss;
  std::optional<double> lr;
  std::optional<double> grad_norm;
  std::optional<double> tokens_per_second;
  std::optional<double> mfu;
  std::optional<double> cg_steps_mean;
  std::optional<double> eta_seconds;
  std::optional<double> val_loss;
  std::optional<double> val_perplexity;
  std::optional<double> final_loss;
  std::string path;  // checkpoint / stopped: checkpoint directory; result: checkpoint_path.
  std::string message;  // error
  std::string kind;     // error: "user" or "infra"
  std::map<std::string, double> metrics;  // result: every further numeric figure
};

// InvalidArgument for lines that are not a JSON object with an event type.
absl::StatusOr<TrainerEvent> ParseEventLine(const std::string& line);

// Folds an event into the attempt's progress / result (fields the event does not carry are kept).
void ApplyToProgress(const TrainerEvent& event, mesa::v1::Progress& progress);
void ApplyToResult(const TrainerEvent& event, mesa::v1::JobResult& result);

}  // namespace mesa::worker

#endif  // MESANET_WORKER_EVENTS_H_
