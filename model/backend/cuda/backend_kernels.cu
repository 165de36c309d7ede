// Fused kernels of the CUDA backend (see backend_kernels.h). Activations are float or bf16 (the
// template T); the math is fp32 for both (double for the loss and norm sums that the host reads),
// with the formulas of model/layers/cpu_layers.cc: bf16 is widened on load (exact) and rounded to
// nearest even once per store.
//
// The float instantiations keep the fp32 kernels' arithmetic and summation order bit for bit (the
// CPU comparison runs at 1e-6); only how loads are scheduled changed (register rings, batched
// loads ahead of ordered sums). The bf16 ones move 2-8 elements per access when the host finds
// the pointers and widths aligned (scalar fallback, scalar tail for element counts that are not a
// multiple): at 2 bytes an element, scalar accesses leave these memory-bound kernels issue-bound.
// Their in-row summation order differs from the float one but is fixed: every launch gives the
// same bits, and no reduction uses atomics.
#include "model/backend/cuda/backend_kernels.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace mesa::model::cuda {
namespace {

using Bf16 = __nv_bfloat16;

constexpr int kThreads = 256;
constexpr float kL2NormEps = 1e-6f;  // cpu_layers.cc's kL2NormEps

// Elements per access of the bf16 kernels. Elementwise: 8 (16 bytes). One warp per row: 4, so the
// 32 lanes cover a 128-wide head row in one access each. Conv: 2 channels per thread (4-byte
// accesses; 2-byte ones ran the backward at half the speed on H200, and 4 channels would double
// the register rings again).
constexpr int kVecElementwise = 8;
constexpr int kVecRow = 4;
constexpr int kVecConv = 2;
constexpr int kVecEmbedding = 4;
constexpr int kConvRowsPerBlock = 32;  // forward: the rows a thread walks with its weights held
constexpr int kConvRing = 16;          // conv: rows held per tensor (power of two)
constexpr int kConvAhead = 8;          // conv: rows loaded ahead of their use
constexpr int kConvThreads = 128;
constexpr int kCeThreads = 512;

template <typename T>
inline constexpr bool kIsBf16 = std::is_same_v<T, Bf16>;

int ElementwiseBlocks(int64_t n) {
  // Grid-stride loops: enough blocks to fill the chip (132 SMs x 16), never a huge grid.
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, 2112)));
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

// Runs launch.operator()<W>() with the conv kernels' tap capacity: 4 (the models' width) when it
// fits, else kMaxConvWidth.
template <typename F>
cudaError_t DispatchTaps(int64_t width, F&& launch) {
  if (width <= 4) return launch.template operator()<4>();
  return launch.template operator()<kMaxConvWidth>();
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

// out[i] += sum_k partials[k * n + i], k ascending: the deterministic second pass.
__global__ void ReducePartialsKernel(const float* __restrict__ partials, int64_t num_partials,
                                     int64_t n, float* __restrict__ out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] += OrderedSum(partials + i, num_partials, n, 0.f);
  }
}

cudaError_t ReducePartials(const float* partials, int64_t num_partials, int64_t n, float* out,
                           cudaStream_t s) {
  // One thread per column, in small blocks: narrow reductions (n = 6, 128) spread over SMs.
  constexpr int kReduceThreads = 64;
  const int blocks =
      static_cast<int>(std::min<int64_t>((n + kReduceThreads - 1) / kReduceThreads, 2112));
  return Run(ReducePartialsKernel, blocks, kReduceThreads, 0, s, partials, num_partials, n, out);
}

// ------------------------------------------------------------------------------------------------
// Elementwise kernels: body(i, W) handles elements [i, i + W).
template <typename T, int V>
__global__ void BiasForwardKernel(T* out, const float* bias, int64_t total, int64_t n) {
  GridStride<V>(total, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    float o[W];
    Load(out + i, o);
    int64_t col = i % n;  // a pack may wrap into the next row (n = 6 for the gate biases)
#pragma unroll
    for (int k = 0; k < W; ++k) {
      o[k] += bias[col];
      if (++col == n) col = 0;
    }
    Store(out + i, o);
  });
}

// partials[blk][j] = sum over the block's rows of x[r][j].
template <typename T>
__global__ void ColumnPartialsKernel(const T* __restrict__ x, int64_t rows, int64_t n,
                                     float* __restrict__ partials) {
  const int64_t r0 = blockIdx.x * kRowsPerPartial;
  const int64_t r1 = min(rows, r0 + kRowsPerPartial);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    partials[blockIdx.x * n + j] = OrderedSum(x + r0 * n + j, r1 - r0, n, 0.f);
  }
}

// V > 1 needs c % V == 0 (a pack stays in one row).
template <typename T, int V>
__global__ void EmbeddingForwardKernel(const int32_t* __restrict__ tokens,
                                       const float* __restrict__ table, T* __restrict__ out,
                                       int64_t n, int64_t c, float scale) {
  GridStride<V>(n * c, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    const int64_t row = i / c;
    const float* src = table + static_cast<int64_t>(tokens[row]) * c + (i - row * c);
    float o[W];
#pragma unroll
    for (int k = 0; k < W; ++k) o[k] = src[k] * scale;  // the table may be unaligned: scalar
    Store(out + i, o);
  });
}

// One block per token group: the positions of a token are summed in ascending order. A thread
// owns V consecutive columns (c % V == 0).
template <typename T, int V>
__global__ void EmbeddingBackwardKernel(const int32_t* __restrict__ order,
                                        const int32_t* __restrict__ seg_start,
                                        const int32_t* __restrict__ seg_token,
                                        const T* __restrict__ d_out, float* __restrict__ d_table,
                                        int64_t c, float scale) {
  const int seg = blockIdx.x;
  const int b = seg_start[seg], e = seg_start[seg + 1];
  float* row = d_table + static_cast<int64_t>(seg_token[seg]) * c;
  for (int64_t j = threadIdx.x * int64_t{V}; j < c; j += int64_t{blockDim.x} * V) {
    float acc[V];
#pragma unroll
    for (int k = 0; k < V; ++k) acc[k] = row[j + k];
    for (int i = b; i < e; ++i) {
      float d[V];
      Load(d_out + static_cast<int64_t>(order[i]) * c + j, d);
#pragma unroll
      for (int k = 0; k < V; ++k) acc[k] += d[k] * scale;
    }
#pragma unroll
    for (int k = 0; k < V; ++k) row[j + k] = acc[k];
  }
}

// One warp per row; a lane owns V consecutive columns per step (c % V == 0).
template <typename T, int V>
__global__ void RmsNormForwardKernel(const T* __restrict__ x, const float* __restrict__ w,
                                     T* __restrict__ out, float* __restrict__ rstd, int64_t rows,
                                     int64_t c, float eps) {
  const int64_t row = blockIdx.x * int64_t{blockDim.x / 32} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const T* xr = x + row * c;
  float ss = 0.f;
  for (int64_t j = lane * V; j < c; j += 32 * V) {
    float xv[V];
    Load(xr + j, xv);
#pragma unroll
    for (int k = 0; k < V; ++k) ss += xv[k] * xv[k];
  }
  ss = WarpSum(ss);
  const float s = 1.f / sqrtf(ss / static_cast<float>(c) + eps);
  if (lane == 0) rstd[row] = s;
  for (int64_t j = lane * V; j < c; j += 32 * V) {
    float xv[V], o[V];
    Load(xr + j, xv);
#pragma unroll
    for (int k = 0; k < V; ++k) o[k] = xv[k] * s * w[j + k];
    Store(out + row * c + j, o);
  }
}

// Block = 8 warps over kRowsPerPartial rows; per-warp column accumulators in shared memory, summed
// in warp order into the block's partial row. A lane owns V consecutive columns per step
// (c % V == 0), j = (p * 32 + lane) * V for step p. With P > 0 (c <= 32 * V * P) a row's x, d_out
// and d_x sit in registers and the warp's next row is loaded while this one is computed (narrow
// rows are latency-bound otherwise); P = 0 loops over any width. Same arithmetic either way.
template <typename T, int V, int P>
__global__ void RmsNormBackwardKernel(const T* __restrict__ x, const float* __restrict__ w,
                                      const float* __restrict__ rstd, const T* __restrict__ d_out,
                                      T* __restrict__ d_x, float* __restrict__ partials,
                                      int64_t rows, int64_t c) {
  extern __shared__ __align__(16) float acc[];  // [warps][c]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  float* my = acc + warp * c;
  for (int64_t j = lane * V; j < c; j += 32 * V) {
    const float zero[V] = {};
    Store(my + j, zero);  // the lane that accumulates these columns (no __syncwarp needed)
  }
  const int64_t r0 = blockIdx.x * kRowsPerPartial;
  const int64_t r1 = min(rows, r0 + kRowsPerPartial);
  const float inv_c = 1.f / static_cast<float>(c);
  if constexpr (P > 0) {
    float xv[P][V], dv[P][V], ov[P][V], nx[P][V], nd[P][V], no[P][V], ns = 0.f;
    const auto load_row = [&](int64_t r) {
      ns = rstd[r];
#pragma unroll
      for (int p = 0; p < P; ++p) {
        if (const int64_t j = (p * 32 + lane) * int64_t{V}; j < c) {
          Load(x + r * c + j, nx[p]);
          Load(d_out + r * c + j, nd[p]);
          Load(d_x + r * c + j, no[p]);
        }
      }
    };
    if (r0 + warp < r1) load_row(r0 + warp);
    for (int64_t r = r0 + warp; r < r1; r += warps) {
      const float s = ns;
#pragma unroll
      for (int p = 0; p < P; ++p) {
#pragma unroll
        for (int k = 0; k < V; ++k) {
          xv[p][k] = nx[p][k];
          dv[p][k] = nd[p][k];
          ov[p][k] = no[p][k];
        }
      }
      if (r + warps < r1) load_row(r + warps);
      float dot = 0.f;
#pragma unroll
      for (int p = 0; p < P; ++p) {
        const int64_t j = (p * 32 + lane) * int64_t{V};
        if (j >= c) break;
        float mv[V];
        Load(my + j, mv);
#pragma unroll
        for (int k = 0; k < V; ++k) {
          dot += dv[p][k] * w[j + k] * xv[p][k];
          mv[k] += dv[p][k] * xv[p][k] * s;
        }
        Store(my + j, mv);
      }
      dot = WarpSum(dot);
      const float coef = dot * s * s * s * inv_c;
#pragma unroll
      for (int p = 0; p < P; ++p) {
        const int64_t j = (p * 32 + lane) * int64_t{V};
        if (j >= c) break;
#pragma unroll
        for (int k = 0; k < V; ++k) ov[p][k] += dv[p][k] * w[j + k] * s - xv[p][k] * coef;
        Store(d_x + r * c + j, ov[p]);
      }
    }
  } else {
    for (int64_t r = r0 + warp; r < r1; r += warps) {
      const T* xr = x + r * c;
      const T* dr = d_out + r * c;
      const float s = rstd[r];
      float dot = 0.f;
      for (int64_t j = lane * V; j < c; j += 32 * V) {
        float xv[V], dv[V], mv[V];
        Load(xr + j, xv);
        Load(dr + j, dv);
        Load(my + j, mv);
#pragma unroll
        for (int k = 0; k < V; ++k) {
          dot += dv[k] * w[j + k] * xv[k];
          mv[k] += dv[k] * xv[k] * s;
        }
        Store(my + j, mv);
      }
      dot = WarpSum(dot);
      const float coef = dot * s * s * s * inv_c;
      for (int64_t j = lane * V; j < c; j += 32 * V) {
        float xv[V], dv[V], o[V];
        Load(xr + j, xv);
        Load(dr + j, dv);
        Load(d_x + r * c + j, o);
#pragma unroll
        for (int k = 0; k < V; ++k) o[k] += dv[k] * w[j + k] * s - xv[k] * coef;
        Store(d_x + r * c + j, o);
      }
    }
  }
  __syncthreads();
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
    float sum = 0.f;
    for (int k = 0; k < warps; ++k) sum += acc[k * c + j];
    partials[blockIdx.x * c + j] = sum;
  }
}

// The conv kernels: a thread owns V channels (ch % V == 0) and up to W taps (width <= W, a
// template argument so that the registers and unrolled loops fit the models' width 4), and walks
// a block of rows with its weights and the rows it reads in registers: ring buffers of kConvRing
// rows (row q in slot q % kConvRing), filled kConvAhead rows before use. The row loop is unrolled
// by kConvRing so every slot index is a constant (no register moves, which would wait on the
// loads); a thread that walked rows one load at a time would be latency-bound. Taps are indexed by k = rows back (tap
// j = width - 1 - k) and summed in ascending j, the fp32 kernels' order.
template <int W, int V>
__device__ __forceinline__ void LoadTaps(const float* __restrict__ w, int64_t c, int64_t width,
                                         float (&wr)[W][V]) {
#pragma unroll
  for (int k = 0; k < W; ++k) {
#pragma unroll
    for (int v = 0; v < V; ++v) wr[k][v] = k < width ? w[(c + v) * width + width - 1 - k] : 0.f;
  }
}

// Loads row `row` of a [*, ch] tensor at channel c into `slot` when begin <= row < end.
template <typename T, int V>
__device__ __forceinline__ void LoadRow(const T* base, int64_t row, int64_t begin, int64_t end,
                                        int64_t ch, int64_t c, float (&slot)[V]) {
  if (row >= begin && row < end) Load(base + row * ch + c, slot);
}

constexpr int Slot(int i) { return i & (kConvRing - 1); }  // i may be negative

// grid (ceil(bt / kConvRowsPerBlock), ceil(ch / (V * blockDim))).
template <typename T, int V, int W>
__global__ void CausalConvForwardKernel(const T* __restrict__ x, const float* __restrict__ w,
                                        T* __restrict__ out, int64_t bt, int64_t t, int64_t ch,
                                        int64_t width) {
  static_assert(kConvRowsPerBlock % kConvRing == 0 && kConvAhead + W <= kConvRing);
  const int64_t c = (blockIdx.y * int64_t{blockDim.x} + threadIdx.x) * V;
  if (c >= ch) return;
  const int64_t r0 = blockIdx.x * int64_t{kConvRowsPerBlock};
  const int64_t r1 = min(bt, r0 + kConvRowsPerBlock);
  float wr[W][V];
  LoadTaps(w, c, width, wr);
  float xr[kConvRing][V] = {};  // x rows; rows before 0 or another sequence are masked below
#pragma unroll
  for (int i = 1 - W; i < kConvAhead; ++i) {
    LoadRow(x, r0 + i, 0, r1, ch, c, xr[Slot(i)]);
  }
  int64_t ti = r0 % t;
  // Running row pointers (cheaper than 64-bit row * ch per access); rows left as int.
  T* out_row = out + r0 * ch + c;
  const T* x_next = x + (r0 + kConvAhead) * ch + c;
  int left = static_cast<int>(r1 - r0);
  for (; left > 0; left -= kConvRing) {
#pragma unroll
    for (int u = 0; u < kConvRing; ++u) {
      if (u >= left) break;
      float acc[V] = {};
#pragma unroll
      for (int k = W - 1; k >= 0; --k) {
        if (k < width && ti >= k) {  // source k steps earlier in the same sequence
#pragma unroll
          for (int v = 0; v < V; ++v) acc[v] += wr[k][v] * xr[Slot(u - k)][v];
        }
      }
      Store(out_row, acc);
      if (u + kConvAhead < left) Load(x_next, xr[Slot(u + kConvAhead)]);
      out_row += ch;
      x_next += ch;
      if (++ti == t) ti = 0;
    }
  }
}

// grid (PartialRows(bt), ceil(ch / (V * blockDim))): d_x of the block's rows directly, d_weight
// as the block's partial row.
template <typename T, int V, int W>
__global__ void CausalConvBackwardKernel(const T* __restrict__ x, const float* __restrict__ w,
                                         const T* __restrict__ d_out, T* __restrict__ d_x,
                                         float* __restrict__ partials, int64_t bt, int64_t t,
                                         int64_t ch, int64_t width) {
  static_assert(kRowsPerPartial % kConvRing == 0 && kConvAhead + W <= kConvRing);
  const int64_t c = (blockIdx.y * int64_t{blockDim.x} + threadIdx.x) * V;
  if (c >= ch) return;
  const int64_t r0 = blockIdx.x * kRowsPerPartial;
  const int64_t r1 = min(bt, r0 + kRowsPerPartial);
  const int64_t dy_end = min(bt, r1 + width - 1);  // past the last d_out row a tap reads
  float wr[W][V], acc[W][V] = {};
  LoadTaps(w, c, width, wr);
  // Rings: x rows (read up to W - 1 back), d_out rows (read up to W - 1
  // ahead, so loaded kConvRing - 1 ahead) and d_x rows (read-modify-write, kConvAhead slots).
  float xr[kConvRing][V] = {}, dyr[kConvRing][V] = {}, dxr[kConvAhead][V] = {};
#pragma unroll
  for (int i = 1 - W; i < kConvAhead; ++i) {
    LoadRow(x, r0 + i, 0, r1, ch, c, xr[Slot(i)]);
  }
#pragma unroll
  for (int i = 0; i < kConvRing - 1; ++i) LoadRow(d_out, r0 + i, 0, dy_end, ch, c, dyr[i]);
#pragma unroll
  for (int i = 0; i < kConvAhead; ++i) LoadRow(d_x, r0 + i, 0, r1, ch, c, dxr[i]);
  int64_t ti = r0 % t;
  // Running row pointers (cheaper than 64-bit row * ch per access); rows left as int.
  T* dx_row = d_x + r0 * ch + c;
  const T* x_next = x + (r0 + kConvAhead) * ch + c;
  const T* dy_next = d_out + (r0 + kConvRing - 1) * ch + c;
  const T* dx_next = d_x + (r0 + kConvAhead) * ch + c;
  int left = static_cast<int>(r1 - r0), dy_left = static_cast<int>(dy_end - r0);
  for (; left > 0; left -= kConvRing, dy_left -= kConvRing) {
#pragma unroll
    for (int u = 0; u < kConvRing; ++u) {
      if (u >= left) break;
      // As a source position: d_x[r] += sum_j w[j] * d_out[r + back(j)] within the sequence.
      float dx[V] = {};
#pragma unroll
      for (int k = W - 1; k >= 0; --k) {
        if (k < width && ti + k < t) {
#pragma unroll
          for (int v = 0; v < V; ++v) dx[v] += wr[k][v] * dyr[Slot(u + k)][v];
        }
      }
      // As an output position: d_w[j] += x[r - back(j)] * d_out[r].
#pragma unroll
      for (int k = 0; k < W; ++k) {
        if (k < width && ti >= k) {
#pragma unroll
          for (int v = 0; v < V; ++v) acc[k][v] += xr[Slot(u - k)][v] * dyr[Slot(u)][v];
        }
      }
      float(&o)[V] = dxr[u % kConvAhead];
#pragma unroll
      for (int v = 0; v < V; ++v) o[v] += dx[v];
      Store(dx_row, o);
      if (u + kConvAhead < left) {
        Load(x_next, xr[Slot(u + kConvAhead)]);
        Load(dx_next, o);
      }
      if (u + kConvRing - 1 < dy_left) Load(dy_next, dyr[Slot(u + kConvRing - 1)]);
      dx_row += ch;
      x_next += ch;
      dy_next += ch;
      dx_next += ch;
      if (++ti == t) ti = 0;
    }
  }
#pragma unroll
  for (int k = 0; k < W; ++k) {
    if (k < width) {
#pragma unroll
      for (int v = 0; v < V; ++v) {
        partials[blockIdx.x * ch * width + (c + v) * width + width - 1 - k] = acc[k][v];
      }
    }
  }
}

// One warp per group; a lane owns V consecutive elements per step (d % V == 0), columns
// j = (p * 32 + lane) * V for step p. With P > 0 (d <= 32 * V * P) the lane's P packs stay in
// registers between the passes (all loads in flight at once, Sigmoid once per element); P = 0
// reloads them for any d. Same arithmetic either way.
template <typename T, int V, int P>
__global__ void SiluL2NormForwardKernel(const T* __restrict__ x, T* __restrict__ y,
                                        int64_t groups, int64_t d) {
  const int64_t g = blockIdx.x * int64_t{blockDim.x / 32} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (g >= groups) return;
  const T* xg = x + g * d;
  T* yg = y + g * d;
  float ss = 0.f;
  if constexpr (P > 0) {
    float s[P][V];  // x, then silu(x)
#pragma unroll
    for (int p = 0; p < P; ++p) {
      if (const int64_t j = (p * 32 + lane) * int64_t{V}; j < d) Load(xg + j, s[p]);
    }
#pragma unroll
    for (int p = 0; p < P; ++p) {
      if ((p * 32 + lane) * int64_t{V} >= d) break;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        s[p][k] = s[p][k] * Sigmoid(s[p][k]);
        ss += s[p][k] * s[p][k];
      }
    }
    ss = WarpSum(ss);
    const float inv = 1.f / sqrtf(ss + kL2NormEps);
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int64_t j = (p * 32 + lane) * int64_t{V};
      if (j >= d) break;
      float o[V];
#pragma unroll
      for (int k = 0; k < V; ++k) o[k] = s[p][k] * inv;
      Store(yg + j, o);
    }
  } else {
    for (int64_t j = lane * V; j < d; j += 32 * V) {
      float xv[V];
      Load(xg + j, xv);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float s = xv[k] * Sigmoid(xv[k]);
        ss += s * s;
      }
    }
    ss = WarpSum(ss);
    const float inv = 1.f / sqrtf(ss + kL2NormEps);
    for (int64_t j = lane * V; j < d; j += 32 * V) {
      float xv[V], o[V];
      Load(xg + j, xv);
#pragma unroll
      for (int k = 0; k < V; ++k) o[k] = xv[k] * Sigmoid(xv[k]) * inv;
      Store(yg + j, o);
    }
  }
}

template <typename T, int V, int P>
__global__ void SiluL2NormBackwardKernel(const T* __restrict__ x, const T* __restrict__ dy,
                                         T* __restrict__ dx, int64_t groups, int64_t d) {
  const int64_t g = blockIdx.x * int64_t{blockDim.x / 32} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (g >= groups) return;
  const T* xg = x + g * d;
  const T* dg = dy + g * d;
  T* dxg = dx + g * d;
  float ss = 0.f, dot = 0.f;
  if constexpr (P > 0) {
    float xv[P][V], dv[P][V], ov[P][V], sig[P][V];
#pragma unroll
    for (int p = 0; p < P; ++p) {
      if (const int64_t j = (p * 32 + lane) * int64_t{V}; j < d) {
        Load(xg + j, xv[p]);
        Load(dg + j, dv[p]);
        Load(dxg + j, ov[p]);
      }
    }
#pragma unroll
    for (int p = 0; p < P; ++p) {
      if ((p * 32 + lane) * int64_t{V} >= d) break;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        sig[p][k] = Sigmoid(xv[p][k]);
        const float s = xv[p][k] * sig[p][k];
        ss += s * s;
        dot += s * dv[p][k];
      }
    }
    ss = WarpSum(ss);
    dot = WarpSum(dot);
    const float inv = 1.f / sqrtf(ss + kL2NormEps);
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int64_t j = (p * 32 + lane) * int64_t{V};
      if (j >= d) break;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float s = xv[p][k] * sig[p][k];
        const float ds = inv * (dv[p][k] - s * inv * inv * dot);
        ov[p][k] += ds * sig[p][k] * (1.f + xv[p][k] * (1.f - sig[p][k]));
      }
      Store(dxg + j, ov[p]);
    }
  } else {
    for (int64_t j = lane * V; j < d; j += 32 * V) {
      float xv[V], dv[V];
      Load(xg + j, xv);
      Load(dg + j, dv);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float s = xv[k] * Sigmoid(xv[k]);
        ss += s * s;
        dot += s * dv[k];
      }
    }
    ss = WarpSum(ss);
    dot = WarpSum(dot);
    const float inv = 1.f / sqrtf(ss + kL2NormEps);
    for (int64_t j = lane * V; j < d; j += 32 * V) {
      float xv[V], dv[V], o[V];
      Load(xg + j, xv);
      Load(dg + j, dv);
      Load(dxg + j, o);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float sig = Sigmoid(xv[k]);
        const float s = xv[k] * sig;
        const float ds = inv * (dv[k] - s * inv * inv * dot);
        o[k] += ds * sig * (1.f + xv[k] * (1.f - sig));
      }
      Store(dxg + j, o);
    }
  }
}

template <typename T, int V>
__global__ void GatesForwardKernel(const T* a_pre, const T* b_pre, float* beta, float* log_gamma,
                                   int64_t n, float cap) {
  GridStride<V>(n, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    float a[W], bp[W], be[W], lg[W];
    Load(a_pre + i, a);
    Load(b_pre + i, bp);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const float b = Sigmoid(bp[k]);
      be[k] = b;
      lg[k] = -Softplus(-a[k]) + log1pf(-cap * b * b);
    }
    Store(beta + i, be);
    Store(log_gamma + i, lg);
  });
}

template <typename T, int V>
__global__ void GatesBackwardKernel(const T* a_pre, const T* b_pre, const float* d_beta,
                                    const float* d_log_gamma, T* d_a_pre, T* d_b_pre, int64_t n,
                                    float cap) {
  GridStride<V>(n, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    float a[W], bp[W], db[W], dlg[W], da[W], dbp[W];
    Load(a_pre + i, a);
    Load(b_pre + i, bp);
    Load(d_beta + i, db);
    Load(d_log_gamma + i, dlg);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const float b = Sigmoid(bp[k]);
      da[k] = dlg[k] * (1.f - Sigmoid(a[k]));
      const float d_b = db[k] + dlg[k] * (-2.f * cap * b / (1.f - cap * b * b));
      dbp[k] = d_b * b * (1.f - b);
    }
    Store(d_a_pre + i, da);
    Store(d_b_pre + i, dbp);
  });
}

__global__ void LambdaForwardKernel(const float* p, float* lambda, int64_t n, float floor) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    lambda[i] = floor + Softplus(p[i]);
  }
}

__global__ void LambdaBackwardKernel(const float* p, const float* d_lambda, float* d_p,
                                     int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    d_p[i] += d_lambda[i] * Sigmoid(p[i]);
  }
}

template <typename T, int V>
__global__ void SwiGluForwardKernel(const T* __restrict__ gate, const T* __restrict__ up,
                                    T* __restrict__ h, int64_t n) {
  GridStride<V>(n, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    float g[W], u[W], o[W];
    Load(gate + i, g);
    Load(up + i, u);
#pragma unroll
    for (int k = 0; k < W; ++k) o[k] = g[k] * Sigmoid(g[k]) * u[k];
    Store(h + i, o);
  });
}

template <typename T, int V>
__global__ void SwiGluBackwardKernel(const T* __restrict__ gate, const T* __restrict__ up,
                                     const T* __restrict__ d_h, T* __restrict__ d_gate,
                                     T* __restrict__ d_up, int64_t n) {
  GridStride<V>(n, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    float g[W], u[W], dh[W], dg[W], du[W];
    Load(gate + i, g);
    Load(up + i, u);
    Load(d_h + i, dh);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const float sig = Sigmoid(g[k]);
      du[k] = dh[k] * g[k] * sig;
      dg[k] = dh[k] * u[k] * sig * (1.f + g[k] * (1.f - sig));
    }
    Store(d_up + i, du);
    Store(d_gate + i, dg);
  });
}

template <typename T, int V>
__global__ void AddInPlaceKernel(T* out, const T* in, int64_t n) {
  GridStride<V>(n, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    float o[W], a[W];
    Load(out + i, o);
    Load(in + i, a);
#pragma unroll
    for (int k = 0; k < W; ++k) o[k] += a[k];
    Store(out + i, o);
  });
}

__global__ void ScaleKernel(float* x, int64_t n, float factor) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    x[i] *= factor;
  }
}

template <typename T, int V>
__global__ void FillKernel(T* x, int64_t n, float value) {
  GridStride<V>(n, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    float o[W];
#pragma unroll
    for (int k = 0; k < W; ++k) o[k] = value;
    Store(x + i, o);
  });
}

// dst = src, through float (rounding once when D is bf16).
template <typename S, typename D, int V>
__global__ void ConvertKernel(const S* __restrict__ src, D* __restrict__ dst, int64_t n) {
  GridStride<V>(n, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    float f[W];
    Load(src + i, f);
    Store(dst + i, f);
  });
}

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
  const float inv_cap = 1.f / cap;
  Strided<V>(v, threadIdx.x, blockDim.x, [&](int64_t j, auto w) {
    constexpr int W = decltype(w)::value;
    float f[W];
    Load(lr + j, f);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const float z = cap * tanhf(f[k] * inv_cap);
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
                                       float* __restrict__ losses, int64_t v, int64_t ld,
                                       float cap, int32_t ignore_token) {
  const int64_t row = blockIdx.x;
  const int32_t target = targets[row];
  if (target == ignore_token) {
    if (threadIdx.x == 0) losses[row] = 0.f;
    return;
  }
  const T* lr = logits + row * ld;
  const MaxSum ms = RowMaxSum<T, V>(lr, v, cap);
  if (threadIdx.x == 0) {
    const float z_t = cap * tanhf(ToFloat(lr[target]) / cap);
    losses[row] = logf(ms.s) + ms.m - z_t;
  }
}

// Overwrites the row with d_logits (rounded once to T), reading it once: the row's log-sum-exp
// comes from the forward, loss + z_target (the forward computed loss = lse - z_target with the
// same z_target expression, so this rebuilds lse to within a rounding of the larger of the two).
template <typename T, int V>
__global__ void SoftcapCeBackwardKernel(T* __restrict__ logits,
                                        const int32_t* __restrict__ targets,
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
  if (threadIdx.x == 0) row_lse = losses[row] + cap * tanhf(ToFloat(lr[target]) / cap);
  __syncthreads();  // the target's logit is read before any thread overwrites it
  const float lse = row_lse, inv_cap = 1.f / cap;
  Strided<V>(v, threadIdx.x, blockDim.x, [&](int64_t j, auto w) {
    constexpr int W = decltype(w)::value;
    float f[W];
    Load(lr + j, f);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const float th = tanhf(f[k] * inv_cap);
      const float p = expf(cap * th - lse);
      const float dz = (p - (j + k == target ? 1.f : 0.f)) * loss_scale;
      f[k] = dz * (1.f - th * th);
    }
    Store(lr + j, f);
  });
}

// Fixed grid (kSumBlocks) and fixed trees: the same input gives the same bits every time.
template <bool kSquare>
__global__ void SumPartialsKernel(const float* __restrict__ x, int64_t n,
                                  double* __restrict__ partials) {
  double acc = 0.0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const double v = x[i];
    acc += kSquare ? v * v : v;
  }
  __shared__ double sh[kThreads];
  sh[threadIdx.x] = acc;
  __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) sh[threadIdx.x] += sh[threadIdx.x + o];
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = sh[0];
}

__global__ void SumFinalKernel(const double* __restrict__ partials, double* __restrict__ out) {
  __shared__ double sh[kSumBlocks];
  sh[threadIdx.x] = partials[threadIdx.x];
  __syncthreads();
  for (int o = kSumBlocks / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) sh[threadIdx.x] += sh[threadIdx.x + o];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = sh[0];
}

// V elements per access when every pointer is 16-byte aligned (parameter tensors start 256 bytes
// apart); the arithmetic per element is the same as V = 1.
template <int V>
__global__ void AdamWKernel(float* __restrict__ params, const float* __restrict__ grads,
                            float* __restrict__ m, float* __restrict__ v, int64_t n, float lr,
                            float beta1, float beta2, float eps, float weight_decay, float bc1,
                            float bc2) {
  GridStride<V>(n, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    float g[W], mi[W], vi[W], p[W];
    Load(grads + i, g);
    Load(m + i, mi);
    Load(v + i, vi);
    Load(params + i, p);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      mi[k] = beta1 * mi[k] + (1.f - beta1) * g[k];
      vi[k] = beta2 * vi[k] + (1.f - beta2) * g[k] * g[k];
      const float m_hat = mi[k] / bc1;
      const float v_hat = vi[k] / bc2;
      p[k] = p[k] - lr * (m_hat / (sqrtf(v_hat) + eps) + weight_decay * p[k]);
    }
    Store(m + i, mi);
    Store(v + i, vi);
    Store(params + i, p);
  });
}

// Blocks of a grid-stride loop over n elements taken V at a time.
int VecBlocks(int64_t n, int v) { return ElementwiseBlocks((n + v - 1) / v); }

// Blocks of kThreads / 32 warps, one row per warp.
unsigned RowBlocks(int64_t rows) {
  constexpr int64_t kRowsPerBlock = kThreads / 32;
  return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
}

}  // namespace

// ------------------------------------------------------------------------------------------------
template <typename T>
cudaError_t LaunchBiasForward(T* out, const float* bias, int64_t rows, int64_t n, cudaStream_t s) {
  if (rows * n == 0) return cudaSuccess;
  return Dispatch<T, kVecElementwise>(Aligned<kVecElementwise>(out), [&]<int V>() {
    return Run(BiasForwardKernel<T, V>, VecBlocks(rows * n, V), kThreads, 0, s, out, bias,
               rows * n, n);
  });
}

template <typename T>
cudaError_t LaunchBiasBackward(const T* d_out, float* d_bias, float* partials, int64_t rows,
                               int64_t n, cudaStream_t s) {
  if (rows * n == 0) return cudaSuccess;
  const int64_t blocks = PartialRows(rows);
  if (cudaError_t e = Run(ColumnPartialsKernel<T>, static_cast<unsigned>(blocks), kThreads, 0, s,
                          d_out, rows, n, partials);
      e != cudaSuccess) {
    return e;
  }
  return ReducePartials(partials, blocks, n, d_bias, s);
}

template <typename T>
cudaError_t LaunchEmbeddingForward(const int32_t* tokens, const float* table, T* out, int64_t n,
                                   int64_t c, float scale, cudaStream_t s) {
  if (n * c == 0) return cudaSuccess;
  const bool vec = c % kVecElementwise == 0 && Aligned<kVecElementwise>(out);
  return Dispatch<T, kVecElementwise>(vec, [&]<int V>() {
    return Run(EmbeddingForwardKernel<T, V>, VecBlocks(n * c, V), kThreads, 0, s, tokens, table,
               out, n, c, scale);
  });
}

template <typename T>
cudaError_t LaunchEmbeddingBackward(const int32_t* order, const int32_t* seg_start,
                                    const int32_t* seg_token, int64_t num_segments,
                                    const T* d_out, float* d_table, int64_t c, float scale,
                                    cudaStream_t s) {
  if (num_segments == 0 || c == 0) return cudaSuccess;
  const bool vec = c % kVecEmbedding == 0 && Aligned<kVecEmbedding>(d_out);
  return Dispatch<T, kVecEmbedding>(vec, [&]<int V>() {
    const int threads = static_cast<int>(std::min<int64_t>(kThreads, ((c / V + 31) / 32) * 32));
    return Run(EmbeddingBackwardKernel<T, V>, static_cast<unsigned>(num_segments), threads, 0, s,
               order, seg_start, seg_token, d_out, d_table, c, scale);
  });
}

int64_t MaxRmsNormWidth() { return 6144; }  // 8 warps x 6144 floats = 192 KiB of shared memory

template <typename T>
cudaError_t LaunchRmsNormForward(const T* x, const float* weight, T* out, float* rstd,
                                 int64_t rows, int64_t c, float eps, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  const bool vec = c % kVecRow == 0 && Aligned<kVecRow>(x, out);
  return Dispatch<T, kVecRow>(vec, [&]<int V>() {
    return Run(RmsNormForwardKernel<T, V>, RowBlocks(rows), kThreads, 0, s, x, weight, out, rstd,
               rows, c, eps);
  });
}

template <typename T>
cudaError_t LaunchRmsNormBackward(const T* x, const float* weight, const float* rstd,
                                  const T* d_out, T* d_x, float* d_weight, float* partials,
                                  int64_t rows, int64_t c, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if (c > MaxRmsNormWidth()) return cudaErrorInvalidValue;
  const size_t smem = sizeof(float) * (kThreads / 32) * c;
  const int64_t blocks = PartialRows(rows);
  const bool vec = c % kVecRow == 0 && Aligned<kVecRow>(x, d_out, d_x);
  const cudaError_t e = Dispatch<T, kVecRow>(vec, [&]<int V>() {
    return DispatchPacks<V>(c, [&]<int P>() {
      if (smem > 48 * 1024) {
        if (cudaError_t err = cudaFuncSetAttribute(RmsNormBackwardKernel<T, V, P>,
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   static_cast<int>(smem));
            err != cudaSuccess) {
          return err;
        }
      }
      return Run(RmsNormBackwardKernel<T, V, P>, static_cast<unsigned>(blocks), kThreads, smem, s,
                 x, weight, rstd, d_out, d_x, partials, rows, c);
    });
  });
  if (e != cudaSuccess) return e;
  return ReducePartials(partials, blocks, c, d_weight, s);
}

// The weights live in registers, so the forward also needs w <= kMaxConvWidth.
template <typename T>
cudaError_t LaunchCausalConvForward(const T* x, const float* weight, T* out, int64_t b, int64_t t,
                                    int64_t ch, int64_t w, cudaStream_t s) {
  if (b * t * ch == 0) return cudaSuccess;
  if (w < 0 || w > kMaxConvWidth) return cudaErrorInvalidValue;
  const bool vec = ch % kVecConv == 0 && Aligned<kVecConv>(x, out);
  return Dispatch<T, kVecConv>(vec, [&]<int V>() {
    const dim3 grid(static_cast<unsigned>((b * t + kConvRowsPerBlock - 1) / kConvRowsPerBlock),
                    static_cast<unsigned>((ch / V + kConvThreads - 1) / kConvThreads));
    return DispatchTaps(w, [&]<int W>() {
      return Run(CausalConvForwardKernel<T, V, W>, grid, kConvThreads, 0, s, x, weight, out,
                 b * t, t, ch, w);
    });
  });
}

template <typename T>
cudaError_t LaunchCausalConvBackward(const T* x, const float* weight, const T* d_out, T* d_x,
                                     float* d_weight, float* partials, int64_t b, int64_t t,
                                     int64_t ch, int64_t w, cudaStream_t s) {
  if (b * t * ch == 0) return cudaSuccess;
  if (w < 1 || w > kMaxConvWidth) return cudaErrorInvalidValue;
  const int64_t blocks = PartialRows(b * t);
  const bool vec = ch % kVecConv == 0 && Aligned<kVecConv>(x, d_out, d_x);
  const cudaError_t e = Dispatch<T, kVecConv>(vec, [&]<int V>() {
    const dim3 grid(static_cast<unsigned>(blocks),
                    static_cast<unsigned>((ch / V + kConvThreads - 1) / kConvThreads));
    return DispatchTaps(w, [&]<int W>() {
      return Run(CausalConvBackwardKernel<T, V, W>, grid, kConvThreads, 0, s, x, weight, d_out,
                 d_x, partials, b * t, t, ch, w);
    });
  });
  if (e != cudaSuccess) return e;
  return ReducePartials(partials, blocks, ch * w, d_weight, s);
}

template <typename T>
cudaError_t LaunchSiluL2NormForward(const T* x, T* y, int64_t groups, int64_t d, cudaStream_t s) {
  if (groups == 0) return cudaSuccess;
  const bool vec = d % kVecRow == 0 && Aligned<kVecRow>(x, y);
  return Dispatch<T, kVecRow>(vec, [&]<int V>() {
    return DispatchPacks<V>(d, [&]<int P>() {
      return Run(SiluL2NormForwardKernel<T, V, P>, RowBlocks(groups), kThreads, 0, s, x, y,
                 groups, d);
    });
  });
}

template <typename T>
cudaError_t LaunchSiluL2NormBackward(const T* x, const T* d_y, T* d_x, int64_t groups, int64_t d,
                                     cudaStream_t s) {
  if (groups == 0) return cudaSuccess;
  const bool vec = d % kVecRow == 0 && Aligned<kVecRow>(x, d_y, d_x);
  return Dispatch<T, kVecRow>(vec, [&]<int V>() {
    return DispatchPacks<V>(d, [&]<int P>() {
      return Run(SiluL2NormBackwardKernel<T, V, P>, RowBlocks(groups), kThreads, 0, s, x, d_y,
                 d_x, groups, d);
    });
  });
}

template <typename T>
cudaError_t LaunchGatesForward(const T* a_pre, const T* b_pre, float* beta, float* log_gamma,
                               int64_t n, float cap, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  const bool vec = Aligned<kVecElementwise>(a_pre, b_pre, beta, log_gamma);
  return Dispatch<T, kVecElementwise>(vec, [&]<int V>() {
    return Run(GatesForwardKernel<T, V>, VecBlocks(n, V), kThreads, 0, s, a_pre, b_pre, beta,
               log_gamma, n, cap);
  });
}

template <typename T>
cudaError_t LaunchGatesBackward(const T* a_pre, const T* b_pre, const float* d_beta,
                                const float* d_log_gamma, T* d_a_pre, T* d_b_pre, int64_t n,
                                float cap, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  const bool vec =
      Aligned<kVecElementwise>(a_pre, b_pre, d_beta, d_log_gamma, d_a_pre, d_b_pre);
  return Dispatch<T, kVecElementwise>(vec, [&]<int V>() {
    return Run(GatesBackwardKernel<T, V>, VecBlocks(n, V), kThreads, 0, s, a_pre, b_pre, d_beta,
               d_log_gamma, d_a_pre, d_b_pre, n, cap);
  });
}

cudaError_t LaunchLambdaForward(const float* p, float* lambda, int64_t n, float floor,
                                cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  return Run(LambdaForwardKernel, ElementwiseBlocks(n), kThreads, 0, s, p, lambda, n, floor);
}

cudaError_t LaunchLambdaBackward(const float* p, const float* d_lambda, float* d_p, int64_t n,
                                 cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  return Run(LambdaBackwardKernel, ElementwiseBlocks(n), kThreads, 0, s, p, d_lambda, d_p, n);
}

template <typename T>
cudaError_t LaunchSwiGluForward(const T* gate, const T* up, T* h, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  return Dispatch<T, kVecElementwise>(Aligned<kVecElementwise>(gate, up, h), [&]<int V>() {
    return Run(SwiGluForwardKernel<T, V>, VecBlocks(n, V), kThreads, 0, s, gate, up, h, n);
  });
}

template <typename T>
cudaError_t LaunchSwiGluBackward(const T* gate, const T* up, const T* d_h, T* d_gate, T* d_up,
                                 int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  const bool vec = Aligned<kVecElementwise>(gate, up, d_h, d_gate, d_up);
  return Dispatch<T, kVecElementwise>(vec, [&]<int V>() {
    return Run(SwiGluBackwardKernel<T, V>, VecBlocks(n, V), kThreads, 0, s, gate, up, d_h, d_gate,
               d_up, n);
  });
}

template <typename T>
cudaError_t LaunchAddInPlace(T* out, const T* in, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  return Dispatch<T, kVecElementwise>(Aligned<kVecElementwise>(out, in), [&]<int V>() {
    return Run(AddInPlaceKernel<T, V>, VecBlocks(n, V), kThreads, 0, s, out, in, n);
  });
}

cudaError_t LaunchScale(float* x, int64_t n, float factor, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  return Run(ScaleKernel, ElementwiseBlocks(n), kThreads, 0, s, x, n, factor);
}

template <typename T>
cudaError_t LaunchFill(T* x, int64_t n, float value, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  return Dispatch<T, kVecElementwise>(Aligned<kVecElementwise>(x), [&]<int V>() {
    return Run(FillKernel<T, V>, VecBlocks(n, V), kThreads, 0, s, x, n, value);
  });
}

namespace {
// float <-> T; vectorised as T (the activation type: bf16 unless both sides are float).
template <typename From, typename To>
cudaError_t LaunchConvert(const From* src, To* dst, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  using T = std::conditional_t<kIsBf16<From>, From, To>;
  return Dispatch<T, kVecElementwise>(Aligned<kVecElementwise>(src, dst), [&]<int V>() {
    return Run(ConvertKernel<From, To, V>, VecBlocks(n, V), kThreads, 0, s, src, dst, n);
  });
}
}  // namespace

template <typename T>
cudaError_t LaunchFromFloat(const float* src, T* dst, int64_t n, cudaStream_t s) {
  return LaunchConvert<float, T>(src, dst, n, s);
}

template <typename T>
cudaError_t LaunchToFloat(const T* src, float* dst, int64_t n, cudaStream_t s) {
  return LaunchConvert<T, float>(src, dst, n, s);
}

template <typename T>
cudaError_t LaunchSoftcapCrossEntropyForward(const T* logits, const int32_t* targets,
                                             float* losses, int64_t rows, int64_t v, int64_t ld,
                                             float cap, int32_t ignore_token, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if (ld < v) return cudaErrorInvalidValue;
  const bool vec = ld % kVecElementwise == 0 && Aligned<kVecElementwise>(logits);
  return Dispatch<T, kVecElementwise>(vec, [&]<int V>() {
    return Run(SoftcapCeForwardKernel<T, V>, static_cast<unsigned>(rows), kCeThreads, 0, s,
               logits, targets, losses, v, ld, cap, ignore_token);
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
    return Run(SoftcapCeBackwardKernel<T, V>, static_cast<unsigned>(rows), kCeThreads, 0, s,
               logits, targets, losses, v, ld, cap, ignore_token, loss_scale);
  });
}

namespace {
// sum (of squares when kSquare) of x[0, n) into *out, in two ordered passes.
template <bool kSquare>
cudaError_t LaunchSumOf(const float* x, int64_t n, double* partials, double* out,
                        cudaStream_t s) {
  if (cudaError_t e = Run(SumPartialsKernel<kSquare>, kSumBlocks, kThreads, 0, s, x, n, partials);
      e != cudaSuccess) {
    return e;
  }
  return Run(SumFinalKernel, 1, kSumBlocks, 0, s, partials, out);
}
}  // namespace

cudaError_t LaunchSumOfSquares(const float* x, int64_t n, double* partials, double* out,
                               cudaStream_t s) {
  return LaunchSumOf<true>(x, n, partials, out, s);
}

cudaError_t LaunchSum(const float* x, int64_t n, double* partials, double* out, cudaStream_t s) {
  return LaunchSumOf<false>(x, n, partials, out, s);
}

cudaError_t LaunchAdamW(float* params, const float* grads, float* m, float* v, int64_t n, float lr,
                        float beta1, float beta2, float eps, float weight_decay,
                        float bias_correction1, float bias_correction2, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  if (Aligned<4>(params, grads, m, v)) {
    return Run(AdamWKernel<4>, VecBlocks(n, 4), kThreads, 0, s, params, grads, m, v, n, lr, beta1,
               beta2, eps, weight_decay, bias_correction1, bias_correction2);
  }
  return Run(AdamWKernel<1>, ElementwiseBlocks(n), kThreads, 0, s, params, grads, m, v, n, lr,
             beta1, beta2, eps, weight_decay, bias_correction1, bias_correction2);
}

// The activation-typed launchers, for both activation types (cuda_backend.cc links against these).
#define MESA_INSTANTIATE_LAUNCHERS(T)                                                              \
  template cudaError_t LaunchBiasForward<T>(T*, const float*, int64_t, int64_t, cudaStream_t);    \
  template cudaError_t LaunchBiasBackward<T>(const T*, float*, float*, int64_t, int64_t,          \
                                             cudaStream_t);                                        \
  template cudaError_t LaunchEmbeddingForward<T>(const int32_t*, const float*, T*, int64_t,        \
                                                 int64_t, float, cudaStream_t);                    \
  template cudaError_t LaunchEmbeddingBackward<T>(const int32_t*, const int32_t*, const int32_t*,  \
                                                  int64_t, const T*, float*, int64_t, float,       \
                                                  cudaStream_t);                                   \
  template cudaError_t LaunchRmsNormForward<T>(const T*, const float*, T*, float*, int64_t,        \
                                               int64_t, float, cudaStream_t);                      \
  template cudaError_t LaunchRmsNormBackward<T>(const T*, const float*, const float*, const T*,    \
                                                T*, float*, float*, int64_t, int64_t,              \
                                                cudaStream_t);                                     \
  template cudaError_t LaunchCausalConvForward<T>(const T*, const float*, T*, int64_t, int64_t,    \
                                                  int64_t, int64_t, cudaStream_t);                 \
  template cudaError_t LaunchCausalConvBackward<T>(const T*, const float*, const T*, T*, float*,   \
                                                   float*, int64_t, int64_t, int64_t, int64_t,     \
                                                   cudaStream_t);                                  \
  template cudaError_t LaunchSiluL2NormForward<T>(const T*, T*, int64_t, int64_t, cudaStream_t);  \
  template cudaError_t LaunchSiluL2NormBackward<T>(const T*, const T*, T*, int64_t, int64_t,      \
                                                   cudaStream_t);                                  \
  template cudaError_t LaunchGatesForward<T>(const T*, const T*, float*, float*, int64_t, float,  \
                                             cudaStream_t);                                        \
  template cudaError_t LaunchGatesBackward<T>(const T*, const T*, const float*, const float*, T*, \
                                              T*, int64_t, float, cudaStream_t);                   \
  template cudaError_t LaunchSwiGluForward<T>(const T*, const T*, T*, int64_t, cudaStream_t);     \
  template cudaError_t LaunchSwiGluBackward<T>(const T*, const T*, const T*, T*, T*, int64_t,     \
                                               cudaStream_t);                                      \
  template cudaError_t LaunchAddInPlace<T>(T*, const T*, int64_t, cudaStream_t);                  \
  template cudaError_t LaunchSoftcapCrossEntropyForward<T>(const T*, const int32_t*, float*,      \
                                                           int64_t, int64_t, int64_t, float,       \
                                                           int32_t, cudaStream_t);                 \
  template cudaError_t LaunchSoftcapCrossEntropyBackward<T>(T*, const int32_t*, const float*,      \
                                                            int64_t, int64_t, int64_t, float,      \
                                                            int32_t, float, cudaStream_t);         \
  template cudaError_t LaunchFill<T>(T*, int64_t, float, cudaStream_t);                            \
  template cudaError_t LaunchFromFloat<T>(const float*, T*, int64_t, cudaStream_t);               \
  template cudaError_t LaunchToFloat<T>(const T*, float*, int64_t, cudaStream_t);

MESA_INSTANTIATE_LAUNCHERS(float)
MESA_INSTANTIATE_LAUNCHERS(__nv_bfloat16)

#undef MESA_INSTANTIATE_LAUNCHERS

}  // namespace mesa::model::cuda
