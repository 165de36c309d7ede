#include "worker/run.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "worker/metrics.h"
#include "worker/process.h"

namespace mesa::worker {
namespace {

void LogStart(const AgentOptions& options) {
  std::string gpus;
  for (const auto& gpu : options.resources.gpus) {
    absl::StrAppend(&gpus, gpus.empty() ? "" : ", ", gpu.index, ": ", gpu.name, " (",
                    gpu.memory_bytes >> 20, " MiB)");
  }
  LogLine(absl::StrCat(
      "worker ", options.worker_id, ": ",
      gpus.empty() ? absl::StrCat("no GPU (",
                                  options.resources.gpu_note.empty() ? "--gpus none"
                                                                     : options.resources.gpu_note,
                                  ")")
                   : absl::StrCat("GPUs ", gpus),
      ", ", options.resources.cpu_slots, " CPU slots, ", options.resources.memory_bytes >> 20,
      " MiB memory (", options.resources.memory_source, "); trainer ", options.trainer,
      "; workdir ", options.workdir, "; checkpoints ", options.checkpoint_root,
      "; peers reach this node at ",
      options.advertise_host.empty() ? options.hostname : options.advertise_host));
}

}  // namespace

sigset_t BlockStopSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return signals;
}

int Run(RunOptions options, const sigset_t& stop_signals) {
  WorkerMetrics metrics(options.agent.worker_id);
  auto metrics_address = metrics.Serve(options.metrics_listen);
  if (!metrics_address.ok()) {
    std::fprintf(stderr, "mesa-worker: %s\n",
                 std::string(metrics_address.status().message()).c_str());
    return 1;
  }
  std::printf("metrics on %s\n", metrics_address->c_str());
  std::fflush(stdout);
  LogStart(options.agent);

  Agent agent(options.agent, &metrics);
  std::unique_ptr<NodeCordonFollower> follower;
  const std::string& node = options.kubernetes_node;
  if (!node.empty()) {
    LogLine(absl::StrCat("following the cordon of Kubernetes node ", node, " (",
                         options.kubernetes_api.server, ", every ",
                         absl::FormatDuration(options.kubernetes_poll_interval), ")"));
    auto client = std::make_shared<NodeClient>(options.kubernetes_api);
    follower = std::make_unique<NodeCordonFollower>(
        node, options.kubernetes_poll_interval,
        NodeCordonFollower::Hooks{
            .read = [client, node, &metrics]() -> absl::StatusOr<bool> {
              absl::StatusOr<bool> cordoned = client->Unschedulable(node);
              if (cordoned.ok()) metrics.SetNodeCordoned(*cordoned);
              return cordoned;
            },
            .apply = [&agent](bool cordoned) { return agent.FollowNodeCordon(cordoned); },
            .read_failed = [&metrics](const absl::Status&) { metrics.CountKubernetesApiError(); },
            .log = [](const std::string& line) { LogLine(line); }});
    follower->Start();
  }
  std::thread signal_thread([&agent, stop_signals] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    LogLine(absl::StrCat("received signal ", sig, "; stopping (again to exit at once)"));
    agent.Shutdown();
    sigwait(&stop_signals, &sig);
    _exit(130);  // Trainers die with us (PR_SET_PDEATHSIG).
  });
  signal_thread.detach();
  agent.Run();
  if (follower != nullptr) follower->Stop();
  return 0;
}

}  // namespace mesa::worker
