// Leadership among coordinators sharing one PostgreSQL (or SQLite) store (docs/coordinator.md,
// "Replicated coordinators"): a follower polls the store's leader row until the last holder's
// lease has ended and takes it with the next epoch; the leader renews the lease in a thread of
// its own and gives up (on_lost) when another took over or no renewal got through for a whole
// lease, since another may take over after that. Every write of the leader is fenced by its epoch
// in the store (Store::SetFence), so a deposed leader that has not noticed yet commits nothing.
#ifndef MESANET_COORDINATOR_LEADERSHIP_H_
#define MESANET_COORDINATOR_LEADERSHIP_H_

#include <signal.h>

#include <functional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "coordinator/store.h"

namespace mesa::coordinator {

// A holder name unique to this process: host, pid and a random suffix (a restarted process is a
// new holder and never mistakes an old lease for its own).
std::string NewLeaderName();

// Polls every ttl / 4 until `store` makes `holder` the leader (its epoch), or until one of
// `stop_signals` (blocked in the caller) arrives: then Cancelled, with the signal in *signal.
absl::StatusOr<int64_t> WaitForLeadership(Store& store, const std::string& holder,
                                          absl::Duration ttl, const sigset_t& stop_signals,
                                          int* signal);

class LeaseKeeper {
 public:
  // Renews (holder, epoch) every ttl / 3; calls on_lost once, from its thread, when the lease is
  // lost. `store` must outlive the keeper.
  LeaseKeeper(Store* store, std::string holder, int64_t epoch, absl::Duration ttl,
              std::function<void(const absl::Status&)> on_lost);
  ~LeaseKeeper();  // stops renewing (the lease then runs out by itself)
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

 private:
  void Loop();
  Store* store_;
  const std::string holder_;
  const int64_t epoch_;
  const absl::Duration ttl_;
  std::function<void(const absl::Status&)> on_lost_;
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace mesa::coordinator

#endif  // MESANET_COORDINATOR_LEADERSHIP_H_
