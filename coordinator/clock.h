// Time source for the coordinator. Lease expiry and rate limits read time through this interface so
// tests can move time forward instead of sleeping.
#ifndef MESANET_COORDINATOR_CLOCK_H_
#define MESANET_COORDINATOR_CLOCK_H_

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace mesa::coordinator {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
};

class RealClock : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
  static RealClock* Get() {
    static RealClock* clock = new RealClock();
    return clock;
  }
};

// A clock that only moves when told to. Thread-safe.
class FakeClock : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'800'000'000)) : now_(start) {}
  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_;
};

}  // namespace mesa::coordinator

#endif  // MESANET_COORDINATOR_CLOCK_H_
