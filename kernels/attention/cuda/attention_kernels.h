// Kernel launchers of the CUDA attention operator (plain C++: host code needs no nvcc). Every
// launcher returns the launch error (cudaGetLastError) and never synchronises.
//
// On top of kernels/attention/attention_types.h: the forward walks tiles of 128 queries x 64 keys,
// the backward 128 keys x 64 queries (kTile = 64 is the smaller side); head dims D <= 64 run
// padded to DP = 64 in shared memory, larger ones (up to 128) to DP = 128 (zero columns change no
// score and produce output columns that are never stored). Scores are kept in log2 units
// (scale * log2(e) folded in) so that exp2 does the exponentials.
#ifndef MESANET_KERNELS_ATTENTION_CUDA_ATTENTION_KERNELS_H_
#define MESANET_KERNELS_ATTENTION_CUDA_ATTENTION_KERNELS_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/cuda/kernel_problem.h"

namespace mesa::kernels::attention::cuda {

using ::mesa::kernels::cuda::DType;

inline constexpr int kTile = 64;
inline constexpr int kBigTile = 2 * kTile;
// The forward's grid puts its 128-query tiles in grid dimension y (at most 65535).
inline constexpr int64_t kMaxSeqLen = int64_t{65535} * kBigTile;

struct KernelShape {
  int batch = 0, seq_len = 0, heads = 0, head_dim = 0;
  int window = 0;   // 0: global causal
  float scale = 0;  // the effective softmax scale (never 0)
  DType dtype = DType::kBF16;
  // [B,T] int32 on the device: query i of row b sees no key below doc_start[b, i] (packed
  // documents; null: none). Tiles are then all masked (kept simple: training packs rarely hit
  // a tile that needs none).
  const int32_t* doc_start = nullptr;
};

// o = softmax(scale q k^T, causal window) v; lse (fp32 [B,T,H], optional).
cudaError_t LaunchForward(const KernelShape& s, const void* q, const void* k, const void* v,
                          void* o, float* lse, cudaStream_t stream);

// delta = rowsum(do * o) (fp32 [B,T,H]).
cudaError_t LaunchBackwardPrepare(const KernelShape& s, const void* o, const void* d_o,
                                  float* delta, cudaStream_t stream);
// dk, dv (dtype) and dq accumulated into dq_acc (fp32 [B,T,H,D], zeroed by the caller): with
// float atomics (dq_order null), or in a fixed order, bit-identical from run to run (dq_order:
// DqOrderInts(s) ints, zeroed by the caller).
int64_t DqOrderInts(const KernelShape& s);
cudaError_t LaunchBackward(const KernelShape& s, const void* q, const void* k, const void* v,
                           const void* d_o, const float* lse, const float* delta, float* dq_acc,
                           int* dq_order, void* dk, void* dv, cudaStream_t stream);
// dq = dq_acc converted to bf16 (n elements).
cudaError_t LaunchConvertToBf16(const float* src, void* dst, int64_t n, cudaStream_t stream);

// Single-query decoding (kernels/attention/cuda/attention_cuda.h, DeviceDecode).
cudaError_t LaunchDecode(int batch, int heads, int head_dim, int capacity, float scale, DType dtype,
                         const void* q, const void* k_cache, const void* v_cache,
                         const int32_t* lengths, void* o, cudaStream_t stream);

}  // namespace mesa::kernels::attention::cuda

#endif  // MESANET_KERNELS_ATTENTION_CUDA_ATTENTION_KERNELS_H_
