// Preemption policy by queue (docs/coordinator.md "Preemption"): whether a pending job of a queue
// that cannot be placed may stop running jobs of lower priority, and how long they get to
// checkpoint before they are killed. Parsed once from --queue_preemption.
#ifndef MESANET_COORDINATOR_PREEMPTION_H_
#define MESANET_COORDINATOR_PREEMPTION_H_

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace mesa::coordinator {

struct QueuePreemption {
  // "lower_priority": its jobs preempt running jobs of strictly lower priority, in any queue.
  // "never" (every queue not listed): they wait.
  bool lower_priority = false;
  // What the victims' trainers get between SIGTERM (checkpoint and exit) and SIGKILL; zero: the
  // worker agent's own --grace.
  absl::Duration grace = absl::ZeroDuration();
};

// Queue name -> policy.
using PreemptionPolicy = absl::flat_hash_map<std::string, QueuePreemption>;

// "QUEUE=POLICY[/GRACE],...": POLICY never or lower_priority, GRACE a duration (30s, 2m) of at
// most kMaxStopGraceSeconds (proto/worker_api_limits.h: what a Cancellation may carry).
// InvalidArgument naming the entry otherwise. Empty text: no preemption anywhere.
absl::StatusOr<PreemptionPolicy> ParsePreemptionPolicy(absl::string_view text);

}  // namespace mesa::coordinator

#endif  // MESANET_COORDINATOR_PREEMPTION_H_
