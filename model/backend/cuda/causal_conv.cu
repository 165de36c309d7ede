// Causal depthwise conv over time of the CUDA backend, per sequence: x, out [B, T, Ch], weight
// [Ch, W], out[t, c] = sum_j weight[c, j] * x[t - (W - 1) + j, c] (forward), and d_x += ...,
// d_weight += ... through per-block partials and ReducePartials (backward), and the tail terms of a
// context-parallel slice. With `doc_start` (packed documents, null: none) a tap before the first
// token of the output's document reads zero. Must match cpu::CausalConvForward /
// cpu::CausalConvBackward / cpu::CausalConvTailBackward (model/layers/cpu_layers.cc).
#include "model/backend/cuda/backend_kernels.h"

#include <cstdint>

#include "model/backend/cuda/backend_common.cuh"

namespace mesa::model::cuda {
namespace {

// Channels per thread of the bf16 conv kernels: 2 (4-byte accesses; 2-byte ones ran the backward at
// half the speed on H200, and 4 channels would double the register rings again).
constexpr int kVecConv = 2;
constexpr int kConvRowsPerBlock = 32;  // forward: the rows a thread walks with its weights held
constexpr int kConvRing = 16;          // conv: rows held per tensor (power of two)
constexpr int kConvAhead = 8;          // conv: rows loaded ahead of their use
constexpr int kConvThreads = 128;

// Runs launch.operator()<W>() with the conv kernels' tap capacity: 4 (the models' width) when it
// fits, else kMaxConvWidth.
template <typename F>
cudaError_t DispatchTaps(int64_t width, F&& launch) {
  if (width <= 4) return launch.template operator()<4>();
  return launch.template operator()<kMaxConvWidth>();
}

// The conv kernels: a thread owns V channels (ch % V == 0) and up to W taps (width <= W, a
// template argument so that the registers and unrolled loops fit the models' width 4), and walks
// a block of rows with its weights and the rows it reads in registers: ring buffers of kConvRing
// rows (row q in slot q % kConvRing), filled kConvAhead rows before use. The row loop is unrolled
// by kConvRing so every slot index is a constant (no register moves, which would wait on the
// loads); a thread that walked rows one load at a time would be latency-bound. Taps are indexed by
// k = rows back (tap j = width - 1 - k) and summed in ascending j, the fp32 kernels' order.
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
                                        int64_t width, const int32_t* __restrict__ doc_start) {
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
  int64_t ti = r0 % t, row = r0;
  // Running row pointers (cheaper than 64-bit row * ch per access); rows left as int.
  T* out_row = out + r0 * ch + c;
  const T* x_next = x + (r0 + kConvAhead) * ch + c;
  int left = static_cast<int>(r1 - r0);
  for (; left > 0; left -= kConvRing) {
#pragma unroll
    for (int u = 0; u < kConvRing; ++u) {
      if (u >= left) break;
      float acc[V] = {};
      const int64_t lo = doc_start != nullptr ? doc_start[row] : 0;
#pragma unroll
      for (int k = W - 1; k >= 0; --k) {
        if (k < width && ti - k >= lo) {  // source k steps earlier in the same document
#pragma unroll
          for (int v = 0; v < V; ++v) acc[v] += wr[k][v] * xr[Slot(u - k)][v];
        }
      }
      Store(out_row, acc);
      if (u + kConvAhead < left) Load(x_next, xr[Slot(u + kConvAhead)]);
      out_row += ch;
      x_next += ch;
      ++row;
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
                                         int64_t ch, int64_t width,
                                         const int32_t* __restrict__ doc_start) {
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
  int64_t ti = r0 % t, row = r0;
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
        if (k < width && ti + k < t && (doc_start == nullptr || doc_start[row + k] <= ti)) {
#pragma unroll
          for (int v = 0; v < V; ++v) dx[v] += wr[k][v] * dyr[Slot(u + k)][v];
        }
      }
      // As an output position: d_w[j] += x[r - back(j)] * d_out[r].
      const int64_t lo = doc_start != nullptr ? doc_start[row] : 0;
#pragma unroll
      for (int k = 0; k < W; ++k) {
        if (k < width && ti - k >= lo) {
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
      ++row;
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

// grid ceil(ch / kConvThreads): a thread per channel walks every sequence (no atomics; the work
// is b x (w - 1)^2 per channel, next to nothing).
template <typename T>
__global__ void CausalConvTailBackwardKernel(const float* __restrict__ tail,
                                             const float* __restrict__ d_tail_out,
                                             const float* __restrict__ w,
                                             const T* __restrict__ d_out, T* __restrict__ d_x,
                                             float* __restrict__ d_tail,
                                             float* __restrict__ d_weight, int64_t b, int64_t t,
                                             int64_t ch, int64_t width) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= ch) return;
  const int64_t tw = width - 1;
  float dw[kMaxConvWidth] = {};
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t i = 0; i < tw; ++i) {
      // Tail row i is read by output ti at tap j = i - ti.
      float dt = 0.f;
      for (int64_t ti = 0; ti <= i && ti < t; ++ti) {
        const int64_t j = i - ti;
        const float g = ToFloat(d_out[(bi * t + ti) * ch + c]);
        dt += w[c * width + j] * g;
        if (tail != nullptr) dw[j] += tail[(bi * tw + i) * ch + c] * g;
      }
      if (d_tail != nullptr) d_tail[(bi * tw + i) * ch + c] = dt;
      if (d_tail_out != nullptr) {
        T* dx = d_x + (bi * t + t - tw + i) * ch + c;
        *dx = FromFloat<T>(ToFloat(*dx) + d_tail_out[(bi * tw + i) * ch + c]);
      }
    }
  }
  if (tail != nullptr) {
    for (int64_t j = 0; j < tw; ++j) d_weight[c * width + j] += dw[j];
  }
}

}  // namespace

template <typename T>
cudaError_t LaunchCausalConvTailBackward(const float* tail, const float* d_tail_out,
                                         const float* weight, const T* d_out, T* d_x, float* d_tail,
                                         float* d_weight, int64_t b, int64_t t, int64_t ch,
                                         int64_t w, cudaStream_t s) {
  if (b * ch == 0 || w <= 1) return cudaSuccess;
  if (w > kMaxConvWidth || t < w - 1) return cudaErrorInvalidValue;
  const unsigned grid = static_cast<unsigned>((ch + kConvThreads - 1) / kConvThreads);
  return Run(CausalConvTailBackwardKernel<T>, grid, kConvThreads, 0, s, tail, d_tail_out, weight,
             d_out, d_x, d_tail, d_weight, b, t, ch, w);
}

// The weights live in registers, so the forward also needs w <= kMaxConvWidth.
template <typename T>
cudaError_t LaunchCausalConvForward(const T* x, const float* weight, T* out, int64_t b, int64_t t,
                                    int64_t ch, int64_t w, const int32_t* doc_start,
                                    cudaStream_t s) {
  if (b * t * ch == 0) return cudaSuccess;
  if (w < 0 || w > kMaxConvWidth) return cudaErrorInvalidValue;
  const bool vec = ch % kVecConv == 0 && Aligned<kVecConv>(x, out);
  return Dispatch<T, kVecConv>(vec, [&]<int V>() {
    const dim3 grid(static_cast<unsigned>((b * t + kConvRowsPerBlock - 1) / kConvRowsPerBlock),
                    static_cast<unsigned>((ch / V + kConvThreads - 1) / kConvThreads));
    return DispatchTaps(w, [&]<int W>() {
      return Run(CausalConvForwardKernel<T, V, W>, grid, kConvThreads, 0, s, x, weight, out, b * t,
                 t, ch, w, doc_start);
    });
  });
}

template <typename T>
cudaError_t LaunchCausalConvBackward(const T* x, const float* weight, const T* d_out, T* d_x,
                                     float* d_weight, float* partials, int64_t b, int64_t t,
                                     int64_t ch, int64_t w, const int32_t* doc_start,
                                     cudaStream_t s) {
  if (b * t * ch == 0) return cudaSuccess;
  if (w < 1 || w > kMaxConvWidth) return cudaErrorInvalidValue;
  const int64_t blocks = PartialRows(b * t);
  const bool vec = ch % kVecConv == 0 && Aligned<kVecConv>(x, d_out, d_x);
  const cudaError_t e = Dispatch<T, kVecConv>(vec, [&]<int V>() {
    const dim3 grid(static_cast<unsigned>(blocks),
                    static_cast<unsigned>((ch / V + kConvThreads - 1) / kConvThreads));
    return DispatchTaps(w, [&]<int W>() {
      return Run(CausalConvBackwardKernel<T, V, W>, grid, kConvThreads, 0, s, x, weight, d_out, d_x,
                 partials, b * t, t, ch, w, doc_start);
    });
  });
  if (e != cudaSuccess) return e;
  return ReducePartials(partials, blocks, ch * w, d_weight, s);
}

// Both activation types (backend_kernels.h).
#define MESA_INSTANTIATE(T)                                                                        \
  template cudaError_t LaunchCausalConvForward<T>(const T*, const float*, T*, int64_t, int64_t,    \
                                                  int64_t, int64_t, const int32_t*, cudaStream_t); \
  template cudaError_t LaunchCausalConvBackward<T>(const T*, const float*, const T*, T*, float*,   \
                                                   float*, int64_t, int64_t, int64_t, int64_t,     \
                                                   const int32_t*, cudaStream_t);                  \
  template cudaError_t LaunchCausalConvTailBackward<T>(const float*, const float*, const float*,   \
                                                       const T*, T*, float*, float*, int64_t,      \
                                                       int64_t, int64_t, int64_t, cudaStream_t);

MESA_INSTANTIATE(float)
MESA_INSTANTIATE(Bf16)

#undef MESA_INSTANTIATE

}  // namespace mesa::model::cuda
