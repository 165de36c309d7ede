#include "coordinator/quotas.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace mesa::coordinator {
namespace {

TEST(SubmitBuckets, BurstThenRefillAtTheRate) {
  SubmitBuckets buckets;
  const QuotaLimits limits{.submit_rate = 2, .submit_burst = 3};  // 2 a minute, 3 at once
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(buckets.Take("user", "alice", limits, t0).ok());
  absl::Status refused = buckets.Take("user", "alice", limits, t0);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(refused.message(), "quota user_submit_rate=2/min"));
  EXPECT_TRUE(absl::StrContains(refused.message(), "retry in 30 s")) << refused;
  // Other keys have their own bucket.
  EXPECT_TRUE(buckets.Take("user", "bob", limits, t0).ok());
  // 30 s refill one token at 2 a minute.
  EXPECT_TRUE(buckets.Take("user", "alice", limits, t0 + absl::Seconds(30)).ok());
  EXPECT_FALSE(buckets.Take("user", "alice", limits, t0 + absl::Seconds(31)).ok());
  // Never more than the burst.
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(buckets.Take("user", "alice", limits, t0 + absl::Hours(1)).ok());
  }
  EXPECT_FALSE(buckets.Take("user", "alice", limits, t0 + absl::Hours(1)).ok());
}

TEST(SubmitBuckets, CheckTakesNothingAndZeroRateIsUnlimited) {
  SubmitBuckets buckets;
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  const QuotaLimits one{.submit_rate = 1};
  EXPECT_EQ(one.burst(), 1);
  EXPECT_TRUE(buckets.Check("queue", "q", one, t0).ok());
  EXPECT_TRUE(buckets.Check("queue", "q", one, t0).ok());
  EXPECT_TRUE(buckets.Take("queue", "q", one, t0).ok());
  EXPECT_FALSE(buckets.Check("queue", "q", one, t0).ok());
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(buckets.Take("queue", "q", QuotaLimits{}, t0).ok());
}

TEST(QuotaExceeded, NamesTheQuotaAndItsValue) {
  absl::Status s = QuotaExceeded("user", "alice", "max_gpus", "8", "the job alone needs 9 GPUs");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(),
            "quota user_max_gpus=8 of user \"alice\" exceeded: the job alone needs 9 GPUs");
}

}  // namespace
}  // namespace mesa::coordinator
