// Shared helpers of the CUDA backend's fused kernels (model/backend/cuda/*.cu, one file per op
// family; launchers declared in backend_kernels.h). Only those .cu files include this header.
//
// Activations are float or bf16 (the template T); the math is fp32 for both (double for the loss
// and norm sums that the host reads), with the formulas of model/layers/cpu_layers.cc: bf16 is
// widened on load (exact) and rounded to nearest even once per store.
//
// The float instantiations keep the fp32 kernels' arithmetic and summation order bit for bit (the
// CPU comparison runs at 1e-6); only how loads are scheduled changed (register rings, batched
// loads ahead of ordered sums). The bf16 ones move 2-8 elements per access when the host finds
// the pointers and widths aligned (scalar fallback, scalar tail for element counts that are not a
// multiple): at 2 bytes an element, scalar accesses leave these memory-bound kernels issue-bound.
// Their in-row summation order differs from the float one but is fixed: every launch gives the
// same bits, and no reduction uses atomics.
#ifndef MESANET_MODEL_BACKEND_CUDA_BACKEND_COMMON_CUH_
#define MESANET_MODEL_BACKEND_CUDA_BACKEND_COMMON_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

// Not in an unnamed namespace (this is a header): inline functions and templates, so every .cu
// may include it. The kernels themselves stay in each .cu's unnamed namespace.
namespace mesa::model::cuda {

using Bf16 = __nv_bfloat16;

inline constexpr int kThreads = 256;

// Elements per access of the bf16 kernels. Elementwise: 8 (16 bytes). One warp per row: 4, so the
// 32 lanes cover a 128-wide head row in one access each. (Conv and embedding: their .cu files.)
inline constexpr int kVecElementwise = 8;
inline constexpr int kVecRow = 4;

template <typename T>
inline constexpr bool kIsBf16 = std::is_same_v<T, Bf16>;

inline int ElementwiseBlocks(int64_t n) {
  // Grid-stride loops: enough blocks to fill the chip (132 SMs x 16), never a huge grid.
  return static_cast<int>(
      std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, 2112)));
}

// Blocks of a grid-stride loop over n elements taken V at a time.
inline int VecBlocks(int64_t n, int v) { return ElementwiseBlocks((n + v - 1) / v); }

// Blocks of kThreads / 32 warps, one row per warp.
inline unsigned RowBlocks(int64_t rows) {
  constexpr int64_t kRowsPerBlock = kThreads / 32;
  return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
}

// True when every pointer is aligned for the V-element accesses of Load/Store on its type.
template <int V, typename... P>
bool Aligned(const P*... p) {
  return ((reinterpret_cast<uintptr_t>(p) % std::min<size_t>(16, sizeof(P) * V) == 0) && ...);
}

// kernel<<<grid, block, smem, s>>>(args...); returns the launch error.
template <typename... P, typename... A>
cudaError_t Run(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                A... args) {
  kernel<<<grid, block, smem, s>>>(args...);
  return cudaGetLastError();
}

// Runs launch.operator()<V>() for bf16 when `vec` holds, else launch.operator()<1>() (launch is a
// `[&]<int V>() {...}` lambda): float always takes the scalar path (the fp32 kernels' exact access
// pattern and reduction order).
template <typename T, int V, typename F>
cudaError_t Dispatch(bool vec, F&& launch) {
  if constexpr (kIsBf16<T>) {
    if (vec) return launch.template operator()<V>();
  }
  return launch.template operator()<1>();
}

// Runs launch.operator()<P>() with the fewest packs P in {1, 2, 4} per lane that cover a row of
// `width` elements with a warp taking V per lane and pack; P = 0 (loop) for wider rows.
template <int V, typename F>
cudaError_t DispatchPacks(int64_t width, F&& launch) {
  const int64_t packs = (width + 32 * V - 1) / (32 * V);
  if (packs <= 1) return launch.template operator()<1>();
  if (packs <= 2) return launch.template operator()<2>();
  if (packs <= 4) return launch.template operator()<4>();
  return launch.template operator()<0>();
}

// ---- Element access. Widening bf16 is exact (its bits become the top half of a float32);
// narrowing rounds to nearest even.
__device__ __forceinline__ float ToFloat(float x) { return x; }
__device__ __forceinline__ float ToFloat(Bf16 x) { return __bfloat162float(x); }
template <typename T>
__device__ __forceinline__ T FromFloat(float x) {
  if constexpr (kIsBf16<T>) {
    return __float2bfloat16_rn(x);
  } else {
    return x;
  }
}

__device__ __forceinline__ uint32_t PackBf16x2(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);  // .x at the lower address
  uint32_t u;
  memcpy(&u, &h, sizeof(u));
  return u;
}

// V consecutive elements at p as floats, in accesses of up to 16 bytes; p must be aligned to them
// (Aligned<V> on the host).
template <int V>
__device__ __forceinline__ void Load(const float* p, float (&f)[V]) {
  if constexpr (V == 1) {
    f[0] = *p;
  } else if constexpr (V == 2) {
    const float2 q = *reinterpret_cast<const float2*>(p);
    f[0] = q.x;
    f[1] = q.y;
  } else {
    static_assert(V % 4 == 0);
#pragma unroll
    for (int i = 0; i < V / 4; ++i) {
      const float4 q = reinterpret_cast<const float4*>(p)[i];
      f[4 * i] = q.x;
      f[4 * i + 1] = q.y;
      f[4 * i + 2] = q.z;
      f[4 * i + 3] = q.w;
    }
  }
}
template <int V>
__device__ __forceinline__ void Store(float* p, const float (&f)[V]) {
  if constexpr (V == 1) {
    *p = f[0];
  } else if constexpr (V == 2) {
    *reinterpret_cast<float2*>(p) = make_float2(f[0], f[1]);
  } else {
    static_assert(V % 4 == 0);
#pragma unroll
    for (int i = 0; i < V / 4; ++i) {
      reinterpret_cast<float4*>(p)[i] =
          make_float4(f[4 * i], f[4 * i + 1], f[4 * i + 2], f[4 * i + 3]);
    }
  }
}
template <int V>
__device__ __forceinline__ void Load(const Bf16* p, float (&f)[V]) {
  if constexpr (V == 1) {
    f[0] = ToFloat(*p);
  } else {
    static_assert(V == 2 || V == 4 || V == 8);
    uint32_t u[V / 2];
    if constexpr (V == 2) {
      u[0] = *reinterpret_cast<const uint32_t*>(p);
    } else if constexpr (V == 4) {
      const uint2 q = *reinterpret_cast<const uint2*>(p);
      u[0] = q.x;
      u[1] = q.y;
    } else {
      const uint4 q = *reinterpret_cast<const uint4*>(p);
      u[0] = q.x;
      u[1] = q.y;
      u[2] = q.z;
      u[3] = q.w;
    }
#pragma unroll
    for (int k = 0; k < V / 2; ++k) {
      f[2 * k] = __uint_as_float(u[k] << 16);
      f[2 * k + 1] = __uint_as_float(u[k] & 0xffff0000u);
    }
  }
}
template <int V>
__device__ __forceinline__ void Store(Bf16* p, const float (&f)[V]) {
  if constexpr (V == 1) {
    *p = FromFloat<Bf16>(f[0]);
  } else {
    static_assert(V == 2 || V == 4 || V == 8);
    uint32_t u[V / 2];
#pragma unroll
    for (int k = 0; k < V / 2; ++k) u[k] = PackBf16x2(f[2 * k], f[2 * k + 1]);
    if constexpr (V == 2) {
      *reinterpret_cast<uint32_t*>(p) = u[0];
    } else if constexpr (V == 4) {
      *reinterpret_cast<uint2*>(p) = make_uint2(u[0], u[1]);
    } else {
      *reinterpret_cast<uint4*>(p) = make_uint4(u[0], u[1], u[2], u[3]);
    }
  }
}

// Strided loop over [0, n), V elements at a time: body(i, integral_constant<V>) for the packs,
// then body(i, integral_constant<1>) for the tail. V = 1 is the plain strided loop.
template <int V, typename F>
__device__ __forceinline__ void Strided(int64_t n, int64_t first, int64_t stride, F&& body) {
  for (int64_t p = first; p < n / V; p += stride) body(p * V, std::integral_constant<int, V>{});
  if constexpr (V > 1) {
    for (int64_t i = n / V * V + first; i < n; i += stride) {
      body(i, std::integral_constant<int, 1>{});
    }
  }
}
template <int V, typename F>
__device__ __forceinline__ void GridStride(int64_t n, F&& body) {
  Strided<V>(n, blockIdx.x * int64_t{blockDim.x} + threadIdx.x, int64_t{gridDim.x} * blockDim.x,
             body);
}

__device__ __forceinline__ float Sigmoid(float x) {
  // Same stable form as the CPU (no overflow of expf for large |x|).
  if (x >= 0.f) return 1.f / (1.f + expf(-x));
  const float e = expf(x);
  return e / (1.f + e);
}
__device__ __forceinline__ float Softplus(float x) {
  return fmaxf(x, 0.f) + log1pf(expf(-fabsf(x)));
}

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// acc + sum_{k < count} p[k * stride] in float32, k ascending. The adds stay one ordered chain,
// but each batch's loads are issued before its adds: a plain loop waits on one L2/DRAM read per
// term (thousands of partial rows for a narrow column reduction).
template <typename T>
__device__ __forceinline__ float OrderedSum(const T* __restrict__ p, int64_t count, int64_t stride,
                                            float acc) {
  constexpr int kBatch = 32;
  int64_t k = 0;
  for (; k + kBatch <= count; k += kBatch) {
    float v[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) v[u] = ToFloat(p[(k + u) * stride]);
#pragma unroll
    for (int u = 0; u < kBatch; ++u) acc += v[u];
  }
  for (; k < count; ++k) acc += ToFloat(p[k * stride]);
  return acc;
}

// out[i] += sum_k partials[k * n + i] for i < n, k ascending (reduce_partials.cu): the
// deterministic second pass of the column reductions.
cudaError_t ReducePartials(const float* partials, int64_t num_partials, int64_t n, float* out,
                           cudaStream_t s);

}  // namespace mesa::model::cuda

#endif  // MESANET_MODEL_BACKEND_CUDA_BACKEND_COMMON_CUH_
