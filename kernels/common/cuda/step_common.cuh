// Device helpers shared by the single-token decoding step kernels (Mesa, DeltaNet family): one
// CTA per (sequence, head) whose D x D fp32 state is split by rows over the threads.
//
// Row layout: the head dim D (a multiple of 16, <= 128) runs padded to DP in {16, 32, 64, 128};
// thread t owns row t / TPR and, of that row, the kVec float4 chunks part + TPR * m (m < kVec),
// part = t % TPR, i.e. columns 4 * (part + TPR * m) + e. A warp's 16-byte loads of one m then
// cover whole 32-byte sectors of 32 / TPR consecutive rows; rows and columns >= D are padding
// (never loaded or stored; zero in registers).
#ifndef MESANET_KERNELS_COMMON_CUDA_STEP_COMMON_CUH_
#define MESANET_KERNELS_COMMON_CUDA_STEP_COMMON_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace mesa::kernels::cuda::step {

template <int DP_, int TPR_>
struct RowLayout {
  static constexpr int DP = DP_;
  static constexpr int TPR = TPR_;
  static constexpr int kThreads = DP * TPR;
  static constexpr int kCols = DP / TPR;  // columns per thread
  static constexpr int kVec = kCols / 4;  // float4 chunks per thread
  static constexpr int kWarps = kThreads / 32;
  static_assert(kThreads % 32 == 0 && 32 % TPR == 0 && kCols % 4 == 0);

  // First column of chunk m of this thread's part.
  __device__ static int Col(int part, int m) { return 4 * (part + TPR * m); }
};

__device__ __forceinline__ float LoadElem(const float* p) { return *p; }
__device__ __forceinline__ float LoadElem(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ void StoreElem(float* p, float x) { *p = x; }
__device__ __forceinline__ void StoreElem(__nv_bfloat16* p, float x) { *p = __float2bfloat16(x); }

// Sum over the TPR consecutive lanes of a row by an xor butterfly: every lane gets the same bits
// (each level adds the same two operands, in either order).
template <int TPR>
__device__ __forceinline__ float RowSum(float x) {
#pragma unroll
  for (int o = TPR / 2; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// Sum over the block in float64, the same bits in every thread: an xor butterfly over the lanes
// of each warp (offsets 16 .. kFromOffset: with kFromOffset = TPR, the TPR lanes of a row must
// hold the same value, and each row counts once), then every thread adds the warp partials in a
// fixed tree. One barrier; `partials` ([kWarps]) must not be read by any thread of a previous call
// still in flight: alternate two buffers.
template <int kWarps, int kFromOffset = 1>
__device__ __forceinline__ double BlockSum(double x, double* partials) {
#pragma unroll
  for (int o = 16; o >= kFromOffset; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  if ((threadIdx.x & 31) == 0) partials[threadIdx.x >> 5] = x;
  __syncthreads();
  double v[kWarps];
#pragma unroll
  for (int w = 0; w < kWarps; ++w) v[w] = partials[w];
#pragma unroll
  for (int s = 1; s < kWarps; s *= 2) {
#pragma unroll
    for (int w = 0; w + s < kWarps; w += 2 * s) v[w] += v[w + s];
  }
  return v[0];
}

// gamma = exp(log_gamma) rounded to float, as the CPU steps compute it.
__device__ __forceinline__ float Gamma(float log_gamma) {
  return static_cast<float>(exp(static_cast<double>(log_gamma)));
}

// The thread's kVec float4 chunks of row `row` of a D x D matrix at m (zeros where padding).
template <class L>
__device__ __forceinline__ void LoadRow(const float* m, int D, int row, int part, float4* out) {
#pragma unroll
  for (int i = 0; i < L::kVec; ++i) {
    const int c = L::Col(part, i);
    out[i] = (row < D && c < D) ? *reinterpret_cast<const float4*>(m + int64_t(row) * D + c)
                                : make_float4(0.f, 0.f, 0.f, 0.f);
  }
}
template <class L>
__device__ __forceinline__ void StoreRow(float* m, int D, int row, int part, const float4* in) {
#pragma unroll
  for (int i = 0; i < L::kVec; ++i) {
    const int c = L::Col(part, i);
    if (row < D && c < D) *reinterpret_cast<float4*>(m + int64_t(row) * D + c) = in[i];
  }
}

// x <- gamma x + a * vec[cols] (the rank-one state update of one row, a = beta * u[row]), for
// the thread's first kChunks chunks.
template <class L, int kChunks = L::kVec>
__device__ __forceinline__ void RankOneRow(float4* x, float gamma, float a, const float* vec,
                                           int part) {
#pragma unroll
  for (int i = 0; i < kChunks; ++i) {
    const float4 k = *reinterpret_cast<const float4*>(vec + L::Col(part, i));
    x[i].x = gamma * x[i].x + a * k.x;
    x[i].y = gamma * x[i].y + a * k.y;
    x[i].z = gamma * x[i].z + a * k.z;
    x[i].w = gamma * x[i].w + a * k.w;
  }
}

// This thread's part of row . vec (vec in shared memory, DP long, zero padded); four
// independent accumulators.
template <class L>
__device__ __forceinline__ float PartDot(const float4* x, const float* vec, int part) {
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
  for (int i = 0; i < L::kVec; ++i) {
    const float4 p = *reinterpret_cast<const float4*>(vec + L::Col(part, i));
    acc.x += x[i].x * p.x;
    acc.y += x[i].y * p.y;
    acc.z += x[i].z * p.z;
    acc.w += x[i].w * p.w;
  }
  return (acc.x + acc.y) + (acc.z + acc.w);
}

// Copies a [D] token vector (fp32 or bf16) into shared memory as floats, zero padded to DP.
template <int DP, typename T>
__device__ __forceinline__ void StageVector(float* dst, const T* src, int D) {
  for (int i = threadIdx.x; i < DP; i += blockDim.x) dst[i] = i < D ? LoadElem(src + i) : 0.f;
}

}  // namespace mesa::kernels::cuda::step

#endif  // MESANET_KERNELS_COMMON_CUDA_STEP_COMMON_CUH_
