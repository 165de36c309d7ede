#include "spec/device.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace mesa::spec {

absl::StatusOr<Device> ParseDevice(absl::string_view name) {
  for (Device device : {Device::kAuto, Device::kCpu, Device::kCuda}) {
    if (name == DeviceName(device)) return device;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("device must be auto, cpu or cuda, got '", name, "'"));
}

const char* DeviceName(Device device) {
  switch (device) {
    case Device::kAuto:
      return "auto";
    case Device::kCpu:
      return "cpu";
    case Device::kCuda:
      return "cuda";
  }
  return "unknown";
}

}  // namespace mesa::spec
