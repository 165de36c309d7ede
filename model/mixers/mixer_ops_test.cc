#include "model/mixers/mixer_ops.h"

#include <memory>

#include "gtest/gtest.h"
#include "model/backend/cpu_backend.h"

namespace mesa::model {
namespace {

// A test-only operator interface: registries are per interface type.
class ProbeOps {
 public:
  static constexpr const char* kName = "Probe";
  virtual ~ProbeOps() = default;
  virtual int Id() const = 0;
};

class ProbeOnCpu final : public ProbeOps {
 public:
  int Id() const override { return 7; }
};

// A backend under another name, to show that lookups go by Name().
class RenamedCpuBackend final : public CpuBackend {
 public:
  std::string Name() const override { return "renamed"; }
};

TEST(MixerOps, UnregisteredBackendIsUnimplementedNamingBoth) {
  CpuBackend cpu;
  absl::StatusOr<std::unique_ptr<ProbeOps>> ops = MakeOps<ProbeOps>(cpu);
  ASSERT_FALSE(ops.ok());
  EXPECT_EQ(ops.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(ops.status().message().find("cpu backend has no Probe operator"),
            absl::string_view::npos)
      << ops.status();
}

TEST(MixerOps, RegisteredFactoryIsFoundByBackendName) {
  ASSERT_TRUE(RegisterOps<ProbeOps>(
      "cpu", [](Backend&) -> std::unique_ptr<ProbeOps> { return std::make_unique<ProbeOnCpu>(); }));
  CpuBackend cpu;
  absl::StatusOr<std::unique_ptr<ProbeOps>> ops = MakeOps<ProbeOps>(cpu);
  ASSERT_TRUE(ops.ok()) << ops.status();
  EXPECT_EQ((*ops)->Id(), 7);
  RenamedCpuBackend renamed;
  EXPECT_EQ(MakeOps<ProbeOps>(renamed).status().code(), absl::StatusCode::kUnimplemented);
}

TEST(MixerOps, FactoryThatRefusesTheBackendIsAnError) {
  ASSERT_TRUE(
      RegisterOps<ProbeOps>("renamed", [](Backend&) { return std::unique_ptr<ProbeOps>(); }));
  RenamedCpuBackend renamed;
  EXPECT_EQ(MakeOps<ProbeOps>(renamed).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(MixerOps, LayerOpsKeepsItsInstancePerBackend) {
  ASSERT_TRUE(RegisterOps<ProbeOps>(
      "cpu", [](Backend&) -> std::unique_ptr<ProbeOps> { return std::make_unique<ProbeOnCpu>(); }));
  CpuBackend a, b;
  LayerOps<ProbeOps> layer;
  absl::StatusOr<ProbeOps*> first = layer.For(a);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(*layer.For(a), *first);  // same backend: same instance (forward state kept)
  absl::StatusOr<ProbeOps*> other = layer.For(b);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ((*other)->Id(), 7);
}

TEST(MixerOps, BackendSharedStateIsOnePerKey) {
  CpuBackend cpu;
  int& x = cpu.Shared<int>("x");
  x = 5;
  EXPECT_EQ(cpu.Shared<int>("x"), 5);
  EXPECT_EQ(cpu.Shared<int>("y"), 0);
}

}  // namespace
}  // namespace mesa::model
