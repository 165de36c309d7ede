// Registers the CUDA attention backend with the op dispatcher (AttnImpl::kCuda) from a static
// initialiser. Link with alwayslink (//kernels/attention/cuda:attention_cuda_register).
#include "kernels/attention/attention_types.h"
#include "kernels/attention/cuda/attention_cuda.h"

namespace {

const bool kRegistered = [] {
  namespace ac = ::mesa::kernels::attention::cuda;
  mesa::kernels::attention::RegisterAttnCudaBackend({.forward = &ac::Forward,
                                                     .backward = &ac::Backward,
                                                     .device_available = &ac::DeviceAvailable});
  return true;
}();

}  // namespace
