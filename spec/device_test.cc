#include "spec/device.h"

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace mesa::spec {
namespace {

TEST(DeviceTest, ParsesEachNameBack) {
  for (Device device : {Device::kAuto, Device::kCpu, Device::kCuda}) {
    absl::StatusOr<Device> parsed = ParseDevice(DeviceName(device));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, device);
  }
}

// Unknown names, other spellings and empty are errors that say what is allowed and what came.
TEST(DeviceTest, RefusesUnknownNames) {
  for (absl::string_view name : {"tpu", "", "CUDA", "gpu", " cpu", "cuda:0"}) {
    absl::StatusOr<Device> parsed = ParseDevice(name);
    ASSERT_FALSE(parsed.ok()) << name;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(parsed.status().message(),
              absl::StrCat("device must be auto, cpu or cuda, got '", name, "'"));
  }
}

}  // namespace
}  // namespace mesa::spec
