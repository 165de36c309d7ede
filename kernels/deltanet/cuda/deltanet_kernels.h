// Kernel launchers of the DeltaNet-family CUDA operator (plain C++: host code needs no nvcc).
// Every launcher returns the launch error (cudaGetLastError) and never synchronises.
//
// Conventions on top of kernels/deltanet/deltanet_types.h (math: kernels/deltanet/README.md,
// "Chunk form" and "Chunked backward"):
//   - Chunks of 64 tokens never straddle a sequence; the chunk and sequence tables are those of
//     the Mesa kernels (kernels/common/cuda/kernel_problem.h): chunk {seq, first token, length,
//     first chunk of the sequence}, sequence {first token, length, first chunk, number of chunks}.
//   - Head dims D <= 64 run padded to DP = 64, 64 < D <= 128 to DP = 128 (zero columns of q, k, v
//     leave the delta rule on the first D columns unchanged).
//   - Scratch tensors are bf16: per token [tok][H][DP] (W, U, X, dX), per chunk and head
//     [chunk][H][64][64] (A = (I + L)^-1, P = (Q K^T) ⊙ Γ causal) and [chunk][H][DP][DP]
//     (chunk-start states S_c, gradients dS_c w.r.t. chunk-end states), rows = value dimension.
#ifndef MESANET_KERNELS_DELTANET_CUDA_DELTANET_KERNELS_H_
#define MESANET_KERNELS_DELTANET_CUDA_DELTANET_KERNELS_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/cuda/kernel_problem.h"

namespace mesa::kernels::deltanet::cuda {

using ::mesa::kernels::cuda::DType;
using ::mesa::kernels::cuda::KernelProblem;

// Value-dimension block of the sequential kernels (one CTA per sequence, head and block).
inline constexpr int kValueBlock = 64;

// Per chunk and head: A (bf16 [64][64]), P, and W = A diag(beta*gamma) K, U = A diag(beta) V.
struct PrepareArgs {
  const void* q;
  const void* k;
  const void* v;
  const float* beta;
  const float* log_gamma;  // null: DeltaNet
  __nv_bfloat16* a;        // [chunk][H][64][64]
  __nv_bfloat16* p;
  __nv_bfloat16* w;  // [tok][H][DP]
  __nv_bfloat16* u;
};
cudaError_t LaunchPrepare(const KernelProblem& p, const PrepareArgs& a, cudaStream_t s);

// Sequential pass over the chunks of each sequence: X = U - W S^T, o = diag(gamma) Q S^T + P X,
// S <- gamma_n S + X^T diag(dec) K. Every output is optional.
struct StateForwardArgs {
  const void* q;
  const void* k;
  const float* log_gamma;
  const float* beta;
  const float* s0;  // optional [S][H][D][D]
  const __nv_bfloat16* p;
  const __nv_bfloat16* w;
  const __nv_bfloat16* u;
  void* o;                 // optional [B,T,H,D] dtype
  float* s_final;          // optional [S][H][D][D]
  __nv_bfloat16* x;        // optional [tok][H][DP]
  __nv_bfloat16* s_chunk;  // optional [chunk][H][DP][DP], state before each chunk
};
cudaError_t LaunchStateForward(const KernelProblem& p, const StateForwardArgs& a, cudaStream_t s);

// Reverse pass: dX = P^T dO + diag(dec) K dS^T, dS <- gamma_n dS + dO^T diag(gamma) Q - dX^T W.
struct StateBackwardArgs {
  const void* q;
  const void* k;
  const void* d_o;
  const float* log_gamma;
  const float* beta;
  const float* ds_final;  // optional [S][H][D][D]
  const __nv_bfloat16* p;
  const __nv_bfloat16* w;
  __nv_bfloat16* dx;        // [tok][H][DP]
  __nv_bfloat16* ds_chunk;  // [chunk][H][DP][DP], gradient w.r.t. the state after each chunk
  float* ds0;               // optional [S][H][D][D]
};
cudaError_t LaunchStateBackward(const KernelProblem& p, const StateBackwardArgs& a, cudaStream_t s);

// Per chunk and head: dq, dk, dv, dbeta and dlog_gamma (within-chunk reverse sums).
struct ChunkBackwardArgs {
  const void* q;
  const void* k;
  const void* v;
  const void* d_o;
  const float* beta;
  const float* log_gamma;  // null: DeltaNet
  const __nv_bfloat16* a;
  const __nv_bfloat16* p;
  const __nv_bfloat16* x;
  const __nv_bfloat16* dx;
  const __nv_bfloat16* s_chunk;
  const __nv_bfloat16* ds_chunk;
  void* dq;
  void* dk;
  void* dv;
  float* dbeta;
  float* dlog_gamma;  // required iff log_gamma
};
cudaError_t LaunchChunkBackward(const KernelProblem& p, const ChunkBackwardArgs& a, cudaStream_t s);

}  // namespace mesa::kernels::deltanet::cuda

#endif  // MESANET_KERNELS_DELTANET_CUDA_DELTANET_KERNELS_H_
