// mesa-coordinator: the job API, the worker API, the SQLite job store and /metrics.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/cli_flags.h"
#include "coordinator/auth.h"
#include "coordinator/clock.h"
#include "coordinator/coordinator.h"
#include "coordinator/metrics.h"
#include "coordinator/service.h"
#include "coordinator/store.h"
#include "prometheus/exposer.h"
#include "spec/confined_paths.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:50051",
          "gRPC address (host:port; port 0 picks a free port)");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:9464",
          "Prometheus /metrics address (host:port; port 0 picks a free port; empty disables)");
ABSL_FLAG(std::string, health_listen, "",
          "Also serve grpc.health.v1 alone, in plaintext, here (the kubelet's gRPC probe speaks no "
          "TLS); empty: off");
ABSL_FLAG(std::string, db, "./mesa-coordinator.db", "SQLite job store (WAL mode)");
ABSL_FLAG(
    std::string, db_synchronous, "full",
    "full: every commit is fsynced (acknowledged jobs survive power loss); normal: fsync at WAL "
    "checkpoints only (acknowledged jobs survive a crash of the process, not of the OS)");
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

// SIGUSR2 is raised by the store's failure callback: the coordinator must stop (below).
constexpr int kStoreFailedSignal = SIGUSR2;

sigset_t StopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, kStoreFailedSignal);
  return set;
}

}  // namespace

int main(int argc, char** argv) {
  mesa::base::ParseFlagsOrExit(
      argc, argv,
      "mesa-coordinator [--listen HOST:PORT] [--db FILE] [--tls_cert PEM --tls_key PEM] "
      "[--tokens_file YAML] ...\n"
      "  The MesaNet training service coordinator: job store, scheduler, gRPC API.");
  // Block SIGTERM/SIGINT in every thread (gRPC's included); the main thread waits for them.
  sigset_t stop = StopSignals();
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  using namespace mesa::coordinator;
  Store::Options so;
  so.path = absl::GetFlag(FLAGS_db);
  const std::string sync = absl::GetFlag(FLAGS_db_synchronous);
  if (sync != "full" && sync != "normal") {
    std::fprintf(stderr, "--db_synchronous must be full or normal\n");
    return 2;
  }
  so.synchronous_full = sync == "full";
  // After a failed commit memory is ahead of the store (what the failed batch did stays in the
  // coordinator's state; every later write is refused). Stop, so that a supervisor's restart
  // reloads the committed state and reconciles with the workers (docs/operations.md).
  so.on_failure = [](const absl::Status& error) {
    std::fprintf(stderr, "mesa-coordinator: job store commit failed: %s\n",
                 error.ToString().c_str());
    kill(getpid(), kStoreFailedSignal);
  };
  absl::Time t0 = absl::Now();
  auto store = Store::Open(so);
  if (!store.ok()) {
    std::fprintf(stderr, "mesa-coordinator: %s\n", store.status().ToString().c_str());
    return 1;
  }
  Metrics metrics;
  CoordinatorOptions co;
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
    std::fprintf(stderr,
                 "--job_retention, --worker_retention and --audit_retention must be >= 0, "
                 "--retention_sweep_interval > 0\n");
    return 2;
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
      std::fprintf(stderr, "quota flags (--user_*, --queue_*) must be >= 0\n");
      return 2;
    }
  }
  // Per-user quota overrides from the tokens file (read again, with the tokens, below).
  if (const std::string tokens_file = absl::GetFlag(FLAGS_tokens_file); !tokens_file.empty()) {
    absl::StatusOr<TokenTable> tokens = TokenTable::Load(tokens_file);
    if (!tokens.ok()) {
      std::fprintf(stderr, "mesa-coordinator: %s\n",
                   std::string(tokens.status().message()).c_str());
      return 2;
    }
    co.quotas.user_overrides = tokens->quota_overrides();
  }
  const StreamLimitOptions stream_limits = {
      .max_open_streams = absl::GetFlag(FLAGS_max_open_streams),
      .max_streams_per_connection = absl::GetFlag(FLAGS_max_streams_per_connection),
      .idle_connection_timeout = absl::GetFlag(FLAGS_idle_connection_timeout)};
  if (stream_limits.max_open_streams < 1 || stream_limits.max_streams_per_connection < 0) {
    std::fprintf(stderr, "--max_open_streams must be >= 1, --max_streams_per_connection >= 0\n");
    return 2;
  }
  if (stream_limits.idle_connection_timeout < absl::Seconds(1)) {
    std::fprintf(stderr, "--idle_connection_timeout must be at least 1s\n");
    return 2;
  }
  co.data_roots = absl::GetFlag(FLAGS_data_roots);
  // Paths on the workers' (shared) storage: relative to what would they be?
  for (std::string* root : co.ConfinementRoots()) {
    auto normal = mesa::spec::NormalizeConfinedPath(*root);
    if (!normal.ok()) {
      std::fprintf(stderr, "--checkpoint_root and --data_roots: \"%s\" %s\n", root->c_str(),
                   std::string(normal.status().message()).c_str());
      return 2;
    }
    *root = *normal;
  }
  auto coordinator = Coordinator::Create(store->get(), RealClock::Get(), &metrics, co);
  if (!coordinator.ok()) {
    std::fprintf(stderr, "mesa-coordinator: %s\n", coordinator.status().ToString().c_str());
    return 1;
  }
  std::fprintf(stderr, "mesa-coordinator: store %s loaded in %s\n", so.path.c_str(),
               absl::FormatDuration(absl::Now() - t0).c_str());

  std::unique_ptr<prometheus::Exposer> exposer;
  const std::string metrics_addr = absl::GetFlag(FLAGS_metrics_listen);
  if (!metrics_addr.empty()) {
    try {
      exposer = std::make_unique<prometheus::Exposer>(metrics_addr);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "mesa-coordinator: cannot serve metrics on %s: %s\n",
                   metrics_addr.c_str(), e.what());
      return 1;
    }
    exposer->RegisterCollectable(metrics.registry());
  }

  const std::string listen = absl::GetFlag(FLAGS_listen);
  if (absl::GetFlag(FLAGS_tls_reload_interval) < absl::Seconds(1)) {
    std::fprintf(stderr, "--tls_reload_interval must be at least 1s\n");
    return 2;
  }
  auto security =
      ConfigureServerSecurity({.listen = listen,
                               .tls_cert = absl::GetFlag(FLAGS_tls_cert),
                               .tls_key = absl::GetFlag(FLAGS_tls_key),
                               .client_ca = absl::GetFlag(FLAGS_client_ca),
                               .tokens_file = absl::GetFlag(FLAGS_tokens_file),
                               .insecure = absl::GetFlag(FLAGS_insecure),
                               .tls_reload_interval = absl::GetFlag(FLAGS_tls_reload_interval)});
  if (!security.ok()) {
    std::fprintf(stderr, "mesa-coordinator: %s\n",
                 std::string(security.status().message()).c_str());
    return 2;
  }
  for (const std::string& warning : security->warnings) {
    std::fprintf(stderr, "mesa-coordinator: %s\n", warning.c_str());
  }
  const std::string health_addr = absl::GetFlag(FLAGS_health_listen);
  auto server = Server::Start(listen, coordinator->get(), &metrics, stream_limits,
                              {security->credentials, security->authenticator}, health_addr);
  if (!server.ok()) {
    std::fprintf(stderr, "mesa-coordinator: %s\n", server.status().ToString().c_str());
    return 1;
  }
  std::string host = listen.substr(0, listen.rfind(':'));
  std::printf("listening on %s:%d\n", host.c_str(), (*server)->port());
  if (!health_addr.empty()) {
    std::printf("health on %s:%d\n", health_addr.substr(0, health_addr.rfind(':')).c_str(),
                (*server)->health_port());
  }
  if (exposer) {
    std::string mhost = metrics_addr.substr(0, metrics_addr.rfind(':'));
    std::printf("metrics on %s:%d\n", mhost.c_str(),
                static_cast<int>(exposer->GetListeningPorts().front()));
  }
  std::fflush(stdout);

  int sig = 0;
  sigwait(&stop, &sig);
  const bool store_failed = sig == kStoreFailedSignal;
  if (store_failed) {
    std::fprintf(stderr,
                 "mesa-coordinator: stopping: the job store no longer accepts writes; "
                 "restart to reload the committed state\n");
  } else {
    std::fprintf(stderr, "mesa-coordinator: signal %d, shutting down\n", sig);
  }
  // Stop waking long polls first so in-flight RPCs end, then stop the server and flush the store.
  (*coordinator)->Shutdown();
  // Unary calls finish in milliseconds and long polls were just woken, so a short deadline only
  // cuts off streams that would otherwise keep the process alive (idle channels included).
  (*server)->Shutdown(absl::Seconds(1));
  absl::Status flushed = (*store)->Flush();
  server->reset();
  coordinator->reset();
  store->reset();
  std::fprintf(stderr, "mesa-coordinator: stopped (%s)\n", flushed.ToString().c_str());
  return flushed.ok() && !store_failed ? 0 : 1;
}
