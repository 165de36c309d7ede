// The node agent: registers this machine's resources with the coordinator, keeps the lease with
// long-polling heartbeats, starts an AttemptRunner per assignment and stops attempts on request.
//
// Reconnection: any failed heartbeat is retried with backoff; a coordinator that restarted answers
// `reregister`, and the agent registers again reporting every attempt it still runs (including
// ones whose final report is not delivered yet), so the coordinator keeps them instead of starting
// them twice, and tells the agent which ones to stop.
#ifndef MESANET_WORKER_AGENT_H_
#define MESANET_WORKER_AGENT_H_

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "mesa/v1/worker_service.grpc.pb.h"
#include "worker/attempt.h"
#include "worker/metrics.h"
#include "worker/resources.h"

namespace mesa::worker {

struct AgentOptions {
  std::string coordinator;  // host:port
  // How to reach it (TLS with this node's client certificate:
  // security::ChannelCredentialsFromFiles); null: plaintext.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  std::string worker_id;
  std::string hostname;
  NodeResources resources;
  std::string workdir;          // Absolute; attempts run under <workdir>/jobs/.
  std::string checkpoint_root;  // Absolute; checkpoints of job J go to <root>/J unless set in spec.
  std::string trainer;          // Absolute path of mesa-train.
  // Multi-rank attempts: MESA_TCP_HOST of the trainers (the address peers on other nodes reach
  // this node at) and MESA_COLLECTIVE_TIMEOUT_S.
  std::string advertise_host;
  absl::Duration collective_timeout = absl::Seconds(300);
  absl::Duration stall_timeout = absl::Minutes(30);  // AttemptOptions::stall_timeout
  // Attempt directories (job file, rank logs) not written for this long are deleted, checked at
  // start and hourly; zero keeps them for ever. Checkpoints are never touched here.
  absl::Duration attempt_retention = absl::Hours(24 * 7);
  absl::Duration grace = absl::Seconds(30);
  absl::Duration rpc_timeout = absl::Seconds(10);
  std::vector<std::string> base_env;
  std::vector<std::string> trainer_extra_args;
  absl::Duration flush_interval = absl::Seconds(1);
};

class Agent {
 public:
  Agent(AgentOptions options, WorkerMetrics* metrics);
  ~Agent();

  // Registers and serves assignments until Shutdown(); then stops the trainers (SIGTERM, SIGKILL
  // after the grace period), reports them, and returns.
  void Run();
  // Thread-safe; interrupts a pending long poll.
  void Shutdown();

  // Follows the Kubernetes node's cordon (worker/kubernetes_node.h), called with every reading:
  // when `cordoned` differs from what was applied under the current lease, drains this worker
  // without eviction (DrainSelf, DRAIN_REASON_NODE_CORDONED) or lifts that cordon (UncordonSelf;
  // an operator's drain stays). Unavailable before the first registration and while stopping;
  // the next reading tries again.
  absl::Status FollowNodeCordon(bool cordoned);

  // Checkpoint directory of a job on this worker.
  std::string CheckpointDirFor(const mesa::v1::Assignment& assignment) const;

  // Whether an assignment is safe to turn into paths and processes: the job id names directories
  // (1 to 128 of [A-Za-z0-9._-], not "." or ".."), the attempt is positive, and a checkpoint root
  // the coordinator names is absolute. InvalidArgument says what is wrong.
  static absl::Status CheckAssignment(const mesa::v1::Assignment& assignment);

  // Deletes <workdir>/jobs/<job>/attempt-<n> directories of attempts not running here whose
  // newest file is older than attempt_retention, and job directories left empty. Returns how
  // many attempt directories it removed. Run() calls it at start and hourly.
  int PruneAttemptDirs();

 private:
  using Key = std::pair<std::string, int>;  // (job id, attempt)

  absl::Status Register();
  // On a clean shutdown, after the trainers stopped: WorkerService.DeregisterWorker.
  absl::Status Deregister();
  // WorkerService.DrainSelf when trainers run: their stops below then count as evictions.
  absl::Status DrainSelf();
  absl::Status HeartbeatOnce();
  void StartAttempt(const mesa::v1::Assignment& assignment);
  // `grace` > 0: the trainers' time between SIGTERM and SIGKILL (a preemption's), else --grace.
  void StopAttempt(const std::string& job_id, int attempt, const std::string& reason, bool orphan,
                   absl::Duration grace = absl::ZeroDuration());
  void ReapFinished();
  std::vector<mesa::v1::RunningAttempt> Running();
  absl::StatusOr<UpdateReply> SendUpdate(mesa::v1::UpdateAttemptRequest& request);
  bool shutting_down();

  const AgentOptions options_;
  WorkerMetrics* const metrics_;
  // A fresh channel after a failed call: a restarted coordinator is reached at once instead of
  // after gRPC's reconnect backoff (several seconds, longer than a short lease).
  void ResetChannel();
  std::shared_ptr<mesa::v1::WorkerService::Stub> stub();

  absl::Mutex stub_mu_;
  std::shared_ptr<mesa::v1::WorkerService::Stub> stub_ ABSL_GUARDED_BY(stub_mu_);

  absl::Mutex mu_;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  std::string lease_id_ ABSL_GUARDED_BY(mu_);
  int64_t heartbeat_interval_ms_ ABSL_GUARDED_BY(mu_) = 5000;
  grpc::ClientContext* poll_context_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::map<Key, std::unique_ptr<AttemptRunner>> runners_ ABSL_GUARDED_BY(mu_);
  // Attempts the coordinator said it does not run here: stopped, and no longer reported.
  std::set<Key> orphans_ ABSL_GUARDED_BY(mu_);
  // Attempts that ended here (the latest kDoneMemory): an assignment delivered again for one of
  // them is ignored, never run twice.
  static constexpr size_t kDoneMemory = 4096;
  std::set<Key> done_ ABSL_GUARDED_BY(mu_);
  std::deque<Key> done_order_ ABSL_GUARDED_BY(mu_);
  // The node cordon FollowNodeCordon last applied, and under which lease: a new lease (the
  // coordinator may have forgotten this worker) applies the reading again.
  std::optional<bool> node_cordon_applied_ ABSL_GUARDED_BY(mu_);
  std::string node_cordon_lease_ ABSL_GUARDED_BY(mu_);
  // Highest HeartbeatResponse.delivery_seq acted on under the current lease (echoed back).
  int64_t acked_delivery_ ABSL_GUARDED_BY(mu_) = 0;
};

// One line on stderr with a timestamp: "2025-01-01T12:00:00.123 mesa-worker: ...".
void LogLine(const std::string& text);

}  // namespace mesa::worker

#endif  // MESANET_WORKER_AGENT_H_
