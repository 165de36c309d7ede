// The coordinator process, apart from its command line: mesa-coordinator's main parses flags into
// RunOptions (coordinator/main.cc) and calls Run, which opens the store, starts the services and
// waits for SIGTERM/SIGINT (or a failed store commit).
#ifndef MESANET_COORDINATOR_RUN_H_
#define MESANET_COORDINATOR_RUN_H_

#include <signal.h>

#include <string>

#include "coordinator/auth.h"
#include "coordinator/coordinator.h"
#include "coordinator/store.h"
#include "coordinator/stream_limits.h"

namespace mesa::coordinator {

struct RunOptions {
  Store::Options store;  // on_failure is set by Run
  CoordinatorOptions coordinator;
  StreamLimitOptions stream_limits;
  SecurityFlags security;      // security.listen is the gRPC address
  std::string metrics_listen;  // empty: no /metrics
  std::string health_listen;   // empty: no health port
  // Replicated coordinators (docs/coordinator.md): > 0: wait as a follower until the store's
  // leader lease is free, lead while renewing it, stop when it is lost. 0: alone, always leads.
  absl::Duration leader_lease = absl::ZeroDuration();
  std::string leader_name;  // the holder's name (empty: NewLeaderName())
};

// Blocks the stop signals in the calling thread (call before any other thread starts, so that
// gRPC's threads inherit the mask), returning them for Run.
sigset_t BlockStopSignals();

// Runs until a stop signal; the process exit code: 0 after a clean stop, 1 when the store could
// not be opened or loaded, a port could not be bound, or the store failed, 2 when the security
// files are invalid.
int Run(RunOptions options, const sigset_t& stop_signals);

}  // namespace mesa::coordinator

#endif  // MESANET_COORDINATOR_RUN_H_
