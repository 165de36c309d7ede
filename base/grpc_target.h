// The gRPC target for one coordinator address or several (replicated coordinators, docs/
// coordinator.md): "host:port" passes through; "10.0.0.1:7000,10.0.0.2:7000" (IP literals, all
// IPv4 or all IPv6 "[::1]:7000") becomes gRPC's "ipv4:..."/"ipv6:..." list, over which the
// client's channel connects to whichever answers — only the leader listens.
#ifndef MESANET_BASE_GRPC_TARGET_H_
#define MESANET_BASE_GRPC_TARGET_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/channel_arguments.h"

namespace mesa::base {

absl::StatusOr<std::string> CoordinatorTarget(absl::string_view addresses);

// The channel arguments every client of the coordinator sets (mesactl, the worker agent): a
// reconnect backoff capped at one second (gRPC's default grows to two minutes), and keepalive
// pings (proto/api_limits.h), so that a restarted, failed-over or silent coordinator is left and
// found again in seconds.
// With a list of addresses, the round-robin policy keeps trying every address, so the moment a
// follower takes over and listens the channel is ready there (pick-first, retrying its addresses
// only when asked, took up to 17 s to find a new leader on another address in the fault tests);
// only the leader accepts connections, so every call goes to it.
void SetCoordinatorClientArgs(grpc::ChannelArguments& args, absl::string_view addresses);

}  // namespace mesa::base

#endif  // MESANET_BASE_GRPC_TARGET_H_
