#include "coordinator/leadership.h"

#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"

namespace mesa::coordinator {

std::string NewLeaderName() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  std::random_device rd;
  return absl::StrCat(host[0] ? host : "host", "-", getpid(), "-",
                      absl::Hex(static_cast<uint32_t>(rd()), absl::kZeroPad8));
}

absl::StatusOr<int64_t> WaitForLeadership(Store& store, const std::string& holder,
                                          absl::Duration ttl, const sigset_t& stop_signals,
                                          int* signal) {
  const absl::Duration poll = std::max(ttl / 4, absl::Milliseconds(50));
  while (true) {
    absl::StatusOr<std::optional<int64_t>> epoch = store.TryAcquireLeadership(holder, ttl);
    // A database that cannot be reached now may be back soon: keep polling, as a follower does.
    if (epoch.ok() && epoch->has_value()) return **epoch;
    const timespec wait = absl::ToTimespec(poll);
    const int sig = sigtimedwait(&stop_signals, nullptr, &wait);
    if (sig > 0) {
      *signal = sig;
      return absl::CancelledError(absl::StrCat("signal ", sig, " while following"));
    }
  }
}

LeaseKeeper::LeaseKeeper(Store* store, std::string holder, int64_t epoch, absl::Duration ttl,
                         std::function<void(const absl::Status&)> on_lost)
    : store_(store),
      holder_(std::move(holder)),
      epoch_(epoch),
      ttl_(ttl),
      on_lost_(std::move(on_lost)),
      thread_([this] { Loop(); }) {}

LeaseKeeper::~LeaseKeeper() {
  stop_.Notify();
  thread_.join();
}

void LeaseKeeper::Loop() {
  absl::Time renewed = absl::Now();
  while (!stop_.WaitForNotificationWithTimeout(ttl_ / 3)) {
    const absl::Status s = store_->RenewLeadership(holder_, epoch_, ttl_);
    if (s.ok()) {
      renewed = absl::Now();
      continue;
    }
    // Taken over, or unrenewed for a whole lease (by this process's clock, which runs no faster
    // than the database's by more than the renewal interval's slack): another may lead now.
    if (s.code() == absl::StatusCode::kFailedPrecondition || absl::Now() - renewed >= ttl_) {
      on_lost_(s);
      return;
    }
  }
}

}  // namespace mesa::coordinator
