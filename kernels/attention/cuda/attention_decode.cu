// Single-query attention decoding, split over the cache (flash-decoding): each (batch row, head)
// gets a thread-block cluster of S CTAs (S = 1 before Hopper), CTA r reads the r-th of S equal
// chunks of the row's valid slots and reduces them to one partial (max, sum, output); CTA 0 of
// the cluster merges the S partials through distributed shared memory and writes o. No global
// scratch, so the launch needs no workspace and can be captured in a CUDA graph.
//
// Inside a CTA, a group of G lanes (G = D / elements per 16 bytes, rounded up to a power of 2)
// owns one cache slot at a time: each lane loads 16 bytes of k and of v, the group sums the dot
// product with shuffles and runs an online softmax (log2 units; q is prescaled by scale * log2 e).
// Each lane issues kUnroll slots' k and v loads before using any, so a CTA keeps 64 KB in flight
// (two CTAs per SM; 8 slots per lane at one CTA per SM measured the same, 2026-11-26).
#include <cooperative_groups.h>

#include <cmath>

#include "kernels/attention/cuda/attention_common.cuh"
#include "kernels/common/cuda/kernel_problem.h"

namespace mesa::kernels::attention::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kUnroll = 4;
constexpr int kMaxDim = 128;
constexpr int kMaxSplits = 16;  // a non-portable cluster size on Hopper (checked at run time)
constexpr int kPortableSplits = 8;

// 16 bytes of a row as floats: 8 bf16 or 4 fp32 values.
template <typename T>
struct Vec {
  static constexpr int kElems = 16 / sizeof(T);
  __device__ static void ToFloat(const uint4& u, float* f) {
    if constexpr (sizeof(T) == 2) {
      const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 x = __bfloat1622float2(h[i]);
        f[2 * i] = x.x;
        f[2 * i + 1] = x.y;
      }
    } else {
      f[0] = __uint_as_float(u.x);
      f[1] = __uint_as_float(u.y);
      f[2] = __uint_as_float(u.z);
      f[3] = __uint_as_float(u.w);
    }
  }
};

// Streaming 16-byte load (each cache byte is read once per step: keep it out of L1).
__device__ __forceinline__ uint4 LoadStream(const void* p) {
  return __ldcs(reinterpret_cast<const uint4*>(p));
}

// Merges partial (m, l, acc) with another one (max in log2 units; -inf: an empty partial).
template <int E>
__device__ __forceinline__ void Merge(float& m, float& l, float acc[E], float m_o, float l_o,
                                      const float acc_o[E]) {
  const float mx = fmaxf(m, m_o);
  const float base = mx == -INFINITY ? 0.f : mx;
  const float c = exp2f(m - base), c_o = exp2f(m_o - base);
  l = l * c + l_o * c_o;
#pragma unroll
  for (int e = 0; e < E; ++e) acc[e] = acc[e] * c + acc_o[e] * c_o;
  m = mx;
}

struct Partial {
  float m, l, acc[kMaxDim];
};

template <typename T>
__global__ void __launch_bounds__(kThreads, 2)
    DecodeKernel(int heads, int dim, int capacity, int splits, int group, float scale_log2,
                 const T* __restrict__ q, const T* __restrict__ k_cache,
                 const T* __restrict__ v_cache, const int32_t* __restrict__ lengths, T* o) {
  constexpr int E = Vec<T>::kElems;
  __shared__ float s_m[kWarps], s_l[kWarps], s_acc[kWarps][kMaxDim];
  __shared__ Partial part;  // this CTA's (read by the cluster's CTA 0)
  const int bh = blockIdx.x / splits, rank = blockIdx.x % splits;
  const int b = bh / heads, h = bh % heads;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int sub = lane % group, grp = lane / group, groups = 32 / group;
  const bool active = sub * E < dim;
  const int len = lengths != nullptr ? lengths[b] : capacity;
  const int chunk = (len + splits - 1) / splits;
  const int s0 = rank * chunk, s1 = min(len, s0 + chunk);

  float qr[E], acc[E];
  {
    uint4 u = make_uint4(0, 0, 0, 0);
    if (active) u = *reinterpret_cast<const uint4*>(q + static_cast<int64_t>(bh) * dim + sub * E);
    Vec<T>::ToFloat(u, qr);
  }
#pragma unroll
  for (int e = 0; e < E; ++e) {
    qr[e] *= scale_log2;
    acc[e] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  const int64_t slot_stride = static_cast<int64_t>(heads) * dim;
  const T* k_row = k_cache + (static_cast<int64_t>(b) * capacity * heads + h) * dim + sub * E;
  const T* v_row = v_cache + (k_row - k_cache);
  const int per_round = kWarps * groups * kUnroll;
  for (int base = s0; base < s1; base += per_round) {
    uint4 kv[kUnroll], vv[kUnroll];
    int slot[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      slot[u] = base + (u * kWarps + warp) * groups + grp;
      kv[u] = vv[u] = make_uint4(0, 0, 0, 0);
      if (active && slot[u] < s1) {
        kv[u] = LoadStream(k_row + slot[u] * slot_stride);
        vv[u] = LoadStream(v_row + slot[u] * slot_stride);
      }
    }
    float s[kUnroll];
    float m_new = m;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float kf[E];
      Vec<T>::ToFloat(kv[u], kf);
      float dot = 0.f;
#pragma unroll
      for (int e = 0; e < E; ++e) dot = fmaf(qr[e], kf[e], dot);
      for (int x = group >> 1; x > 0; x >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, x);
      s[u] = slot[u] < s1 ? dot : -INFINITY;
      m_new = fmaxf(m_new, s[u]);
    }
    const float mb = m_new == -INFINITY ? 0.f : m_new;
    const float corr = exp2f(m - mb);
    l *= corr;
#pragma unroll
    for (int e = 0; e < E; ++e) acc[e] *= corr;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const float p = exp2f(s[u] - mb);
      float vf[E];
      Vec<T>::ToFloat(vv[u], vf);
      l += p;
#pragma unroll
      for (int e = 0; e < E; ++e) acc[e] = fmaf(p, vf[e], acc[e]);
    }
    m = m_new;
  }
  // The warp's groups, then the CTA's warps, into one partial.
  for (int x = group; x < 32; x <<= 1) {
    float acc_o[E];
#pragma unroll
    for (int e = 0; e < E; ++e) acc_o[e] = __shfl_xor_sync(0xffffffffu, acc[e], x);
    const float m_o = __shfl_xor_sync(0xffffffffu, m, x);
    const float l_o = __shfl_xor_sync(0xffffffffu, l, x);
    Merge<E>(m, l, acc, m_o, l_o, acc_o);
  }
  if (lane == 0) {
    s_m[warp] = m;
    s_l[warp] = l;
  }
  if (grp == 0 && active) {
#pragma unroll
    for (int e = 0; e < E; ++e) s_acc[warp][sub * E + e] = acc[e];
  }
  __syncthreads();
  for (int d = threadIdx.x; d < dim; d += kThreads) {
    float mx = -INFINITY;
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, s_m[w]);
    const float mb = mx == -INFINITY ? 0.f : mx;
    float sum = 0.f, out = 0.f;
    for (int w = 0; w < kWarps; ++w) {
      const float f = exp2f(s_m[w] - mb);  // 0 for a warp that saw no slot
      sum += s_l[w] * f;
      out += s_acc[w][d] * f;
    }
    part.acc[d] = out;
    if (d == 0) {
      part.m = mx;
      part.l = sum;
    }
  }
#if __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  // Partial r of the cluster (r = 0: this CTA's own).
  auto partial = [&](int r) -> const Partial* {
    return r == 0 ? &part : cluster.map_shared_rank(&part, r);
  };
  if (splits > 1) {
    cluster.sync();  // every CTA's partial is in its shared memory
  } else {
    __syncthreads();
  }
#else
  if (splits > 1) __trap();  // the host never splits before sm_90
  auto partial = [&](int) -> const Partial* { return &part; };
  __syncthreads();
#endif
  if (rank == 0) {
    for (int d = threadIdx.x; d < dim; d += kThreads) {
      float mx = -INFINITY;
      for (int r = 0; r < splits; ++r) mx = fmaxf(mx, partial(r)->m);
      float sum = 0.f, out = 0.f;
      for (int r = 0; r < splits; ++r) {
        const Partial* p = partial(r);
        const float f = exp2f(p->m - mx);
        sum += p->l * f;
        out += p->acc[d] * f;
      }
      const float val = out / sum;
      if constexpr (sizeof(T) == 2) {
        o[static_cast<int64_t>(bh) * dim + d] = __float2bfloat16(val);
      } else {
        o[static_cast<int64_t>(bh) * dim + d] = val;
      }
    }
  }
#if __CUDA_ARCH__ >= 900
  if (splits > 1) cluster.sync();  // CTA 0 has read the others' shared memory
#endif
}

// The largest cluster this GPU schedules for the kernel: 16 (non-portable) where Hopper allows
// it, else 8; 1 before sm_90. Asked once per process and kernel type.
template <typename T>
int MaxSplits() {
  static int cached = [] {
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        major < 9) {
      cudaGetLastError();
      return 1;
    }
    if (cudaFuncSetAttribute(DecodeKernel<T>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) ==
        cudaSuccess) {
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(kMaxSplits);
      cfg.blockDim = dim3(kThreads);
      cudaLaunchAttribute attr;
      attr.id = cudaLaunchAttributeClusterDimension;
      attr.val.clusterDim.x = kMaxSplits;
      attr.val.clusterDim.y = attr.val.clusterDim.z = 1;
      cfg.attrs = &attr;
      cfg.numAttrs = 1;
      int clusters = 0;
      if (cudaOccupancyMaxActiveClusters(&clusters, DecodeKernel<T>, &cfg) == cudaSuccess &&
          clusters > 0) {
        return kMaxSplits;
      }
    }
    cudaGetLastError();
    return kPortableSplits;
  }();
  return cached;
}

// Splits per (b, h): enough CTAs for about four per SM (so the last wave is short), at least
// kMinSlots cache slots per CTA, a power of two up to what the GPU schedules.
int ChooseSplits(int bh, int capacity, int max_splits) {
  constexpr int kMinSlots = 256;
  const int sms = mesa::kernels::cuda::SmCount();
  int s = 1;
  while (s < max_splits && static_cast<int64_t>(bh) * s < 4 * sms &&
         capacity >= 2 * s * kMinSlots) {
    s *= 2;
  }
  return s;
}

template <typename T>
cudaError_t Launch(int batch, int heads, int head_dim, int capacity, float scale, const void* q,
                   const void* k_cache, const void* v_cache, const int32_t* lengths, void* o,
                   cudaStream_t stream) {
  int group = 1;
  while (group * Vec<T>::kElems < head_dim) group *= 2;
  const int bh = batch * heads;
  const int splits = ChooseSplits(bh, capacity, MaxSplits<T>());
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(bh) * splits);
  cfg.blockDim = dim3(kThreads);
  cfg.stream = stream;
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = splits;
  attr.val.clusterDim.y = attr.val.clusterDim.z = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = splits > 1 ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, DecodeKernel<T>, heads, head_dim, capacity, splits, group,
                            scale * kLog2e, static_cast<const T*>(q),
                            static_cast<const T*>(k_cache), static_cast<const T*>(v_cache), lengths,
                            static_cast<T*>(o));
}

}  // namespace

cudaError_t LaunchDecode(int batch, int heads, int head_dim, int capacity, float scale, DType dtype,
                         const void* q, const void* k_cache, const void* v_cache,
                         const int32_t* lengths, void* o, cudaStream_t stream) {
  if (dtype == DType::kBF16) {
    return Launch<bf16>(batch, heads, head_dim, capacity, scale, q, k_cache, v_cache, lengths, o,
                        stream);
  }
  return Launch<float>(batch, heads, head_dim, capacity, scale, q, k_cache, v_cache, lengths, o,
                       stream);
}

}  // namespace mesa::kernels::attention::cuda
