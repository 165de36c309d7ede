// Links the mLSTM's CUDA kernels into kernels/mlstm/mlstm_op.h (impl = kCuda); alwayslink.
#include "kernels/mlstm/cuda/mlstm_cuda.h"
#include "kernels/mlstm/mlstm_types.h"

namespace mesa::kernels::mlstm::cuda {
namespace {

const bool kRegistered = [] {
  RegisterMlstmCudaBackend({.forward = &CudaForward, .backward = &CudaBackward});
  return true;
}();

}  // namespace
}  // namespace mesa::kernels::mlstm::cuda
