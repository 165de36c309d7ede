// How the worker agent starts mesa-train, in one place for both sides (docs/launch.md):
//   - the command line: TrainerArgv builds it; mesa-train's flags of the same names parse it;
//   - the environment: the agent encodes a TrainerEnvironment into MESA_* variables
//     (EncodeTrainerEnvironment), the trainer decodes and checks them (DecodeTrainerEnvironment);
//   - the files: the job file in the attempt directory, events on a pipe at a fixed descriptor.
// Progress events and exit codes are the other half of the contract: proto/mesa/v1/trainer.proto.
#ifndef MESANET_LAUNCH_TRAINER_LAUNCH_H_
#define MESANET_LAUNCH_TRAINER_LAUNCH_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mesa::launch {

// Set by the agent for every rank. Inherited values of these are dropped (IsAgentOwnedVariable).
inline constexpr char kEnvJobId[] = "MESA_JOB_ID";
inline constexpr char kEnvAttempt[] = "MESA_ATTEMPT";
inline constexpr char kEnvRank[] = "MESA_RANK";
inline constexpr char kEnvWorldSize[] = "MESA_WORLD_SIZE";
inline constexpr char kEnvLocalRank[] = "MESA_LOCAL_RANK";
inline constexpr char kEnvCoordinator[] = "MESA_COORDINATOR";
inline constexpr char kEnvWorkerId[] = "MESA_WORKER_ID";
inline constexpr char kEnvWorkers[] = "MESA_WORKERS";
inline constexpr char kEnvCheckpointDir[] = "MESA_CHECKPOINT_DIR";
inline constexpr char kEnvCollectiveTimeoutS[] = "MESA_COLLECTIVE_TIMEOUT_S";
inline constexpr char kEnvRendezvous[] = "MESA_RENDEZVOUS";
inline constexpr char kEnvTcpHost[] = "MESA_TCP_HOST";
inline constexpr char kEnvDevice[] = "MESA_DEVICE";
inline constexpr char kEnvGpuIndex[] = "MESA_GPU_INDEX";
inline constexpr char kEnvCpuThreads[] = "MESA_CPU_THREADS";
// Operator tuning, never set by the agent: inherited from the agent's own environment.
inline constexpr char kEnvGradBucketMb[] = "MESA_GRAD_BUCKET_MB";
inline constexpr char kEnvNcclStreamPriority[] = "MESA_NCCL_STREAM_PRIORITY";
inline constexpr char kEnvPeakFlops[] = "MESA_PEAK_FLOPS";

// The attempt directory holds the job file the trainer reads (the spec as JSON, which is YAML).
inline constexpr char kJobFileName[] = "job.yaml";
// The trainer's events pipe (--events_fd) in the processes the agent starts.
inline constexpr int kEventsFd = 3;

struct TrainerEnvironment {
  // Written by the agent.
  std::string job_id;
  int attempt = 0;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string coordinator;
  std::string worker_id;
  std::vector<std::string> workers;  // Workers of the attempt in rank order.
  std::string checkpoint_dir;        // The job's checkpoint root: the trainer resumes from it.
  int collective_timeout_s = 300;    // Bounds the rendezvous and every collective.
  std::string rendezvous;            // "file:DIR", or empty.
  std::string tcp_host;              // Address rank 0 of a CPU job publishes, or empty.
  std::string device;                // "cpu", "cuda", or empty (the spec decides).
  int gpu_index = -1;                // The node's GPU index of a GPU rank; -1 for CPU ranks.
  int cpu_threads = 0;               // 0: not set.
  // Tuning (read only). Negative / empty / 0: not set.
  double grad_bucket_mb = -1;
  std::string nccl_stream_priority;  // "high" or "normal"
  double peak_flops = 0;
};

// The agent's side: `inherited` (the agent's own environment, "NAME=value" entries) without the
// agent-owned variables, then the rank's. A GPU rank sees only its GPU (CUDA_VISIBLE_DEVICES);
// a CPU rank sees none, so device "auto" cannot pick up a GPU of the node.
std::vector<std::string> EncodeTrainerEnvironment(const TrainerEnvironment& env,
                                                  const std::vector<std::string>& inherited);

// True for "NAME=value" entries whose NAME the agent sets itself (MESA_* except the tuning
// variables, CUDA_VISIBLE_DEVICES, OMP_NUM_THREADS, OPENBLAS_NUM_THREADS).
bool IsAgentOwnedVariable(absl::string_view entry);

// getenv, or a stand-in for tests.
using EnvLookup = std::function<const char*(const char*)>;

// The trainer's side: every variable checked (InvalidArgument names it); absent ones keep the
// defaults above. `lookup` null: getenv.
absl::StatusOr<TrainerEnvironment> DecodeTrainerEnvironment(const EnvLookup& lookup = nullptr);

// Parses an integer variable; absent or empty → `fallback`.
absl::StatusOr<int> IntVariable(const EnvLookup& lookup, const char* name, int fallback);

// The command line of one trainer process. mesa-train's flags of the same names read it.
struct TrainerArgs {
  std::string config_path;  // --config
  int events_fd = kEventsFd;
  std::string workdir;  // --workdir: the attempt directory
};
std::vector<std::string> TrainerArgv(const std::string& trainer_binary, const TrainerArgs& args);

// The checkpoint root of a job: the spec's checkpoint.dir when set, else <root>/<job_id>.
std::string JobCheckpointDir(absl::string_view spec_dir, absl::string_view root,
                             absl::string_view job_id);

}  // namespace mesa::launch

#endif  // MESANET_LAUNCH_TRAINER_LAUNCH_H_
