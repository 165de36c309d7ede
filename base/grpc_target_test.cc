#include "base/grpc_target.h"

#include "gtest/gtest.h"

namespace mesa::base {
namespace {

TEST(CoordinatorTargetTest, OneAddressPassesThroughAListBecomesAnIpList) {
  EXPECT_EQ(*CoordinatorTarget("coordinator:7000"), "coordinator:7000");
  EXPECT_EQ(*CoordinatorTarget("dns:///c.svc:7000"), "dns:///c.svc:7000");
  EXPECT_EQ(*CoordinatorTarget("127.0.0.1:7000,10.0.0.2:7001"),
            "ipv4:127.0.0.1:7000,10.0.0.2:7001");
  EXPECT_EQ(*CoordinatorTarget("[::1]:7000,[fe80::1]:7000"), "ipv6:[::1]:7000,[fe80::1]:7000");
}

TEST(CoordinatorTargetTest, ListsOfNamesBadPortsAndMixedFamiliesAreRefusedSayingWhy) {
  auto names = CoordinatorTarget("a.example:7000,b.example:7000");
  ASSERT_FALSE(names.ok());
  EXPECT_NE(names.status().message().find("one DNS name"), std::string::npos);
  EXPECT_FALSE(CoordinatorTarget("127.0.0.1:0,127.0.0.1:7000").ok());
  EXPECT_FALSE(CoordinatorTarget("127.0.0.1,127.0.0.2:7000").ok());
  EXPECT_FALSE(CoordinatorTarget("127.0.0.1:7000,").ok());
  auto mixed = CoordinatorTarget("127.0.0.1:7000,[::1]:7000");
  ASSERT_FALSE(mixed.ok());
  EXPECT_NE(mixed.status().message().find("mix"), std::string::npos);
}

}  // namespace
}  // namespace mesa::base
