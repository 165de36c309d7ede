// The gRPC target for one coordinator address or several (replicated coordinators, docs/
// coordinator.md): "host:port" passes through; "10.0.0.1:7000,10.0.0.2:7000" (IP literals, all
// IPv4 or all IPv6 "[::1]:7000") becomes gRPC's "ipv4:..."/"ipv6:..." list, over which the
// default pick-first policy connects to the first that answers — only the leader listens.
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
void SetCoordinatorClientArgs(grpc::ChannelArguments& args);

}  // namespace mesa::base

#endif  // MESANET_BASE_GRPC_TARGET_H_
