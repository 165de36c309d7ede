// mesa-coordinator: the job API, the worker API, the job store (SQLite or PostgreSQL) and /metrics.
// This file turns the flags into RunOptions (every flag check in one place); coordinator/run.cc
// runs them.
#include <cstdio>
#include <string>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/cli_flags.h"
#include "coordinator/preemption.h"
#include "coordinator/run.h"
#include "spec/confined_paths.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:50051",
          "gRPC address (host:port; port 0 picks a free port)");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:9464",
          "Prometheus /metrics address (host:port; port 0 picks a free port; empty disables)");
ABSL_FLAG(std::string, health_listen, "",
          "Also serve grpc.health.v1 alone, in plaintext, here (the kubelet's gRPC probe speaks no "
          "TLS); empty: off");
ABSL_FLAG(std::string, db, "./mesa-coordinator.db",
          "Job store: an SQLite file (WAL mode; created if missing) or a PostgreSQL database, "
          "postgresql://user[:password]@host[:port]/dbname (libpq's URI; the tables are created "
          "on first use)");
ABSL_FLAG(
    std::string, db_synchronous, "full",
    "SQLite: full: every commit is fsynced (acknowledged jobs survive power loss); normal: fsync "
    "at WAL checkpoints only (acknowledged jobs survive a crash of the process, not of the OS). "
    "PostgreSQL: the server's synchronous_commit decides");
ABSL_FLAG(absl::Duration, leader_lease, absl::ZeroDuration(),
          "Replicated coordinators (several processes on one PostgreSQL --db): > 0, e.g. 10s: "
          "follow until the store's leader lease is free, then lead (listen, schedule) while "
          "renewing it every third of it, and stop if it is lost; every write is fenced by the "
          "leader's epoch. 0: this coordinator is the only one");
ABSL_FLAG(std::string, leader_name, "",
          "This process's name in the leader row (default: host-pid-random)");
ABSL_FLAG(absl::Duration, lease_ttl, absl::Seconds(15),
          "A worker silent this long is lost; its jobs retry");
ABSL_FLAG(absl::Duration, heartbeat_interval, absl::Seconds(5),
          "Heartbeat interval suggested to workers");
ABSL_FLAG(absl::Duration, progress_event_interval, absl::Seconds(1),
          "Minimum interval between stored PROGRESS events of one job");
ABSL_FLAG(std::string, checkpoint_root, "",
          "Shared storage for checkpoints: a job without checkpoint.dir writes to "
          "<checkpoint_root>/<job_id> on whatever worker runs it (empty: each worker's own "
          "--checkpoint_root). When set, a spec's checkpoint.dir must lie inside it (docs/"
          "coordinator.md, Confined paths)");
ABSL_FLAG(std::vector<std::string>, data_roots, {},
          "Comma-separated directories jobs may read: when set, every data path (and checkpoint "
          "read, which may also be under --checkpoint_root) of a spec must lie inside one");
ABSL_FLAG(int64_t, max_loaded_finished_jobs, 10000,
          "Finished jobs kept whole in memory; older ones are read back from the store on demand");
ABSL_FLAG(absl::Duration, job_retention, absl::Hours(24 * 30),
          "Finished jobs (succeeded, failed, cancelled) that ended longer ago are deleted, with "
          "their events and log lines; 0 keeps them for ever. Jobs not finished are never deleted");
ABSL_FLAG(absl::Duration, worker_retention, absl::Hours(24 * 7),
          "Workers lost longer ago are forgotten (memory and store); 0 keeps them for ever");
ABSL_FLAG(absl::Duration, audit_retention, absl::Hours(24 * 90),
          "Audit records (the store's audit log) older than this are deleted by the retention "
          "sweep; 0 keeps them for ever");
ABSL_FLAG(absl::Duration, retention_sweep_interval, absl::Minutes(10),
          "How often the retention sweep runs");

// Quotas (docs/coordinator.md "Quotas"); 0 = unlimited. Per user: each job owner (without
// --tokens_file, all callers are one anonymous user). Per queue: each queue on its own.
ABSL_FLAG(int64_t, user_max_queued_jobs, 0,
          "Jobs one user may have queued (QUEUED or RETRYING) at once; more: RESOURCE_EXHAUSTED");
ABSL_FLAG(int64_t, user_max_gpus, 0,
          "GPUs one user's running jobs may hold together; a job needing more than this alone is "
          "refused, others wait queued until the user's GPUs are freed");
ABSL_FLAG(double, user_submit_rate, 0,
          "Submissions a minute per user (token bucket of --user_submit_burst)");
ABSL_FLAG(int64_t, user_submit_burst, 0,
          "Submissions one user may make at once before --user_submit_rate applies (0: the rate "
          "rounded up)");
ABSL_FLAG(int64_t, queue_max_queued_jobs, 0, "Like --user_max_queued_jobs, for each queue");
ABSL_FLAG(int64_t, queue_max_gpus, 0, "Like --user_max_gpus, for each queue");
ABSL_FLAG(double, queue_submit_rate, 0, "Like --user_submit_rate, for each queue");
ABSL_FLAG(int64_t, queue_submit_burst, 0, "Like --user_submit_burst, for each queue");
ABSL_FLAG(std::string, queue_preemption, "",
          "Preemption by queue: QUEUE=lower_priority[/GRACE] lets a pending job of QUEUE that "
          "cannot be placed stop (checkpoint, requeue) running jobs of lower priority, giving "
          "them GRACE before SIGKILL (default: the agent's --grace); QUEUE=never (every queue not "
          "listed) waits. Comma-separated, e.g. prod=lower_priority/2m");
ABSL_FLAG(int, max_open_streams, 1024,
          "WatchJob and GetJobLogs streams open at once, all connections together (each holds a "
          "server thread); more: RESOURCE_EXHAUSTED");
ABSL_FLAG(absl::Duration, idle_connection_timeout, absl::Minutes(5),
          "Close a client connection with no call in flight for this long (a TLS handshake must "
          "finish within the smaller of this and 30s); clients reconnect when they next call");
ABSL_FLAG(int, max_streams_per_connection, 64,
          "WatchJob and GetJobLogs streams one client connection may hold open at once (0: no "
          "per-connection cap); more: RESOURCE_EXHAUSTED. Raise it for a proxy that carries many "
          "users' streams on one connection");

// Transport security and authentication (docs/security.md).
ABSL_FLAG(std::string, tls_cert, "", "TLS server certificate chain (PEM); with --tls_key");
ABSL_FLAG(std::string, tls_key, "", "Private key of --tls_cert (PEM)");
ABSL_FLAG(std::string, client_ca, "",
          "CA (PEM) whose client certificates workers must present: the worker API refuses "
          "callers without one (UNAUTHENTICATED). Needs --tls_cert");
ABSL_FLAG(std::string, tokens_file, "",
          "YAML `users: [{name, token, role: user|viewer|admin}]`: every job API call must carry "
          "`authorization: Bearer <token>` of one of them (UNAUTHENTICATED otherwise)");
ABSL_FLAG(absl::Duration, tls_reload_interval, absl::Seconds(60),
          "How often --tls_cert, --tls_key and --client_ca are read again: renewed files (e.g. a "
          "cert-manager Secret) apply to new connections without a restart (whole seconds, >= 1s)");
ABSL_FLAG(bool, insecure, false,
          "Plaintext gRPC, for loopback development only (refused on any other --listen address). "
          "Without TLS flags a loopback --listen is plaintext too");

namespace {

using mesa::coordinator::QuotaLimits;
using mesa::coordinator::RunOptions;

absl::Status Invalid(std::string message) { return absl::InvalidArgumentError(message); }

// Every flag check; an error is a usage error (exit 2).
absl::StatusOr<RunOptions> OptionsFromFlags() {
  RunOptions options;
  options.store.path = absl::GetFlag(FLAGS_db);
  const std::string sync = absl::GetFlag(FLAGS_db_synchronous);
  if (sync != "full" && sync != "normal") return Invalid("--db_synchronous must be full or normal");
  options.store.synchronous_full = sync == "full";
  options.leader_lease = absl::GetFlag(FLAGS_leader_lease);
  if (options.leader_lease < absl::ZeroDuration()) return Invalid("--leader_lease must be >= 0");
  if (options.leader_lease > absl::ZeroDuration() &&
      options.leader_lease < absl::Milliseconds(500)) {
    return Invalid("--leader_lease must be 0 (off) or at least 500ms (it is renewed every third)");
  }
  options.leader_name = absl::GetFlag(FLAGS_leader_name);

  mesa::coordinator::CoordinatorOptions& co = options.coordinator;
  co.lease_ttl = absl::GetFlag(FLAGS_lease_ttl);
  co.heartbeat_interval = absl::GetFlag(FLAGS_heartbeat_interval);
  co.progress_event_interval = absl::GetFlag(FLAGS_progress_event_interval);
  co.max_loaded_finished_jobs = absl::GetFlag(FLAGS_max_loaded_finished_jobs);
  co.checkpoint_root = absl::GetFlag(FLAGS_checkpoint_root);
  co.job_retention = absl::GetFlag(FLAGS_job_retention);
  co.worker_retention = absl::GetFlag(FLAGS_worker_retention);
  co.retention_sweep_interval = absl::GetFlag(FLAGS_retention_sweep_interval);
  co.audit_retention = absl::GetFlag(FLAGS_audit_retention);
  if (co.job_retention < absl::ZeroDuration() || co.worker_retention < absl::ZeroDuration() ||
      co.audit_retention < absl::ZeroDuration() ||
      co.retention_sweep_interval <= absl::ZeroDuration()) {
    return Invalid(
        "--job_retention, --worker_retention and --audit_retention must be >= 0, "
        "--retention_sweep_interval > 0");
  }
  co.quotas.user = {.max_queued_jobs = absl::GetFlag(FLAGS_user_max_queued_jobs),
                    .max_gpus = absl::GetFlag(FLAGS_user_max_gpus),
                    .submit_rate = absl::GetFlag(FLAGS_user_submit_rate),
                    .submit_burst = absl::GetFlag(FLAGS_user_submit_burst)};
  co.quotas.queue = {.max_queued_jobs = absl::GetFlag(FLAGS_queue_max_queued_jobs),
                     .max_gpus = absl::GetFlag(FLAGS_queue_max_gpus),
                     .submit_rate = absl::GetFlag(FLAGS_queue_submit_rate),
                     .submit_burst = absl::GetFlag(FLAGS_queue_submit_burst)};
  for (const QuotaLimits& l : {co.quotas.user, co.quotas.queue}) {
    if (l.max_queued_jobs < 0 || l.max_gpus < 0 || l.submit_rate < 0 || l.submit_burst < 0) {
      return Invalid("quota flags (--user_*, --queue_*) must be >= 0");
    }
  }
  absl::StatusOr<mesa::coordinator::PreemptionPolicy> preemption =
      mesa::coordinator::ParsePreemptionPolicy(absl::GetFlag(FLAGS_queue_preemption));
  if (!preemption.ok()) return Invalid(std::string(preemption.status().message()));
  co.preemption = *std::move(preemption);
  // Per-user quota overrides from the tokens file (read again, with the tokens, by Run).
  if (const std::string tokens_file = absl::GetFlag(FLAGS_tokens_file); !tokens_file.empty()) {
    absl::StatusOr<mesa::coordinator::TokenTable> tokens =
        mesa::coordinator::TokenTable::Load(tokens_file);
    if (!tokens.ok()) return Invalid(std::string(tokens.status().message()));
    co.quotas.user_overrides = tokens->quota_overrides();
  }
  options.stream_limits = {
      .max_open_streams = absl::GetFlag(FLAGS_max_open_streams),
      .max_streams_per_connection = absl::GetFlag(FLAGS_max_streams_per_connection),
      .idle_connection_timeout = absl::GetFlag(FLAGS_idle_connection_timeout)};
  if (options.stream_limits.max_open_streams < 1 ||
      options.stream_limits.max_streams_per_connection < 0) {
    return Invalid("--max_open_streams must be >= 1, --max_streams_per_connection >= 0");
  }
  if (options.stream_limits.idle_connection_timeout < absl::Seconds(1)) {
    return Invalid("--idle_connection_timeout must be at least 1s");
  }
  co.data_roots = absl::GetFlag(FLAGS_data_roots);
  // Paths on the workers' (shared) storage: relative to what would they be?
  for (std::string* root : co.ConfinementRoots()) {
    auto normal = mesa::spec::NormalizeConfinedPath(*root);
    if (!normal.ok()) {
      return Invalid(absl::StrCat("--checkpoint_root and --data_roots: \"", *root, "\" ",
                                  normal.status().message()));
    }
    *root = *normal;
  }
  if (absl::GetFlag(FLAGS_tls_reload_interval) < absl::Seconds(1)) {
    return Invalid("--tls_reload_interval must be at least 1s");
  }
  options.security = {.listen = absl::GetFlag(FLAGS_listen),
                      .tls_cert = absl::GetFlag(FLAGS_tls_cert),
                      .tls_key = absl::GetFlag(FLAGS_tls_key),
                      .client_ca = absl::GetFlag(FLAGS_client_ca),
                      .tokens_file = absl::GetFlag(FLAGS_tokens_file),
                      .insecure = absl::GetFlag(FLAGS_insecure),
                      .tls_reload_interval = absl::GetFlag(FLAGS_tls_reload_interval)};
  options.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  options.health_listen = absl::GetFlag(FLAGS_health_listen);
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  mesa::base::ParseFlagsOrExit(
      argc, argv,
      "mesa-coordinator [--listen HOST:PORT] [--db FILE] [--tls_cert PEM --tls_key PEM] "
      "[--tokens_file YAML] ...\n"
      "  The MesaNet training service coordinator: job store, scheduler, gRPC API.");
  // Block SIGTERM/SIGINT in every thread (gRPC's included); Run's thread waits for them.
  const sigset_t stop = mesa::coordinator::BlockStopSignals();
  absl::StatusOr<RunOptions> options = OptionsFromFlags();
  if (!options.ok()) {
    std::fprintf(stderr, "mesa-coordinator: %s\n", std::string(options.status().message()).c_str());
    return 2;
  }
  return mesa::coordinator::Run(*std::move(options), stop);
}
