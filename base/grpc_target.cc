#include "base/grpc_target.h"

#include <arpa/inet.h>

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "proto/api_limits.h"

namespace mesa::base {
namespace {

// 1: IPv4 "a.b.c.d:port", 2: IPv6 "[addr]:port", 0: neither.
int IpFamily(absl::string_view address) {
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos) return 0;
  int port = 0;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 1 || port > 65535) return 0;
  std::string host(address.substr(0, colon));
  unsigned char buf[16];
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    return inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), buf) == 1 ? 2 : 0;
  }
  return inet_pton(AF_INET, host.c_str(), buf) == 1 ? 1 : 0;
}

}  // namespace

absl::StatusOr<std::string> CoordinatorTarget(absl::string_view addresses) {
  if (addresses.find(',') == absl::string_view::npos) return std::string(addresses);
  const std::vector<absl::string_view> list = absl::StrSplit(addresses, ',');
  int family = -1;
  for (absl::string_view a : list) {
    const int f = IpFamily(a);
    if (f == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "coordinator address '", a, "' in the list '", addresses,
          "' is not an IP:port: list IP addresses (IPv6 as [addr]:port), or give one DNS name "
          "that resolves to every coordinator (a Kubernetes Service)"));
    }
    if (family != -1 && f != family) {
      return absl::InvalidArgumentError(
          absl::StrCat("coordinator addresses '", addresses, "' mix IPv4 and IPv6"));
    }
    family = f;
  }
  return absl::StrCat(family == 1 ? "ipv4:" : "ipv6:", absl::StrJoin(list, ","));
}

void SetCoordinatorClientArgs(grpc::ChannelArguments& args, absl::string_view addresses) {
  if (addresses.find(',') != absl::string_view::npos)
    args.SetLoadBalancingPolicyName("round_robin");
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kClientKeepaliveMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kClientKeepaliveTimeoutMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
}

}  // namespace mesa::base
