// mesa-worker: the node agent. Registers this machine's GPUs (or CPU slots) with the coordinator
// and runs mesa-train processes for the attempts assigned to it. See docs/worker.md. This file
// turns the flags into RunOptions (every flag check in one place); worker/run.cc runs them.
#include <limits.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/cli_flags.h"
#include "base/grpc_target.h"
#include "security/tls.h"
#include "worker/process.h"
#include "worker/rendezvous_bridge.h"
#include "worker/resources.h"
#include "worker/run.h"

extern char** environ;

ABSL_FLAG(std::string, coordinator, "127.0.0.1:50051",
          "Coordinator address (host:port), or replicated coordinators' as IP:port,IP:port,... "
          "(the worker follows whichever leads) or one DNS name that resolves to all of them");
ABSL_FLAG(std::string, ca, "",
          "CA (PEM) that signed the coordinator's TLS certificate: connect over TLS (default: "
          "plaintext, for a loopback development coordinator). docs/security.md");
ABSL_FLAG(std::string, tls_cert, "",
          "This worker's client certificate (PEM), signed by the coordinator's --client_ca; "
          "with --tls_key and --ca");
ABSL_FLAG(std::string, tls_key, "", "Private key of --tls_cert (PEM)");
ABSL_FLAG(absl::Duration, tls_reload_interval, absl::Seconds(60),
          "How often --ca, --tls_cert and --tls_key are read again: renewed files apply to the "
          "next connection to the coordinator without a restart (whole seconds, >= 1s)");
ABSL_FLAG(std::string, worker_id, "", "Stable worker name; default: the host name.");
ABSL_FLAG(int, cpu_slots, 0, "CPU slots offered to CPU jobs; 0 = the number of usable cores.");
ABSL_FLAG(int64_t, memory_bytes, 0,
          "Memory offered to trainers together, in bytes (jobs' resources.memory_bytes per rank is "
          "placed against it); 0 = what this agent may still allocate at start (cgroup limit less "
          "usage, RLIMIT_AS, MemAvailable: the tightest).");
ABSL_FLAG(std::string, gpus, "auto",
          "auto: discover CUDA devices; none: offer no GPU; or the CUDA device indices to offer, "
          "e.g. 0,1 or 4-7 (several agents on one host).");
ABSL_FLAG(std::string, workdir, "run/worker",
          "Root of the per-attempt working directories (jobs/<job>/attempt-<n>).");
ABSL_FLAG(std::string, checkpoint_root, "",
          "Checkpoints of job J go to <checkpoint_root>/J unless the spec sets checkpoint.dir; "
          "default <workdir>/checkpoints. Must be shared between workers for retries on another "
          "node to resume.");
ABSL_FLAG(std::string, trainer, "",
          "Path of mesa-train; default: next to this binary, the Bazel output tree, or PATH.");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:9465",
          "Prometheus /metrics address (port 0 = any).");
ABSL_FLAG(absl::Duration, grace_period, absl::Seconds(30),
          "Time a trainer gets to checkpoint and exit after SIGTERM before SIGKILL.");
ABSL_FLAG(std::string, advertise_host, "",
          "Address this node's trainers publish for peers of multi-rank CPU jobs (MESA_TCP_HOST); "
          "default: the local address of the route to the coordinator.");
ABSL_FLAG(absl::Duration, collective_timeout, absl::Seconds(300),
          "MESA_COLLECTIVE_TIMEOUT_S of multi-rank trainers: how long a rank waits for its peers "
          "(rendezvous, each collective) before failing the attempt as an infrastructure error.");
ABSL_FLAG(absl::Duration, stall_timeout, absl::Minutes(30),
          "Watchdog: a trainer that prints nothing (no event, no log line) for this long is "
          "stopped and its attempt retried as an infrastructure failure; 0 disables it.");
ABSL_FLAG(absl::Duration, attempt_retention, absl::Hours(24 * 7),
          "Attempt directories under <workdir>/jobs not written for this long are deleted "
          "(checked at start and hourly; checkpoints are never touched); 0 keeps them.");
ABSL_FLAG(absl::Duration, flush_interval, absl::Seconds(1),
          "How often progress and logs are sent to the coordinator.");
ABSL_FLAG(std::string, kubernetes_node, "",
          "Follow this Kubernetes Node's cordon (the pod's spec.nodeName through the downward "
          "API): while `kubectl cordon`/`drain` mark it unschedulable, this worker takes no new "
          "jobs (running ones continue); its uncordon lifts that. Empty: off. docs/operations.md");
ABSL_FLAG(std::string, kubernetes_api, "",
          "Kubernetes API server URL (https://HOST:PORT); default: in-cluster, "
          "https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT.");
ABSL_FLAG(std::string, kubernetes_token_file, "",
          "Bearer token for the API, read again on every request; default: the pod's "
          "service-account token (/var/run/secrets/kubernetes.io/serviceaccount/token).");
ABSL_FLAG(std::string, kubernetes_ca_file, "",
          "CA bundle of the API server; default: the service account's ca.crt.");
ABSL_FLAG(absl::Duration, kubernetes_poll_interval, absl::Seconds(5),
          "How often the Node is read (GET /api/v1/nodes/NAME): a cordon takes effect within "
          "about this long (>= 1s).");

namespace {

std::string SelfDir() {
  char buffer[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buffer, sizeof(buffer) - 1);
  if (n <= 0) return ".";
  return std::filesystem::path(std::string(buffer, n)).parent_path().string();
}

std::string FindTrainer(const std::string& flag) {
  if (!flag.empty()) return std::filesystem::absolute(flag).string();
  const std::string self = SelfDir();
  // Installed side by side, or the Bazel output tree (bazel-bin/worker/ next to bazel-bin/model/).
  for (const std::string& candidate :
       {self + "/mesa-train", self + "/../model/mesa-train", self + "/../model/main/mesa-train",
        self + "/../model/trainer/mesa-train"}) {
    if (access(candidate.c_str(), X_OK) == 0) {
      return std::filesystem::weakly_canonical(candidate).string();
    }
  }
  const char* path = getenv("PATH");
  return mesa::worker::FindProgram("mesa-train", path ? path : "");
}

// Worker ids are [A-Za-z0-9._-]; host names may hold more.
std::string SanitizeId(const std::string& name) {
  std::string id;
  for (char c : name) {
    id.push_back(absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' ||
                         c == '-'
                     ? c
                     : '-');
  }
  if (id.size() > 128) id.resize(128);
  return id.empty() ? "worker" : id;
}

absl::Status Invalid(std::string message) { return absl::InvalidArgumentError(message); }

// Every flag check; an error is a usage error (exit 2).
absl::StatusOr<mesa::worker::RunOptions> OptionsFromFlags() {
  auto gpu_selection = mesa::worker::ParseGpuSelection(absl::GetFlag(FLAGS_gpus));
  if (!gpu_selection.ok()) return gpu_selection.status();
  mesa::worker::DiscoveryOptions discovery;
  discovery.gpu_mode = gpu_selection->mode;
  discovery.gpu_indices = gpu_selection->indices;
  discovery.cpu_slots = absl::GetFlag(FLAGS_cpu_slots);
  discovery.memory_bytes = absl::GetFlag(FLAGS_memory_bytes);
  if (discovery.memory_bytes < 0) return Invalid("--memory_bytes must be >= 0");
  mesa::worker::RunOptions run;
  mesa::worker::AgentOptions& options = run.agent;
  options.resources = mesa::worker::DiscoverResources(discovery);
  if (gpu_selection->mode == mesa::worker::GpuMode::kList && options.resources.gpus.empty()) {
    // Named GPUs that are not there are a configuration error, not a CPU-only node.
    return Invalid(options.resources.gpu_note);
  }

  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  options.hostname = host;
  options.worker_id =
      absl::GetFlag(FLAGS_worker_id).empty() ? SanitizeId(host) : absl::GetFlag(FLAGS_worker_id);
  options.coordinator = absl::GetFlag(FLAGS_coordinator);
  if (absl::StatusOr<std::string> target = mesa::base::CoordinatorTarget(options.coordinator);
      !target.ok()) {
    return Invalid(absl::StrCat("--coordinator: ", target.status().message()));
  }
  if (absl::GetFlag(FLAGS_tls_reload_interval) < absl::Seconds(1)) {
    return Invalid("--tls_reload_interval must be at least 1s");
  }
  auto credentials = mesa::security::ChannelCredentialsFromFiles(
      {.ca = absl::GetFlag(FLAGS_ca),
       .cert = absl::GetFlag(FLAGS_tls_cert),
       .key = absl::GetFlag(FLAGS_tls_key),
       .reload_interval = absl::GetFlag(FLAGS_tls_reload_interval)});
  if (!credentials.ok()) return credentials.status();
  options.credentials = *credentials;
  std::error_code error;
  options.workdir =
      std::filesystem::absolute(absl::GetFlag(FLAGS_workdir)).lexically_normal().string();
  std::filesystem::create_directories(options.workdir, error);
  if (error) {
    return Invalid(
        absl::StrCat("cannot create --workdir ", options.workdir, ": ", error.message()));
  }
  options.checkpoint_root = absl::GetFlag(FLAGS_checkpoint_root).empty()
                                ? options.workdir + "/checkpoints"
                                : std::filesystem::absolute(absl::GetFlag(FLAGS_checkpoint_root))
                                      .lexically_normal()
                                      .string();
  options.trainer = FindTrainer(absl::GetFlag(FLAGS_trainer));
  if (options.trainer.empty() || access(options.trainer.c_str(), X_OK) != 0) {
    return Invalid(absl::StrCat(
        "mesa-train not found (",
        options.trainer.empty() ? "not next to mesa-worker nor in PATH" : options.trainer,
        "); pass --trainer"));
  }
  options.grace = absl::GetFlag(FLAGS_grace_period);
  options.collective_timeout = absl::GetFlag(FLAGS_collective_timeout);
  options.stall_timeout = absl::GetFlag(FLAGS_stall_timeout);
  options.attempt_retention = absl::GetFlag(FLAGS_attempt_retention);
  if (options.collective_timeout < absl::Seconds(1)) {
    return Invalid("--collective_timeout must be at least 1s");
  }
  options.advertise_host = absl::GetFlag(FLAGS_advertise_host);
  if (options.advertise_host.empty()) {
    // Towards the first of several coordinators: they share a network.
    options.advertise_host = mesa::worker::LocalAddressTowards(std::string(
        absl::string_view(options.coordinator).substr(0, options.coordinator.find(','))));
  }
  options.flush_interval = absl::GetFlag(FLAGS_flush_interval);
  for (char** env = environ; *env != nullptr; ++env) options.base_env.push_back(*env);
  run.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);

  // --kubernetes_node: checked before anything starts, so a wrong setting exits 2 at once.
  run.kubernetes_node = absl::GetFlag(FLAGS_kubernetes_node);
  run.kubernetes_api = mesa::worker::InClusterApiOptions();
  run.kubernetes_poll_interval = absl::GetFlag(FLAGS_kubernetes_poll_interval);
  if (!run.kubernetes_node.empty()) {
    if (absl::Status s = mesa::worker::CheckNodeName(run.kubernetes_node); !s.ok()) {
      return Invalid(absl::StrCat("--kubernetes_node: ", s.message()));
    }
    mesa::worker::KubernetesApiOptions& api = run.kubernetes_api;
    if (!absl::GetFlag(FLAGS_kubernetes_api).empty()) {
      api.server = absl::GetFlag(FLAGS_kubernetes_api);
    }
    if (!absl::GetFlag(FLAGS_kubernetes_token_file).empty()) {
      api.token_file = absl::GetFlag(FLAGS_kubernetes_token_file);
    }
    if (!absl::GetFlag(FLAGS_kubernetes_ca_file).empty()) {
      api.ca_file = absl::GetFlag(FLAGS_kubernetes_ca_file);
    }
    if (api.server.empty()) {
      return Invalid(
          "--kubernetes_node needs --kubernetes_api or the in-cluster "
          "KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT");
    }
    if (run.kubernetes_poll_interval < absl::Seconds(1)) {
      return Invalid("--kubernetes_poll_interval must be at least 1s");
    }
  }
  return run;
}

}  // namespace

int main(int argc, char** argv) {
  mesa::base::ParseFlagsOrExit(
      argc, argv,
      "mesa-worker --coordinator HOST:PORT [--gpus auto|none] [--workdir DIR] ...\n"
      "  The node agent: registers with the coordinator, starts and supervises trainers.");
  // Signals are taken by one thread (sigwait); every other thread, including gRPC's, has them
  // blocked. Trainers get a clean mask (base/subprocess.cc).
  const sigset_t stop = mesa::worker::BlockStopSignals();
  absl::StatusOr<mesa::worker::RunOptions> options = OptionsFromFlags();
  if (!options.ok()) {
    std::fprintf(stderr, "mesa-worker: %s\n", std::string(options.status().message()).c_str());
    return 2;
  }
  return mesa::worker::Run(*std::move(options), stop);
}
