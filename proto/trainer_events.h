// The wire form of mesa-train's events (proto/mesa/v1/trainer.proto): one JSON object per line,
// protobuf's JSON mapping with the proto field names. The trainer writes with FormatEventLine,
// the worker agent reads with ParseEventLine; no other code knows the format.
#ifndef MESANET_PROTO_TRAINER_EVENTS_H_
#define MESANET_PROTO_TRAINER_EVENTS_H_

#include <string>

#include "absl/status/statusor.h"
#include "mesa/v1/trainer.pb.h"

namespace mesa {

// The longest event line a reader accepts whole (the agent's bound on the events stream). An
// evaluation result with per-position curves is the largest event; spec/validate_job_spec.h
// bounds it (kMaxEvalCurvePositions) well below this.
inline constexpr size_t kMaxEventLineBytes = size_t{16} << 20;

// One line, '\n' included. Every field is printed (zeros too), so readers with jq or a shell grep
// see the same keys every time; int64 fields are JSON strings, as the mapping prescribes.
std::string FormatEventLine(const mesa::v1::TrainerEvent& event);

// Unknown fields and event types are ignored (a newer trainer may add them); the result then has
// no event set. InvalidArgument for a line that is not a JSON object of the mapping.
absl::StatusOr<mesa::v1::TrainerEvent> ParseEventLine(const std::string& line);

}  // namespace mesa

#endif  // MESANET_PROTO_TRAINER_EVENTS_H_
