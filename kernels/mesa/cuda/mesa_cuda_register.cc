// Registers the CUDA backend with the Mesa op dispatcher (kernels/mesa/mesa_types.h) from a static
// initialiser. Link with alwayslink (//kernels/mesa/cuda:mesa_cuda_register).
#include "kernels/mesa/cuda/mesa_cuda.h"
#include "kernels/mesa/mesa_types.h"

namespace {

const bool kRegistered = [] {
  mesa::kernels::RegisterMesaCudaBackend(
      {.name = "cuda",
       .forward = &mesa::kernels::cuda::Forward,
       .backward = &mesa::kernels::cuda::Backward,
       .device_available = &mesa::kernels::cuda::DeviceAvailable});
  return true;
}();

}  // namespace
