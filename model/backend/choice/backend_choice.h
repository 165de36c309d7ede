// Which backend a process computes on, from its device setting ("auto", "cpu" or "cuda"): the one
// decision that training (model/trainer/session.cc) and generation from a checkpoint
// (model/generate/from_checkpoint.cc) share. Each caller fills in its own backend options (the
// trainer its GPU and activation precision) and keeps its own wording for what follows.
#ifndef MESANET_MODEL_BACKEND_CHOICE_BACKEND_CHOICE_H_
#define MESANET_MODEL_BACKEND_CHOICE_BACKEND_CHOICE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/backend/backend.h"
#include "model/backend/cpu_backend.h"
#include "model/backend/cuda/cuda_backend.h"

namespace mesa::model {

struct BackendChoice {
  std::unique_ptr<Backend> backend;
  bool on_gpu = false;
  // Device "auto" on the CPU: why the CUDA backend could not be created (for callers that must
  // refuse to fall back, e.g. bf16 training).
  std::string no_gpu;

  const char* device() const { return on_gpu ? "cuda" : "cpu"; }
};

// Device "cpu": the CPU backend with `cpu`. Device "cuda": the CUDA backend with `cuda`, or
// UNAVAILABLE "device \"cuda\" requested: <the runtime's reason>": the node's fault, not the
// job's (the trainer maps UNAVAILABLE to an infra failure, exit 1, retried). Device "auto": CUDA
// when a GPU is usable, else the CPU backend. Any other name (spec/device.h): INVALID_ARGUMENT
// "device must be auto, cpu or cuda, got 'x'", before any backend is made.
absl::StatusOr<BackendChoice> ChooseBackend(absl::string_view device,
                                            const CudaBackendOptions& cuda,
                                            const CpuBackendOptions& cpu);

}  // namespace mesa::model

#endif  // MESANET_MODEL_BACKEND_CHOICE_BACKEND_CHOICE_H_
