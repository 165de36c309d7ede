// What the coordinator accepts from clients and workers besides job specs (those are checked by the
// validator every binary shares: spec/validate_job_spec.h): identifiers and the bounds of every
// free-text field of a request. Errors name the field and the limit and never echo the input.
#ifndef MESANET_COORDINATOR_VALIDATION_H_
#define MESANET_COORDINATOR_VALIDATION_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "mesa/v1/job.pb.h"
#include "mesa/v1/job_service.pb.h"
#include "mesa/v1/worker_service.pb.h"

namespace mesa::coordinator {

// 1 to 128 of [A-Za-z0-9._-] (worker ids, client job ids).
bool IsValidIdentifier(absl::string_view id);

inline constexpr size_t kMaxJobIdBytes = 128;
inline constexpr size_t kMaxCancelReasonBytes = 1024;
inline constexpr size_t kMaxPageTokenBytes = 32;
inline constexpr int kMaxLabelFilters = 64;

// A job id in a request: at most kMaxJobIdBytes (INVALID_ARGUMENT naming `field`).
absl::Status CheckJobIdField(absl::string_view field, absl::string_view id);
absl::Status CheckCancelJobRequest(const mesa::v1::CancelJobRequest& request);
absl::Status CheckListJobsRequest(const mesa::v1::ListJobsRequest& request);

// A worker's JobResult is bounded as its job's spec was, so that nothing a worker reports can
// outgrow what a valid spec produces. Evaluation (spec/validate_job_spec.h): datasets, tasks,
// CG sweep settings, the internals' layers, heads and layer x head entries, and every
// per-position curve (the datasets' and the sweep's) counted together. Generation
// (spec/generation.h): a completion per prompt, the prompt's text, the completion's text and
// finish_reason, at most max_new_tokens tokens and their per-token figures, and the CG steps of
// every head of every Mesa layer per token.
absl::Status CheckJobResultBounds(const mesa::v1::JobResult& result);

// Bounds on what workers send, so that a misbehaving agent or trainer cannot grow the
// coordinator's memory or the store without limit.
inline constexpr size_t kMaxCheckpointPathBytes = 4096;
// Memory a worker may report: 1 EiB, far beyond any machine, small enough that sums of requests
// never overflow.
inline constexpr int64_t kMaxWorkerMemoryBytes = int64_t{1} << 60;
inline constexpr int kMaxWorkerGpus = 1024;
inline constexpr int kMaxWorkerCpuSlots = 1 << 20;

// A registration: its worker id (IsValidIdentifier), GPUs (at most kMaxWorkerGpus, indices unique
// and >= 0), CPU slots and memory within their bounds.
absl::Status CheckRegisterWorkerRequest(const mesa::v1::RegisterWorkerRequest& request);
// An attempt's report: checkpoint paths, the result (CheckJobResultBounds, its metrics and their
// names) and the number of log lines. Over-long messages and log lines are cut, not refused: the
// caller does that (they are the job's record of what happened).
absl::Status CheckUpdateAttemptRequest(const mesa::v1::UpdateAttemptRequest& request);

}  // namespace mesa::coordinator

#endif  // MESANET_COORDINATOR_VALIDATION_H_
