// Helpers shared by the files that implement `Coordinator` (coordinator.cc, coordinator_jobs.cc,
// coordinator_workers.cc, coordinator_rendezvous.cc). Private to the :coordinator library.
#ifndef MESANET_COORDINATOR_COORDINATOR_INTERNAL_H_
#define MESANET_COORDINATOR_COORDINATOR_INTERNAL_H_

#include <cstddef>
#include <cstdint>

#include "absl/time/time.h"
#include "google/protobuf/timestamp.pb.h"

namespace mesa::coordinator::internal {

// Bounds on what workers send that are cut rather than refused (request bounds that refuse are in
// validation.h, with the others).
inline constexpr size_t kMaxAttemptMessageBytes = 16384;
inline constexpr size_t kMaxRendezvousKeys = 4096;  // per attempt: a few keys per rank

// Microsecond precision; rounds down before 1970 too (nanos stay in [0, 1e9)).
inline void SetTime(absl::Time t, google::protobuf::Timestamp* ts) {
  int64_t us = absl::ToUnixMicros(t);
  int64_t s = us >= 0 ? us / 1000000 : -((-us + 999999) / 1000000);
  ts->set_seconds(s);
  ts->set_nanos(static_cast<int32_t>((us - s * 1000000) * 1000));
}

}  // namespace mesa::coordinator::internal

#endif  // MESANET_COORDINATOR_COORDINATOR_INTERNAL_H_
