#include "coordinator/preemption.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace mesa::coordinator {
namespace {

TEST(ParsePreemptionPolicy, QueuesPoliciesAndGrace) {
  absl::StatusOr<PreemptionPolicy> p =
      ParsePreemptionPolicy("prod=lower_priority/2m,batch=never,urgent=lower_priority");
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->size(), 3u);
  EXPECT_TRUE(p->at("prod").lower_priority);
  EXPECT_EQ(p->at("prod").grace, absl::Minutes(2));
  EXPECT_FALSE(p->at("batch").lower_priority);
  EXPECT_TRUE(p->at("urgent").lower_priority);
  EXPECT_EQ(p->at("urgent").grace, absl::ZeroDuration());  // the agent's --grace
  EXPECT_TRUE(ParsePreemptionPolicy("")->empty());
}

TEST(ParsePreemptionPolicy, RefusesNamingTheEntry) {
  for (const char* bad :
       {"prod", "=never", "prod=sometimes", "prod=never/1m", "prod=lower_priority/soon",
        "prod=lower_priority/2h", "prod=lower_priority/0s", "a=never,a=lower_priority"}) {
    absl::StatusOr<PreemptionPolicy> p = ParsePreemptionPolicy(bad);
    ASSERT_FALSE(p.ok()) << bad;
    EXPECT_TRUE(absl::StrContains(p.status().message(), "--queue_preemption entry")) << bad;
  }
}

}  // namespace
}  // namespace mesa::coordinator
