#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "model/mixers/attention/attention_cache_kernels.h"

namespace mesa::model::attention_cuda {
namespace {

__device__ inline float Load(const float* p, int64_t i) { return p[i]; }
__device__ inline float Load(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ inline void Store(float* p, int64_t i, float v) { p[i] = v; }
__device__ inline void Store(__nv_bfloat16* p, int64_t i, float v) { p[i] = __float2bfloat16(v); }

// One thread per (row, token, head, pair). The angle in float64, as RotaryCpu.
template <typename T>
__global__ void RotaryKernel(T* x, int64_t b, int64_t t, int64_t h, int64_t d,
                             const int64_t* starts, bool inverse) {
  const int64_t half = d / 2;
  const int64_t n = b * t * h * half;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < n;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = idx % half;
    const int64_t token = idx / (half * h);  // row * t + j
    const int64_t row = token / t, j = token % t;
    const int64_t pos = (starts != nullptr ? starts[row] : 0) + j;
    const double angle = static_cast<double>(pos) * pow(10000.0, -2.0 * static_cast<double>(i) / d);
    const float c = static_cast<float>(cos(angle));
    const float s = static_cast<float>(inverse ? -sin(angle) : sin(angle));
    const int64_t base = (idx / half) * d;  // (token, head) vector
    const float x1 = Load(x, base + i), x2 = Load(x, base + i + half);
    Store(x, base + i, x1 * c - x2 * s);
    Store(x, base + i + half, x2 * c + x1 * s);
  }
}

template <typename T>
__global__ void AppendKvKernel(const T* k, const T* v, int64_t b, int64_t t, int64_t hd,
                               int64_t token, T* k_cache, T* v_cache, int64_t capacity,
                               const int64_t* lengths, int32_t* valid) {
  const int64_t n = b * hd;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < n;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = idx / hd, e = idx % hd;
    const int64_t pos = lengths[row] + token;
    const int64_t dst = (row * capacity + pos % capacity) * hd + e;
    const int64_t src = (row * t + token) * hd + e;
    k_cache[dst] = k[src];
    v_cache[dst] = v[src];
    if (e == 0) valid[row] = static_cast<int32_t>(pos + 1 < capacity ? pos + 1 : capacity);
  }
}

int Blocks(int64_t n) {
  const int64_t blocks = (n + 255) / 256;
  return static_cast<int>(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

}  // namespace

int LaunchRotary(void* x, bool bf16, int64_t b, int64_t t, int64_t h, int64_t d,
                 const int64_t* starts, bool inverse, void* stream) {
  const int grid = Blocks(b * t * h * (d / 2));
  auto s = static_cast<cudaStream_t>(stream);
  if (bf16) {
    RotaryKernel<<<grid, 256, 0, s>>>(static_cast<__nv_bfloat16*>(x), b, t, h, d, starts, inverse);
  } else {
    RotaryKernel<<<grid, 256, 0, s>>>(static_cast<float*>(x), b, t, h, d, starts, inverse);
  }
  return static_cast<int>(cudaGetLastError());
}

int LaunchAppendKv(const void* k, const void* v, bool bf16, int64_t b, int64_t t, int64_t hd,
                   int64_t token, void* k_cache, void* v_cache, int64_t capacity,
                   const int64_t* lengths, int32_t* valid, void* stream) {
  const int grid = Blocks(b * hd);
  auto s = static_cast<cudaStream_t>(stream);
  if (bf16) {
    AppendKvKernel<<<grid, 256, 0, s>>>(
        static_cast<const __nv_bfloat16*>(k), static_cast<const __nv_bfloat16*>(v), b, t, hd, token,
        static_cast<__nv_bfloat16*>(k_cache), static_cast<__nv_bfloat16*>(v_cache), capacity,
        lengths, valid);
  } else {
    AppendKvKernel<<<grid, 256, 0, s>>>(static_cast<const float*>(k), static_cast<const float*>(v),
                                        b, t, hd, token, static_cast<float*>(k_cache),
                                        static_cast<float*>(v_cache), capacity, lengths, valid);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace mesa::model::attention_cuda
