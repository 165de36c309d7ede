#include "coordinator/stream_limits.h"

#include <optional>
#include <vector>

#include "gtest/gtest.h"

namespace mesa::coordinator {
namespace {

TEST(StreamLimits, PerConnectionCapLeavesOtherConnectionsTheirSlots) {
  StreamLimits limits({.max_open_streams = 10, .max_streams_per_connection = 2});
  std::vector<StreamLimits::Slot> held;
  for (int i = 0; i < 2; ++i) {
    auto slot = limits.Open("ipv4:10.0.0.1:4000");
    ASSERT_TRUE(slot.ok()) << slot.status();
    held.push_back(std::move(*slot));
  }
  auto refused = limits.Open("ipv4:10.0.0.1:4000");
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("max_streams_per_connection"), std::string::npos);
  EXPECT_NE(refused.status().message().find("at most 2 "), std::string::npos);
  auto other = limits.Open("ipv4:10.0.0.1:4001");
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(limits.open(), 3);
  EXPECT_EQ(limits.open("ipv4:10.0.0.1:4000"), 2);
  held.pop_back();  // closing a stream frees its connection's slot
  EXPECT_EQ(limits.open("ipv4:10.0.0.1:4000"), 1);
  EXPECT_TRUE(limits.Open("ipv4:10.0.0.1:4000").ok());
}

TEST(StreamLimits, ServerCapCountsEveryConnection) {
  StreamLimits limits({.max_open_streams = 2, .max_streams_per_connection = 0});
  auto a = limits.Open("a");
  auto b = limits.Open("a");
  ASSERT_TRUE(a.ok() && b.ok());
  auto refused = limits.Open("b");
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("max_open_streams"), std::string::npos);
  std::optional<StreamLimits::Slot> moved(std::move(*a));  // a moved-from slot frees nothing
  EXPECT_EQ(limits.open(), 2);
  moved.reset();
  EXPECT_EQ(limits.open(), 1);
  EXPECT_EQ(limits.open("a"), 1);
}

}  // namespace
}  // namespace mesa::coordinator
