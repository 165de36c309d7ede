#include "coordinator/run.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "coordinator/clock.h"
#include "coordinator/leadership.h"
#include "coordinator/metrics.h"
#include "coordinator/service.h"
#include "prometheus/exposer.h"

namespace mesa::coordinator {
namespace {

// SIGUSR2 is raised by the store's failure callback and when leadership is lost: the coordinator
// must stop (below).
constexpr int kStoreFailedSignal = SIGUSR2;

std::string HostOf(const std::string& address) { return address.substr(0, address.rfind(':')); }

}  // namespace

sigset_t BlockStopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, kStoreFailedSignal);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

int Run(RunOptions options, const sigset_t& stop_signals) {
  // After a failed commit memory is ahead of the store (what the failed batch did stays in the
  // coordinator's state; every later write is refused). Stop, so that a supervisor's restart
  // reloads the committed state and reconciles with the workers (docs/operations.md).
  options.store.on_failure = [](const absl::Status& error) {
    std::fprintf(stderr, "mesa-coordinator: job store commit failed: %s\n",
                 error.ToString().c_str());
    kill(getpid(), kStoreFailedSignal);
  };
  auto store = Store::Open(options.store);
  if (!store.ok()) {
    std::fprintf(stderr, "mesa-coordinator: %s\n", store.status().ToString().c_str());
    return 1;
  }
  Metrics metrics;
  // A follower serves /metrics (leader 0) while it waits.
  std::unique_ptr<prometheus::Exposer> exposer;
  if (!options.metrics_listen.empty()) {
    try {
      exposer = std::make_unique<prometheus::Exposer>(options.metrics_listen);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "mesa-coordinator: cannot serve metrics on %s: %s\n",
                   options.metrics_listen.c_str(), e.what());
      return 1;
    }
    exposer->RegisterCollectable(metrics.registry());
    std::printf("metrics on %s:%d\n", HostOf(options.metrics_listen).c_str(),
                static_cast<int>(exposer->GetListeningPorts().front()));
    std::fflush(stdout);
  }

  // Bad security files fail now, not once a follower comes to lead.
  auto security = ConfigureServerSecurity(options.security);
  if (!security.ok()) {
    std::fprintf(stderr, "mesa-coordinator: %s\n",
                 std::string(security.status().message()).c_str());
    return 2;
  }
  for (const std::string& warning : security->warnings) {
    std::fprintf(stderr, "mesa-coordinator: %s\n", warning.c_str());
  }

  // Replicated: lead only once the store's leader lease is ours; every write is fenced by it.
  std::unique_ptr<LeaseKeeper> lease;
  int64_t epoch = 0;
  if (options.leader_lease > absl::ZeroDuration()) {
    const std::string holder = options.leader_name.empty() ? NewLeaderName() : options.leader_name;
    metrics.SetLeadership(false, 0);
    std::printf("following as %s (leader lease %s)\n", holder.c_str(),
                absl::FormatDuration(options.leader_lease).c_str());
    std::fflush(stdout);
    int sig = 0;
    absl::StatusOr<int64_t> won =
        WaitForLeadership(**store, holder, options.leader_lease, stop_signals, &sig);
    if (!won.ok()) {
      std::fprintf(stderr, "mesa-coordinator: signal %d while following, stopped\n", sig);
      return sig == kStoreFailedSignal ? 1 : 0;
    }
    epoch = *won;
    (*store)->SetFence(holder, epoch);
    lease = std::make_unique<LeaseKeeper>(
        store->get(), holder, epoch, options.leader_lease, [](const absl::Status& why) {
          std::fprintf(stderr, "mesa-coordinator: leadership lost: %s\n", why.ToString().c_str());
          kill(getpid(), kStoreFailedSignal);
        });
    std::fprintf(stderr, "mesa-coordinator: leader of epoch %lld as %s\n",
                 static_cast<long long>(epoch), holder.c_str());
  }
  metrics.SetLeadership(true, epoch);
  const absl::Time load_start = absl::Now();
  auto coordinator =
      Coordinator::Create(store->get(), RealClock::Get(), &metrics, options.coordinator);
  if (!coordinator.ok()) {
    std::fprintf(stderr, "mesa-coordinator: %s\n", coordinator.status().ToString().c_str());
    return 1;
  }
  std::fprintf(stderr, "mesa-coordinator: store %s loaded in %s\n", options.store.path.c_str(),
               absl::FormatDuration(absl::Now() - load_start).c_str());

  const std::string& listen = options.security.listen;
  auto server =
      Server::Start(listen, coordinator->get(), &metrics, options.stream_limits,
                    {security->credentials, security->authenticator}, options.health_listen);
  if (!server.ok()) {
    std::fprintf(stderr, "mesa-coordinator: %s\n", server.status().ToString().c_str());
    return 1;
  }
  std::printf("listening on %s:%d\n", HostOf(listen).c_str(), (*server)->port());
  if (!options.health_listen.empty()) {
    std::printf("health on %s:%d\n", HostOf(options.health_listen).c_str(),
                (*server)->health_port());
  }
  std::fflush(stdout);

  int sig = 0;
  sigwait(&stop_signals, &sig);
  const bool store_failed = sig == kStoreFailedSignal;
  if (store_failed) {
    std::fprintf(stderr,
                 "mesa-coordinator: stopping: the job store no longer accepts writes (or "
                 "leadership was lost); restart to reload the committed state\n");
  } else {
    std::fprintf(stderr, "mesa-coordinator: signal %d, shutting down\n", sig);
  }
  // Stop waking long polls first so in-flight RPCs end, then stop the server and flush the store.
  (*coordinator)->Shutdown();
  // Unary calls finish in milliseconds and long polls were just woken, so a short deadline only
  // cuts off streams that would otherwise keep the process alive (idle channels included).
  (*server)->Shutdown(absl::Seconds(1));
  const absl::Status flushed = (*store)->Flush();
  server->reset();
  coordinator->reset();
  lease.reset();
  store->reset();
  std::fprintf(stderr, "mesa-coordinator: stopped (%s)\n", flushed.ToString().c_str());
  return flushed.ok() && !store_failed ? 0 : 1;
}

}  // namespace mesa::coordinator
