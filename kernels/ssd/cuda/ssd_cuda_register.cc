// Links the SSD's CUDA kernels into kernels/ssd/ssd_op.h (impl = kCuda); alwayslink.
#include "kernels/ssd/cuda/ssd_cuda.h"
#include "kernels/ssd/ssd_types.h"

namespace mesa::kernels::ssd::cuda {
namespace {

const bool kRegistered = [] {
  RegisterSsdCudaBackend({.forward = &CudaForward, .backward = &CudaBackward});
  return true;
}();

}  // namespace
}  // namespace mesa::kernels::ssd::cuda
