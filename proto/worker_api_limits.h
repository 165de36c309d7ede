// Limits of the worker API (worker_service.proto) that both sides must agree on: the agent never
// sends more, the coordinator refuses more. One definition, included by both.
#ifndef MESANET_PROTO_WORKER_API_LIMITS_H_
#define MESANET_PROTO_WORKER_API_LIMITS_H_

#include <cstddef>
#include <cstdint>

namespace mesa {

// Log lines in one UpdateAttemptRequest.
inline constexpr size_t kMaxLogLinesPerUpdate = 1000;
// Bytes of one stored log line (longer lines are cut on a character boundary).
inline constexpr size_t kMaxLogLineBytes = 65536;
// A final result's named metrics, and the length of each name.
inline constexpr int kMaxResultMetrics = 256;
inline constexpr size_t kMaxResultMetricNameBytes = 128;
// Log text the coordinator stores per job, over all attempts; later lines are counted in
// Job.dropped_log_lines, not stored (the trainer's log file on the worker keeps everything).
inline constexpr int64_t kMaxLogBytesPerJob = int64_t{64} << 20;
// Cancellation.grace_seconds: the longest a stopping attempt may keep its resources before
// SIGKILL (a preemption's grace, docs/coordinator.md "Preemption").
inline constexpr int64_t kMaxStopGraceSeconds = 3600;

}  // namespace mesa

#endif  // MESANET_PROTO_WORKER_API_LIMITS_H_
