// Links the RG-LRU's CUDA kernels into kernels/rglru/rglru_op.h (impl = kCuda); alwayslink.
#include "kernels/rglru/cuda/rglru_cuda.h"
#include "kernels/rglru/rglru_types.h"

namespace mesa::kernels::rglru::cuda {
namespace {

const bool kRegistered = [] {
  RegisterRgLruCudaBackend({.forward = &CudaForward, .backward = &CudaBackward});
  return true;
}();

}  // namespace
}  // namespace mesa::kernels::rglru::cuda
