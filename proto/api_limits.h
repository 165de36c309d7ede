// Limits of the gRPC API that every process speaking it must agree on: the coordinator's server,
// mesactl, the worker agent and the test harnesses. One definition, included by all of them.
#ifndef MESANET_PROTO_API_LIMITS_H_
#define MESANET_PROTO_API_LIMITS_H_

#include <cstddef>
#include <cstdint>

namespace mesa {

// Bytes of one request message the coordinator accepts (job specs, worker reports). Checked on the
// bytes as they arrive: the coordinator accepts no compressed requests, so a small message can
// never inflate past this (docs/security.md, "Request limits").
inline constexpr int kMaxRequestBytes = 16 << 20;
// Bytes of one response message: the coordinator sends no more, and its clients accept this much
// (gRPC's client default is 4 MiB, less than a job with a large result).
inline constexpr int kMaxResponseBytes = 64 << 20;
// Bytes of a job's stored result (its serialized JobResult): a job with its result, spec and
// status always fits one response, with room to spare.
inline constexpr int64_t kMaxJobResultBytes = int64_t{12} << 20;

// Keepalive: clients (mesactl, the worker agent) ping a connection that has been quiet this long
// and give it up when the answer takes longer than the timeout, so that a coordinator that
// stopped answering (paused, or its machine gone) is left for another address (a replicated
// coordinator's follower that took over) in seconds; the server accepts pings this often.
inline constexpr int kClientKeepaliveMs = 3000;
inline constexpr int kClientKeepaliveTimeoutMs = 2000;
inline constexpr int kServerMinPingIntervalMs = 1000;

}  // namespace mesa

#endif  // MESANET_PROTO_API_LIMITS_H_
