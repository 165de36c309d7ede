// The audit log through the Coordinator: records stamped with the clock's time, pruned by the
// retention sweep after audit_retention.
#include "coordinator/coordinator.h"

#include <memory>

#include "coordinator/test_util.h"
#include "gtest/gtest.h"

namespace mesa::coordinator {
namespace {

TEST(CoordinatorAudit, RecordsAreStampedAndPrunedByTheRetentionSweep) {
  FakeClock clock;
  CoordinatorOptions options;
  options.audit_retention = absl::Hours(1);
  std::unique_ptr<Store> store;
  std::unique_ptr<Coordinator> c;
  ASSERT_NO_FATAL_FAILURE(
      OpenTestCoordinator(TempPath("audit_coordinator.db"), &clock, nullptr, options, &store, &c));
  const absl::Time t0 = clock.Now();
  ASSERT_TRUE(c->RecordAudit({.method = "SubmitJob", .caller = "alice", .result = "OK"}).ok());
  clock.Advance(absl::Minutes(90));
  ASSERT_TRUE(c->RecordAudit({.method = "CancelJob", .caller = "bob", .result = "OK"}).ok());
  auto all = c->ReadAudit(0, 10, "", "");
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].time_unix_ms, absl::ToUnixMillis(t0));
  auto swept = c->SweepRetention();
  ASSERT_TRUE(swept.ok()) << swept.status();
  EXPECT_TRUE(swept->audit);
  auto left = c->ReadAudit(0, 10, "", "");
  ASSERT_TRUE(left.ok()) << left.status();
  ASSERT_EQ(left->size(), 1u);
  EXPECT_EQ((*left)[0].caller, "bob");
}

}  // namespace
}  // namespace mesa::coordinator
