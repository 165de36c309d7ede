// The devices a process can compute on ("auto", "cpu", "cuda"): the one list that the job spec's
// training.device, mesa-train's --device and $MESA_DEVICE (launch/trainer_launch.h), the choice of
// backend (model/backend/choice) and the generation and logits tools' --device all read. A leaf
// package, so that the worker's side of the launch contract can use it without linking the model.
#ifndef MESANET_SPEC_DEVICE_H_
#define MESANET_SPEC_DEVICE_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mesa::spec {

enum class Device {
  kAuto,  // the GPU when one is usable, else the CPU
  kCpu,
  kCuda,  // a GPU or an error: never a silent fall-back to the CPU
};

// "auto" | "cpu" | "cuda" (exact spelling). Anything else, empty included, is INVALID_ARGUMENT
// "device must be auto, cpu or cuda, got 'x'": an unknown name must never act as "auto". Callers
// whose empty value means "not set" resolve that first, and prefix the setting's name.
absl::StatusOr<Device> ParseDevice(absl::string_view name);
const char* DeviceName(Device device);

}  // namespace mesa::spec

#endif  // MESANET_SPEC_DEVICE_H_
