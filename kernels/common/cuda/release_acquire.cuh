// Flags between the blocks of one launch: a block publishes data, then a flag with release
// semantics; another block reads the flag with acquire semantics, then the data (through L2: the
// L1 of its SM is not coherent with other SMs' writes). Used by the RG-LRU's chained scan and the
// attention backward's ordered dQ sums.
#ifndef MESANET_KERNELS_COMMON_CUDA_RELEASE_ACQUIRE_CUH_
#define MESANET_KERNELS_COMMON_CUDA_RELEASE_ACQUIRE_CUH_

#include <cuda_runtime.h>

namespace mesa::kernels::cuda {

__device__ __forceinline__ int LoadAcquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void StoreRelease(int* p, int v) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

}  // namespace mesa::kernels::cuda

#endif  // MESANET_KERNELS_COMMON_CUDA_RELEASE_ACQUIRE_CUH_
