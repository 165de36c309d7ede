// The CUDA backend's entry points in a build without CUDA (the default; `--config=cuda` links
// cuda_backend.cc instead, docs/build.md). Every factory answers that this binary cannot use a GPU
// and how to get one that can, so "auto" falls back to the CPU and "cuda" fails with that reason.
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/backend/cuda/cuda_backend.h"

namespace mesa::model {
namespace {

absl::Status NotBuiltWithCuda() {
  return absl::FailedPreconditionError(
      "this binary was built without CUDA support; rebuild it with `bazel build --config=cuda` "
      "to use a GPU");
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const CudaBackendOptions&) {
  return NotBuiltWithCuda();
}

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int) { return NotBuiltWithCuda(); }

absl::StatusOr<int> CudaDeviceForLocalRank(int) { return NotBuiltWithCuda(); }

CudaBackendControl* GetCudaControl(Backend*) { return nullptr; }

}  // namespace mesa::model
