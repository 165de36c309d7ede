// Registers the CUDA DeltaNet-family backend with the op dispatcher (DeltaImpl::kCuda) from a
// static initialiser. Link with alwayslink (//kernels/deltanet/cuda:deltanet_cuda_register).
#include "kernels/deltanet/cuda/deltanet_cuda.h"
#include "kernels/deltanet/deltanet_types.h"

namespace {

const bool kRegistered = [] {
  namespace dc = ::mesa::kernels::deltanet::cuda;
  mesa::kernels::deltanet::RegisterDeltaCudaBackend({.forward = &dc::Forward,
                                                     .backward = &dc::Backward,
                                                     .device_available = &dc::DeviceAvailable});
  return true;
}();

}  // namespace
