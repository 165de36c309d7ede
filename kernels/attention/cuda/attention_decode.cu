// Single-query attention decoding: one CTA of 8 warps per (batch row, head); each warp runs an
// online softmax over every 8th valid cache slot (lanes over the head dim), then the warps'
// partial (max, sum, output) are merged in shared memory.
#include <cmath>

#include "kernels/attention/cuda/attention_common.cuh"

namespace mesa::kernels::attention::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kMaxDim = 128;

template <typename T>
__global__ void __launch_bounds__(kWarps * 32)
    DecodeKernel(int heads, int dim, int capacity, float scale, const T* __restrict__ q,
                 const T* __restrict__ k_cache, const T* __restrict__ v_cache,
                 const int32_t* __restrict__ lengths, T* o) {
  __shared__ float s_m[kWarps], s_l[kWarps], s_acc[kWarps][kMaxDim];
  const int bh = blockIdx.x, b = bh / heads, h = bh % heads;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int len = lengths != nullptr ? lengths[b] : capacity;
  float qr[kMaxDim / 32], acc[kMaxDim / 32];
#pragma unroll
  for (int i = 0; i < kMaxDim / 32; ++i) {
    const int d = lane + 32 * i;
    qr[i] = d < dim ? LoadF(q + static_cast<int64_t>(bh) * dim + d) * scale : 0.f;
    acc[i] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  for (int j = warp; j < len; j += kWarps) {
    const int64_t off = ((static_cast<int64_t>(b) * capacity + j) * heads + h) * dim;
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < kMaxDim / 32; ++i) {
      const int d = lane + 32 * i;
      if (d < dim) s += qr[i] * LoadF(k_cache + off + d);
    }
#pragma unroll
    for (int x = 16; x > 0; x >>= 1) s += __shfl_xor_sync(0xffffffffu, s, x);
    const float m_new = fmaxf(m, s);
    const float corr = __expf(m - m_new), p = __expf(s - m_new);
    l = l * corr + p;
#pragma unroll
    for (int i = 0; i < kMaxDim / 32; ++i) {
      const int d = lane + 32 * i;
      acc[i] = acc[i] * corr + (d < dim ? p * LoadF(v_cache + off + d) : 0.f);
    }
    m = m_new;
  }
  if (lane == 0) {
    s_m[warp] = m;
    s_l[warp] = l;
  }
#pragma unroll
  for (int i = 0; i < kMaxDim / 32; ++i) s_acc[warp][lane + 32 * i] = acc[i];
  __syncthreads();
  for (int d = threadIdx.x; d < dim; d += kWarps * 32) {
    float mx = -INFINITY;
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, s_m[w]);
    float sum = 0.f, out = 0.f;
    for (int w = 0; w < kWarps; ++w) {
      const float f = __expf(s_m[w] - mx);  // 0 for a warp that saw no slot
      sum += s_l[w] * f;
      out += s_acc[w][d] * f;
    }
    const float val = out / sum;
    if constexpr (sizeof(T) == 2) {
      o[static_cast<int64_t>(bh) * dim + d] = __float2bfloat16(val);
    } else {
      o[static_cast<int64_t>(bh) * dim + d] = val;
    }
  }
}

}  // namespace

cudaError_t LaunchDecode(int batch, int heads, int head_dim, int capacity, float scale, DType dtype,
                         const void* q, const void* k_cache, const void* v_cache,
                         const int32_t* lengths, void* o, cudaStream_t stream) {
  const int blocks = batch * heads;
  if (dtype == DType::kBF16) {
    DecodeKernel<bf16><<<blocks, kWarps * 32, 0, stream>>>(
        heads, head_dim, capacity, scale, static_cast<const bf16*>(q),
        static_cast<const bf16*>(k_cache), static_cast<const bf16*>(v_cache), lengths,
        static_cast<bf16*>(o));
  } else {
    DecodeKernel<float><<<blocks, kWarps * 32, 0, stream>>>(
        heads, head_dim, capacity, scale, static_cast<const float*>(q),
        static_cast<const float*>(k_cache), static_cast<const float*>(v_cache), lengths,
        static_cast<float*>(o));
  }
  return cudaGetLastError();
}

}  // namespace mesa::kernels::attention::cuda
