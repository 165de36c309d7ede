// A real cluster on loopback for end-to-end tests: mesa-coordinator, mesa-worker agents and the
// real mesa-train, each a separate process in a temporary directory, talking gRPC on port-0
// ports. Every wait is bounded.
#ifndef MESANET_TESTS_E2E_CLUSTER_H_
#define MESANET_TESTS_E2E_CLUSTER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cli/client.h"
#include "mesa/v1/job.pb.h"
#include "tests/process_harness.h"

namespace mesa::e2e {

// Runfiles paths of the binaries under test.
std::string CoordinatorBinary();
std::string WorkerBinary();
std::string TrainerBinary();

struct ClusterOptions {
  // Short leases so a SIGKILLed worker is noticed in a few seconds.
  absl::Duration lease_ttl = absl::Seconds(3);
  absl::Duration heartbeat_interval = absl::Seconds(1);
  absl::Duration grace_period = absl::Seconds(20);
  int cpu_slots_per_worker = 1;
  // --collective_timeout of the workers: how long a rank of a multi-rank job waits for a peer.
  absl::Duration collective_timeout = absl::Seconds(30);
  // Further coordinator flags (e.g. --data_roots); a --checkpoint_root here replaces the
  // cluster's default root.
  std::vector<std::string> coordinator_args;
  // As a real cluster runs (docs/security.md): TLS with a CA made for the cluster
  // (scripts/make_dev_ca.sh), workers with client certificates, the client with a bearer token.
  bool secure = true;
};

class Cluster {
 public:
  // Starts a coordinator and `workers` workers (w1, w2, ...) sharing one checkpoint root.
  static absl::StatusOr<std::unique_ptr<Cluster>> Start(int workers,
                                                        const ClusterOptions& options = {});
  ~Cluster();

  const std::string& dir() const { return dir_; }
  const std::string& address() const { return address_; }
  const std::string& checkpoint_root() const { return checkpoint_root_; }
  // The cluster's CA and certificates (ca.pem; server.pem/key for localhost) when secure.
  const std::string& pki() const { return pki_; }
  cli::JobClient& client() { return *client_; }
  // A client with the token of `user`: "alice" or "bob" (role user; the cluster's own client is
  // an admin). Needs ClusterOptions::secure.
  absl::StatusOr<std::unique_ptr<cli::JobClient>> ClientAs(const std::string& user);

  absl::Status StartCoordinator();
  // SIGKILL (no chance to flush anything) and wait for the exit.
  absl::Status KillCoordinator();
  // `extra_args`: further mesa-worker flags (e.g. --kubernetes_node).
  absl::Status StartWorker(const std::string& id, const std::vector<std::string>& extra_args = {});
  // Runs the real mesactl against this cluster (its CA, the admin token) to completion.
  absl::StatusOr<testing::RunResult> Mesactl(std::vector<std::string> args);
  absl::Status KillWorker(const std::string& id);
  testing::Process* worker(const std::string& id);
  // The pid of the mesa-train process that worker `worker_id` runs for (job, attempt, rank), found
  // in /proc by its working directory and MESA_RANK; NotFound if it is not running.
  absl::StatusOr<pid_t> TrainerPid(const std::string& worker_id, const std::string& job_id,
                                   int attempt, int rank) const;
  // Where worker `worker_id` runs attempt `attempt` of a job.
  std::string AttemptDir(const std::string& worker_id, const std::string& job_id,
                         int attempt) const;

  absl::StatusOr<mesa::v1::Job> Submit(const mesa::v1::JobSpec& spec);
  // Polls GetJob until `done` holds; DeadlineExceeded (with the job's last state) after `timeout`.
  // Transient errors (coordinator restarting) are retried until the deadline.
  absl::StatusOr<mesa::v1::Job> WaitFor(const std::string& job_id,
                                        const std::function<bool(const mesa::v1::Job&)>& done,
                                        absl::Duration timeout);
  absl::StatusOr<mesa::v1::Job> WaitForEnd(const std::string& job_id, absl::Duration timeout);
  // Every event of the job so far.
  absl::StatusOr<std::vector<mesa::v1::JobEvent>> Events(const std::string& job_id);
  absl::StatusOr<std::vector<mesa::v1::LogLine>> Logs(const std::string& job_id);

 private:
  Cluster() = default;
  absl::Status MakeCredentials();

  ClusterOptions options_;
  std::string dir_;
  std::string checkpoint_root_;
  std::string pki_;      // CA and certificates when options_.secure
  std::string address_;  // Fixed after the first start, so a restart keeps the port.
  std::unique_ptr<testing::Process> coordinator_;
  std::map<std::string, std::unique_ptr<testing::Process>> workers_;
  std::unique_ptr<cli::JobClient> client_;
};

// Writes token shards in llm.c's layout (docs/design.md §8; version 1, uint16) holding byte-level
// tokens of `documents`, each preceded by BOS (256).
absl::Status WriteByteShard(const std::string& path, const std::vector<std::string>& documents);

// A small corpus with learnable structure (deterministic).
std::vector<std::string> SyntheticDocuments(int count, uint64_t seed);

// Tiny corpus shared by the tests of one binary (written once, in a directory of its own).
struct Corpus {
  std::string train;
  std::string val;
};
const Corpus& TheCorpus();

// A tiny CPU training job on TheCorpus(): `steps` steps, a checkpoint every
// `checkpoint_interval` (0: only at the end and on SIGTERM).
mesa::v1::JobSpec TinyTrain(const std::string& name, int64_t steps, int64_t checkpoint_interval);
// The evaluation of `checkpoint` with TinyTrain's model and TheCorpus()'s validation shard.
mesa::v1::JobSpec TinyEval(const std::string& name, const std::string& checkpoint);
// Greedy completions of `prompts` from `checkpoint` on the CPU.
mesa::v1::JobSpec TinyGenerate(const std::string& name, const std::string& checkpoint,
                               const std::vector<std::string>& prompts);

}  // namespace mesa::e2e

#endif  // MESANET_TESTS_E2E_CLUSTER_H_
