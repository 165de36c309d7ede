#include "model/backend/choice/backend_choice.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "spec/device.h"

namespace mesa::model {

absl::StatusOr<BackendChoice> ChooseBackend(absl::string_view device,
                                            const CudaBackendOptions& cuda,
                                            const CpuBackendOptions& cpu) {
  // An unknown name is refused, never taken for "auto".
  absl::StatusOr<spec::Device> parsed = spec::ParseDevice(device);
  if (!parsed.ok()) return parsed.status();
  BackendChoice choice;
  if (*parsed != spec::Device::kCpu) {
    absl::StatusOr<std::unique_ptr<Backend>> gpu = CreateCudaBackend(cuda);
    if (gpu.ok()) {
      choice.backend = *std::move(gpu);
      choice.on_gpu = true;
      return choice;
    }
    if (*parsed == spec::Device::kCuda) {
      return absl::UnavailableError(
          absl::StrCat("device \"cuda\" requested: ", gpu.status().message()));
    }
    choice.no_gpu = std::string(gpu.status().message());
  }
  choice.backend = std::make_unique<CpuBackend>(cpu);
  return choice;
}

}  // namespace mesa::model
