// Helpers shared by the files that implement `Coordinator` (coordinator.cc, coordinator_jobs.cc,
// coordinator_workers.cc, coordinator_rendezvous.cc). Private to the :coordinator library.
#ifndef MESANET_COORDINATOR_COORDINATOR_INTERNAL_H_
#define MESANET_COORDINATOR_COORDINATOR_INTERNAL_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "absl/time/time.h"
#include "coordinator/scheduler.h"
#include "google/protobuf/timestamp.pb.h"
#include "mesa/v1/job.pb.h"

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

// What a job asks the scheduler for.
inline Demand DemandOf(const mesa::v1::JobSpec& spec) {
  Demand d;
  d.gpus = spec.resources().gpus();
  d.max_gpus_per_node = spec.resources().max_gpus_per_node();
  d.cpu_threads = std::max(spec.resources().cpu_threads(), 1);
  d.cpu_ranks = std::max(spec.resources().cpu_ranks(), 1);
  d.memory_bytes = std::max<int64_t>(spec.resources().memory_bytes(), 0);
  return d;
}

}  // namespace mesa::coordinator::internal

#endif  // MESANET_COORDINATOR_COORDINATOR_INTERNAL_H_
