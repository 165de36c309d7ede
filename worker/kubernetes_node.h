// The worker follows its Kubernetes node's cordon: `kubectl cordon` / `kubectl drain`
// set the Node's spec.unschedulable, and a DaemonSet worker on that node must stop taking jobs
// even though `kubectl drain --ignore-daemonsets` leaves its pod alone until the end.
//
// NodeClient reads the Node object through the Kubernetes API with the pod's in-cluster
// configuration (service-account token and CA, KUBERNETES_SERVICE_HOST/PORT), over libcurl.
// NodeCordonFollower polls it every interval and hands each reading to the agent
// (Agent::FollowNodeCordon), which drains or uncordons the worker through the coordinator.
// API errors are logged and counted; they never change the drain state. docs/operations.md.
#ifndef MESANET_WORKER_KUBERNETES_NODE_H_
#define MESANET_WORKER_KUBERNETES_NODE_H_

#include <functional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace mesa::worker {

// The largest Node object read (a node lists its container images: tens of KiB is usual).
inline constexpr size_t kMaxNodeObjectBytes = 4 << 20;

struct KubernetesApiOptions {
  std::string server;      // https://host:port
  std::string token_file;  // bearer token; read again for every request (projected tokens rotate)
  std::string ca_file;     // CA bundle that signed the API server's certificate
  absl::Duration timeout = absl::Seconds(10);
};

// The in-cluster defaults: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT (server
// empty when the variables are unset) and the service account's token and ca.crt under
// /var/run/secrets/kubernetes.io/serviceaccount.
KubernetesApiOptions InClusterApiOptions();

// A Node name is a DNS subdomain: 1 to 253 of [a-z0-9.-], starting and ending alphanumeric.
absl::Status CheckNodeName(const std::string& name);

// spec.unschedulable of a Node object (false when absent). InvalidArgument for text that is not
// JSON, not a Node, or a Node of another name.
absl::StatusOr<bool> ParseNodeUnschedulable(const std::string& json, const std::string& node);

class NodeClient {
 public:
  explicit NodeClient(KubernetesApiOptions options);

  // GET /api/v1/nodes/NODE → spec.unschedulable. Unavailable (transport, TLS, 5xx),
  // Unauthenticated (401), PermissionDenied (403), NotFound (404), InvalidArgument (the body).
  absl::StatusOr<bool> Unschedulable(const std::string& node) const;

 private:
  const KubernetesApiOptions options_;
};

class NodeCordonFollower {
 public:
  struct Hooks {
    // Reads whether the node is cordoned.
    std::function<absl::StatusOr<bool>()> read;
    // Applies a reading (the agent drains or uncordons itself when it changed).
    std::function<absl::Status(bool cordoned)> apply;
    // A failed read (counted in a metric).
    std::function<void(const absl::Status&)> read_failed;
    // One line for the log: a changed reading, a new error, a recovery.
    std::function<void(const std::string&)> log;
  };

  NodeCordonFollower(std::string node, absl::Duration interval, Hooks hooks);
  ~NodeCordonFollower();  // Stop()

  // Polls on a thread of its own: once at once, then every interval.
  void Start();
  void Stop();
  // One poll: read, then apply. Logs an error when its step (read, apply) or code changes, not on
  // every poll. The read's status, else the apply's.
  absl::Status PollOnce();

 private:
  const std::string node_;
  const absl::Duration interval_;
  const Hooks hooks_;
  absl::Notification stop_;
  std::thread thread_;
  absl::Mutex mu_;
  std::string last_error_ ABSL_GUARDED_BY(mu_);  // step and code of the last error; "" if none
};

}  // namespace mesa::worker

#endif  // MESANET_WORKER_KUBERNETES_NODE_H_
