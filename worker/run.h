// The worker process, apart from its command line: mesa-worker's main parses flags into
// RunOptions (worker/main.cc, every flag check there) and calls Run, which serves /metrics,
// follows the Kubernetes node's cordon when asked, and runs the agent until SIGINT/SIGTERM.
#ifndef MESANET_WORKER_RUN_H_
#define MESANET_WORKER_RUN_H_

#include <signal.h>

#include <string>

#include "absl/time/time.h"
#include "worker/agent.h"
#include "worker/kubernetes_node.h"

namespace mesa::worker {

struct RunOptions {
  AgentOptions agent;
  std::string metrics_listen;
  std::string kubernetes_node;  // empty: no cordon following
  KubernetesApiOptions kubernetes_api;
  absl::Duration kubernetes_poll_interval = absl::Seconds(5);
};

// Blocks SIGINT/SIGTERM in the calling thread (call before any other thread starts, so that every
// thread, gRPC's included, inherits the mask; trainers get a clean one) and ignores SIGPIPE.
sigset_t BlockStopSignals();

// Runs until the agent stops; the process exit code (1 when /metrics cannot be served). A first
// stop signal drains the agent, a second exits at once.
int Run(RunOptions options, const sigset_t& stop_signals);

}  // namespace mesa::worker

#endif  // MESANET_WORKER_RUN_H_
