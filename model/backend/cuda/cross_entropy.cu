// Soft-capped cross entropy of the CUDA backend, one block per row: z = cap * tanh(logits / cap),
// losses[r] = -log softmax(z)[target], 0 on ignored targets (forward), and d_logits written over
// the logits in place (backward). Must match cpu::SoftcapCrossEntropyForward /
// cpu::SoftcapCrossEntropyBackward (model/layers/cpu_layers.cc); the loss sum that the CPU forward
// returns is LaunchSum (sum.cu) here.
#include "model/backend/cuda/backend_kernels.h"

#include <cmath>
#include <cstdint>

#include "model/backend/cuda/backend_common.cuh"

namespace mesa::model::cuda {
namespace {

constexpr int kCeThreads = 512;

// The soft-capped logit cap·tanh(x·inv_cap); cap 0 means no soft-cap (FLA's MesaNet).
__device__ __forceinline__ float Capped(float x, float cap, float inv_cap) {
  return cap > 0.f ? cap * tanhf(x * inv_cap) : x;
}
// The same with x / cap: the target's logit is computed this way (bit for bit as before cap 0).
__device__ __forceinline__ float CappedDiv(float x, float cap) {
  return cap > 0.f ? cap * tanhf(x / cap) : x;
}
// 1/cap, or 0 without a cap (then unused).
__device__ __forceinline__ float InvCap(float cap) { return cap > 0.f ? 1.f / cap : 0.f; }

// Online (max, sum exp) over a row of soft-capped logits, reduced over the block.
struct MaxSum {
  float m, s;
};
__device__ __forceinline__ MaxSum Combine(MaxSum a, MaxSum b) {
  if (a.m == -INFINITY) return b;
  if (b.m == -INFINITY) return a;
  const float m = fmaxf(a.m, b.m);
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

// A thread's elements in its order: packs of V (strided by the block), then the tail.
template <typename T, int V>
__device__ MaxSum RowMaxSum(const T* __restrict__ lr, int64_t v, float cap) {
  MaxSum ms{-INFINITY, 0.f};
  const float inv_cap = InvCap(cap);
  Strided<V>(v, threadIdx.x, blockDim.x, [&](int64_t j, auto w) {
    constexpr int W = decltype(w)::value;
    float f[W];
    Load(lr + j, f);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const float z = Capped(f[k], cap, inv_cap);
      if (z > ms.m) {
        ms.s = ms.s * expf(ms.m - z) + 1.f;
        ms.m = z;
      } else {
        ms.s += expf(z - ms.m);
      }
    }
  });
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    MaxSum other{__shfl_xor_sync(0xffffffffu, ms.m, o), __shfl_xor_sync(0xffffffffu, ms.s, o)};
    ms = Combine(ms, other);
  }
  __shared__ MaxSum warp_ms[32];
  __shared__ MaxSum block_ms;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_ms[warp] = ms;
  __syncthreads();
  if (threadIdx.x == 0) {  // one thread folds the warps in order, the others are free meanwhile
    MaxSum total{-INFINITY, 0.f};
    for (int k = 0; k < static_cast<int>(blockDim.x / 32); ++k) total = Combine(total, warp_ms[k]);
    block_ms = total;
  }
  __syncthreads();
  return block_ms;
}

// One block per row; V > 1 needs 16-byte aligned rows (ld % V == 0).
template <typename T, int V>
__global__ void SoftcapCeForwardKernel(const T* __restrict__ logits,
                                       const int32_t* __restrict__ targets,
                                       float* __restrict__ losses, int64_t v, int64_t ld, float cap,
                                       int32_t ignore_token) {
  const int64_t row = blockIdx.x;
  const int32_t target = targets[row];
  if (target == ignore_token) {
    if (threadIdx.x == 0) losses[row] = 0.f;
    return;
  }
  const T* lr = logits + row * ld;
  const MaxSum ms = RowMaxSum<T, V>(lr, v, cap);
  if (threadIdx.x == 0) {
    const float z_t = CappedDiv(ToFloat(lr[target]), cap);
    losses[row] = logf(ms.s) + ms.m - z_t;
  }
}

// Overwrites the row with d_logits (rounded once to T), reading it once: the row's log-sum-exp
// comes from the forward, loss + z_target (the forward computed loss = lse - z_target with the
// same z_target expression, so this rebuilds lse to within a rounding of the larger of the two).
template <typename T, int V>
__global__ void SoftcapCeBackwardKernel(T* __restrict__ logits, const int32_t* __restrict__ targets,
                                        const float* __restrict__ losses, int64_t v, int64_t ld,
                                        float cap, int32_t ignore_token, float loss_scale) {
  const int64_t row = blockIdx.x;
  const int32_t target = targets[row];
  T* lr = logits + row * ld;
  if (target == ignore_token) {
    Strided<V>(v, threadIdx.x, blockDim.x, [&](int64_t j, auto w) {
      const float zero[decltype(w)::value] = {};
      Store(lr + j, zero);
    });
    return;
  }
  __shared__ float row_lse;
  if (threadIdx.x == 0) row_lse = losses[row] + CappedDiv(ToFloat(lr[target]), cap);
  __syncthreads();  // the target's logit is read before any thread overwrites it
  const float lse = row_lse, inv_cap = InvCap(cap);
  Strided<V>(v, threadIdx.x, blockDim.x, [&](int64_t j, auto w) {
    constexpr int W = decltype(w)::value;
    float f[W];
    Load(lr + j, f);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      // Without a cap: z = x and th = 0, so the slope 1 - th² is 1.
      const float th = cap > 0.f ? tanhf(f[k] * inv_cap) : 0.f;
      const float p = expf((cap > 0.f ? cap * th : f[k]) - lse);
      const float dz = (p - (j + k == target ? 1.f : 0.f)) * loss_scale;
      f[k] = dz * (1.f - th * th);
    }
    Store(lr + j, f);
  });
}

// Greedy choice per row: the lowest index of the largest soft-capped logit and its log-probability
// -log sum exp(z - max z). Matches cpu::SoftcapArgmax.
template <typename T, int V>
__global__ void SoftcapArgmaxKernel(const T* __restrict__ logits, int64_t v, int64_t ld, float cap,
                                    int32_t* __restrict__ tokens, float* __restrict__ logprobs) {
  const int64_t row = blockIdx.x;
  const T* lr = logits + row * ld;
  const MaxSum ms = RowMaxSum<T, V>(lr, v, cap);
  // The first index whose capped logit is the maximum (the same expression as RowMaxSum's).
  int64_t best = v;
  const float inv_cap = InvCap(cap);
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
    if (Capped(ToFloat(lr[j]), cap, inv_cap) == ms.m) {
      best = j;
      break;
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const int64_t other = __shfl_xor_sync(0xffffffffu, best, o);
    best = other < best ? other : best;
  }
  __shared__ int64_t warp_best[32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_best[warp] = best;
  __syncthreads();
  if (threadIdx.x == 0) {
    int64_t b = v;
    for (int k = 0; k < static_cast<int>(blockDim.x / 32); ++k)
      b = warp_best[k] < b ? warp_best[k] : b;
    tokens[row] = static_cast<int32_t>(b);
    logprobs[row] = -logf(ms.s);
  }
}

}  // namespace

template <typename T>
cudaError_t LaunchSoftcapArgmax(const T* logits, int64_t rows, int64_t v, int64_t ld, float cap,
                                int32_t* tokens, float* logprobs, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if (ld < v || !(cap >= 0)) return cudaErrorInvalidValue;  // cap 0: no soft-cap
  const bool vec = ld % kVecElementwise == 0 && Aligned<kVecElementwise>(logits);
  return Dispatch<T, kVecElementwise>(vec, [&]<int V>() {
    return Run(SoftcapArgmaxKernel<T, V>, static_cast<unsigned>(rows), kCeThreads, 0, s, logits, v,
               ld, cap, tokens, logprobs);
  });
}

template <typename T>
cudaError_t LaunchSoftcapCrossEntropyForward(const T* logits, const int32_t* targets, float* losses,
                                             int64_t rows, int64_t v, int64_t ld, float cap,
                                             int32_t ignore_token, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if (ld < v) return cudaErrorInvalidValue;
  const bool vec = ld % kVecElementwise == 0 && Aligned<kVecElementwise>(logits);
  return Dispatch<T, kVecElementwise>(vec, [&]<int V>() {
    return Run(SoftcapCeForwardKernel<T, V>, static_cast<unsigned>(rows), kCeThreads, 0, s, logits,
               targets, losses, v, ld, cap, ignore_token);
  });
}

template <typename T>
cudaError_t LaunchSoftcapCrossEntropyBackward(T* logits, const int32_t* targets,
                                              const float* losses, int64_t rows, int64_t v,
                                              int64_t ld, float cap, int32_t ignore_token,
                                              float loss_scale, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if (ld < v) return cudaErrorInvalidValue;
  const bool vec = ld % kVecElementwise == 0 && Aligned<kVecElementwise>(logits);
  return Dispatch<T, kVecElementwise>(vec, [&]<int V>() {
    return Run(SoftcapCeBackwardKernel<T, V>, static_cast<unsigned>(rows), kCeThreads, 0, s, logits,
               targets, losses, v, ld, cap, ignore_token, loss_scale);
  });
}

// Both activation types (backend_kernels.h).
#define MESA_INSTANTIATE(T)                                                                       \
  template cudaError_t LaunchSoftcapArgmax<T>(const T*, int64_t, int64_t, int64_t, float,         \
                                              int32_t*, float*, cudaStream_t);                    \
  template cudaError_t LaunchSoftcapCrossEntropyForward<T>(                                       \
      const T*, const int32_t*, float*, int64_t, int64_t, int64_t, float, int32_t, cudaStream_t); \
  template cudaError_t LaunchSoftcapCrossEntropyBackward<T>(T*, const int32_t*, const float*,     \
                                                            int64_t, int64_t, int64_t, float,     \
                                                            int32_t, float, cudaStream_t);

MESA_INSTANTIATE(float)
MESA_INSTANTIATE(Bf16)

#undef MESA_INSTANTIATE

}  // namespace mesa::model::cuda
