// Cluster operations on the coordinator core with an injected clock: how workers leave (a lease
// that runs out, a clean deregistration), listing, draining and forgetting them, and the metric
// series that follow.
#include <map>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "coordinator/coordinator.h"
#include "coordinator/test_util.h"
#include "gtest/gtest.h"

namespace mesa::coordinator {
namespace {

class ClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Store::Options so;
    so.path = TempPath("cluster.db");
    so.synchronous_full = false;
    auto s = Store::Open(so);
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = std::move(*s);
    CoordinatorOptions o;
    o.background_threads = false;
    o.lease_ttl = absl::Seconds(10);
    auto c = Coordinator::Create(store_.get(), &clock_, &metrics_, o);
    ASSERT_TRUE(c.ok()) << c.status();
    c_ = std::move(*c);
  }
  std::string Register(const std::string& id, int gpus) {
    mesa::v1::RegisterWorkerRequest r;
    r.set_worker_id(id);
    for (int i = 0; i < gpus; ++i) r.mutable_resources()->add_gpus()->set_index(i);
    auto out = c_->RegisterWorker(r);
    EXPECT_TRUE(out.ok()) << out.status();
    if (out.ok()) leases_[id] = out->lease_id();
    return out.ok() ? out->lease_id() : "";
  }
  bool Exported(const std::string& line) {
    return absl::StrContains(metrics_.Serialize(), line + "\n");
  }

  FakeClock clock_;
  Metrics metrics_;
  std::map<std::string, std::string> leases_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Coordinator> c_;
};

TEST_F(ClusterTest, LeaseExpiryCountsAsLost) {
  Register("a", 1);
  Register("b", 1);
  EXPECT_TRUE(Exported("mesa_coordinator_worker_lease_expiries_total 0"));
  clock_.Advance(absl::Seconds(5));
  mesa::v1::HeartbeatRequest hb;
  hb.set_worker_id("b");
  hb.set_lease_id(leases_["b"]);
  ASSERT_TRUE(c_->Heartbeat(hb, nullptr).ok());
  clock_.Advance(absl::Seconds(6));
  c_->CheckLeases();  // a's lease ran out, b's was renewed
  EXPECT_TRUE(Exported("mesa_coordinator_worker_lease_expiries_total 1"));
  EXPECT_TRUE(Exported("mesa_coordinator_workers{state=\"lost\"} 1"));
  c_->CheckLeases();  // counted once
  EXPECT_TRUE(Exported("mesa_coordinator_worker_lease_expiries_total 1"));
}

}  // namespace
}  // namespace mesa::coordinator
