// One attempt of a job on this worker: prepares its working directory, starts one trainer
// process per assigned rank, forwards their logs and progress events to the coordinator in
// batches, stops them on request (SIGTERM, then SIGKILL after the grace period), and reports the
// final outcome until the coordinator has it.
//
// Working directory layout (under the agent's --workdir):
//   jobs/<job_id>/attempt-<n>/job.yaml      the spec the trainer reads (checkpoint.dir filled in)
//   jobs/<job_id>/attempt-<n>/rank-<r>.log  the trainer's stdout and stderr, also forwarded
//   jobs/<job_id>/attempt-<n>/rendezvous/   multi-rank attempts: the trainers' MESA_RENDEZVOUS,
//                                           bridged to the coordinator (rendezvous_bridge.h)
// Checkpoints go to AttemptOptions::checkpoint_dir, which is the same for every attempt of a job,
// so a retry on another worker of the same (shared) file system resumes from them.
#ifndef MESANET_WORKER_ATTEMPT_H_
#define MESANET_WORKER_ATTEMPT_H_

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "mesa/v1/trainer.pb.h"
#include "mesa/v1/worker_service.pb.h"
#include "proto/worker_api_limits.h"
#include "worker/events.h"
#include "worker/exit_status.h"
#include "worker/metrics.h"
#include "worker/process.h"
#include "worker/rendezvous_bridge.h"

namespace mesa::worker {

struct AttemptOptions {
  std::string trainer;         // Path to mesa-train.
  std::string attempt_dir;     // Created if missing.
  std::string checkpoint_dir;  // Where the trainer writes (and a retry finds) checkpoints.
  std::string coordinator;     // For MESA_COORDINATOR (rendezvous of multi-node jobs).
  std::string worker_id;
  // Multi-rank attempts: the coordinator that relays the ranks' rendezvous (null: no bridge; the
  // trainers then fall back to a directory under the shared checkpoint directory).
  StubProvider rendezvous_stub;
  // The worker id and current lease for the bridge's calls (the coordinator checks them).
  std::function<std::pair<std::string, std::string>()> identity;
  // MESA_TCP_HOST: the address this node's rank 0 publishes for peers ("" = its host name).
  std::string advertise_host;
  // MESA_COLLECTIVE_TIMEOUT_S: bounds the rendezvous and every collective, so the ranks of a job
  // whose peer died or hangs fail (infrastructure, retried) instead of waiting forever.
  absl::Duration collective_timeout = absl::Seconds(300);
  absl::Duration grace = absl::Seconds(30);
  // Watchdog: trainers that print nothing (no event, no log line) for this long are stopped and
  // the attempt fails as infrastructure (a hung or SIGSTOPped single rank would otherwise keep its
  // job RUNNING forever; multi-rank jobs also have collective_timeout). Zero disables it.
  absl::Duration stall_timeout = absl::Minutes(30);
  absl::Duration flush_interval = absl::Seconds(1);
  // An update is sent at least this often even with nothing new: it renews the lease and brings
  // back cancel_requested.
  absl::Duration idle_update_interval = absl::Seconds(10);
  // Environment the trainers inherit (the agent's own); the launch variables are added
  // (launch/trainer_launch.h).
  std::vector<std::string> base_env;
  // Appended to the trainer's command line.
  std::vector<std::string> extra_args;
  size_t max_log_lines_per_update = kMaxLogLinesPerUpdate;  // the coordinator refuses more
  // Beyond this the oldest unsent lines are dropped (and the drop is logged).
  size_t max_buffered_log_lines = 20000;
  // How long to keep retrying the final report while the coordinator is unreachable.
  absl::Duration final_report_timeout = absl::Minutes(30);
  std::vector<int> user_error_codes = {kTrainerUserErrorExitCode, kTrainerDivergedExitCode};
};

struct UpdateReply {
  bool cancel_requested = false;
};

// Sends one update (the agent fills in worker id and lease). Called from the attempt's thread.
using UpdateSender =
    std::function<absl::StatusOr<UpdateReply>(mesa::v1::UpdateAttemptRequest& request)>;

class AttemptRunner {
 public:
  // `metrics` may be null.
  AttemptRunner(mesa::v1::Assignment assignment, AttemptOptions options, UpdateSender sender,
                WorkerMetrics* metrics);
  // Stops the trainers (SIGKILL after grace) and joins.
  ~AttemptRunner();

  void Start();
  // Asks the trainers to checkpoint and exit (SIGTERM), SIGKILL after the grace period. Returns
  // at once; idempotent (true the first time).
  // `grace` > 0 replaces the options' grace for this stop (a preemption's, Cancellation).
  bool Stop(const std::string& reason, absl::Duration grace = absl::ZeroDuration());
  // Gives up reporting to the coordinator (agent shutdown); the final report is attempted once.
  void Abandon();
  // True once the trainers have exited and the final report was delivered (or given up).
  bool finished() const;
  // True while trainers still run (for resource accounting).
  bool trainers_running() const;
  void Join();

  const mesa::v1::Assignment& assignment() const { return assignment_; }
  const std::string& job_id() const { return assignment_.job_id(); }
  int attempt() const { return assignment_.attempt(); }
  // The outcome sent in the final report (valid once finished()).
  mesa::v1::UpdateAttemptRequest final_report() const;

  // The trainer command line and environment for one rank (exposed for tests and docs).
  std::vector<std::string> TrainerArgv(const std::string& config_path) const;
  std::vector<std::string> TrainerEnv(const mesa::v1::RankAssignment& rank, int local_rank) const;
  // The ranks' rendezvous directory ("" when there is no bridge: one rank, or no coordinator).
  std::string RendezvousDir() const;

 private:
  struct Rank {
    mesa::v1::RankAssignment assignment;
    int local_rank = 0;
    std::unique_ptr<Subprocess> process;
    bool stop_sent = false;
    bool exit_counted = false;
    int exit_order = -1;  // Ranks that exit first are the likely cause of the others' failure.
    // From the rank's own "error" event.
    std::string error_message;
    std::deque<std::string> last_stderr;  // For failure messages.
    FILE* log_file = nullptr;
  };

  // Prepare, start the rendezvous bridge and the trainers, supervise them until they all exited,
  // then report the outcome until the coordinator has it.
  void Run();
  // Writes the job file the trainers read; returns its path.
  absl::StatusOr<std::string> Prepare();
  absl::Status StartBridge();
  absl::Status StartTrainers(const std::string& config_path) ABSL_LOCKS_EXCLUDED(mu_);
  void AddRank(const mesa::v1::RankAssignment& assigned, int local_rank)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes an exited rank off the gauges (once).
  void CountTrainerExit(Rank& rank) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Notes exits, stops the gang when one rank failed, SIGKILLs after the grace period; true once
  // every rank has exited.
  bool CheckRanks() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forwards progress and logs until every rank has exited.
  void Supervise();
  // The final report: phase, failure kind, message and result; *kind for the exit metric.
  // `refused`: `started` is a confined-paths refusal (a user error).
  mesa::v1::UpdateAttemptRequest FinalUpdate(const absl::Status& started, bool refused,
                                             std::string* kind);
  void OnLine(int rank_index, Stream stream, std::string line);
  void OnEvent(int rank_index, const mesa::v1::TrainerEvent& event)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddAgentLog(const std::string& text) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SignalAll(int sig, bool mark_stop) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Marks the attempt stopping for `reason`, logs `log_text` (if any) and sends SIGTERM; SIGKILL
  // follows after the grace period.
  void RequestStop(const std::string& reason, const std::string& log_text)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Builds an update from what has accumulated; `final` takes every buffered log line.
  mesa::v1::UpdateAttemptRequest TakeUpdate(size_t max_logs) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReturnLogs(const mesa::v1::UpdateAttemptRequest& update) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FlushProgress();
  void ReportFinal(mesa::v1::UpdateAttemptRequest final_update);
  ExitOutcome Outcome() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const mesa::v1::Assignment assignment_;
  const AttemptOptions options_;
  const UpdateSender sender_;
  WorkerMetrics* const metrics_;
  bool has_rank0_ = false;  // This worker runs global rank 0, whose events drive progress.

  std::thread thread_;
  std::unique_ptr<RendezvousBridge> bridge_;  // Used by the attempt's thread only.
  mutable absl::Mutex mu_;
  std::vector<Rank> ranks_ ABSL_GUARDED_BY(mu_);
  std::deque<mesa::v1::LogLine> logs_ ABSL_GUARDED_BY(mu_);
  size_t dropped_logs_ ABSL_GUARDED_BY(mu_) = 0;
  mesa::v1::Progress progress_ ABSL_GUARDED_BY(mu_);
  bool progress_dirty_ ABSL_GUARDED_BY(mu_) = false;
  bool have_progress_ ABSL_GUARDED_BY(mu_) = false;  // A step or eval event arrived.
  mesa::v1::JobResult result_ ABSL_GUARDED_BY(mu_);
  bool have_result_ ABSL_GUARDED_BY(mu_) = false;
  std::string checkpoint_path_ ABSL_GUARDED_BY(mu_);
  bool checkpoint_dirty_ ABSL_GUARDED_BY(mu_) = false;
  // The trainer's `resumed` event, until an update carrying it is delivered.
  std::optional<mesa::v1::ResumedFrom> resumed_ ABSL_GUARDED_BY(mu_);
  bool stopped_event_ ABSL_GUARDED_BY(mu_) = false;
  int exits_seen_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_requested_ ABSL_GUARDED_BY(mu_) = false;
  std::string stop_reason_ ABSL_GUARDED_BY(mu_);
  absl::Time kill_deadline_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  absl::Time last_output_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();  // any rank's, any stream
  bool stalled_ ABSL_GUARDED_BY(mu_) = false;  // the watchdog stopped the trainers
  bool abandoned_ ABSL_GUARDED_BY(mu_) = false;
  bool trainers_running_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  mesa::v1::UpdateAttemptRequest final_report_ ABSL_GUARDED_BY(mu_);
};

// Whether a failed final report should be retried (the coordinator may be restarting) or dropped
// (it no longer knows the attempt).
bool ShouldRetryReport(const absl::Status& status);

}  // namespace mesa::worker

#endif  // MESANET_WORKER_ATTEMPT_H_
