// Sampling on the GPU, one block per row, so that only token ids cross to the host: the token
// model::SampleToken (model/inference/sampler.cc) draws from the soft-capped logits with the row's
// settings, and its log-probability under the unmodified distribution. The same rules: tokens rank
// by (logit desc, id asc); top-k keeps the k best, top-p the shortest best prefix of those whose
// weight exp((z - max) / T) reaches top_p of theirs; the draw is the inverse CDF over the kept
// tokens in id order at CounterUniform(seed, draw) (SplitMix64, bit for bit the host's). The cut
// points are found by bisection over the ordered bits of the logits (32 passes each), ties at a
// cut resolved in id order. Sums are float in a fixed order where the host sums doubles: at a
// boundary the two may differ in the last bits, so rarely pick neighbouring tokens
// (tests/gpu: agreement with the host sampler and the distribution).
#include "model/backend/cuda/backend_kernels.h"

#include <cmath>
#include <cstdint>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "model/backend/cuda/backend_common.cuh"

namespace mesa::model::cuda {
namespace {

constexpr int kSampleThreads = 512;
constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

__device__ __forceinline__ uint64_t SplitMix64(uint64_t z) {
  z += kGolden;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

__device__ __forceinline__ double CounterUniform(uint64_t seed, uint64_t draw) {
  const uint64_t bits = SplitMix64(SplitMix64(seed) + kGolden * draw);
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

// Order-preserving bits of a float (larger float, larger key); -infinity is 0: never kept.
__device__ __forceinline__ uint32_t FloatKey(float z) {
  if (z == -INFINITY) return 0u;
  const uint32_t b = __float_as_uint(z);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// (logit desc, id asc) as one number: larger means ranked higher.
__device__ __forceinline__ uint64_t RankKey(uint32_t fkey, int64_t id) {
  return (static_cast<uint64_t>(fkey) << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(id));
}

__device__ __forceinline__ float CappedLogit(float x, float cap) {
  return cap > 0.f ? cap * tanhf(x / cap) : x;
}

template <typename T>
struct Row {
  const T* p;
  int64_t v;
  float cap;
  __device__ float z(int64_t j) const { return CappedLogit(ToFloat(p[j]), cap); }
};

struct MaxOp {
  template <typename T>
  __device__ __forceinline__ T operator()(const T& a, const T& b) const {
    return a < b ? b : a;
  }
};

using ReduceF = cub::BlockReduce<float, kSampleThreads>;
using ReduceU = cub::BlockReduce<unsigned long long, kSampleThreads>;
using ScanF = cub::BlockScan<float, kSampleThreads>;

struct Shared {
  union {
    typename ReduceF::TempStorage f;
    typename ReduceU::TempStorage u;
    typename ScanF::TempStorage scan;
  } temp;
  float f;
  unsigned long long u;
};

__device__ float BlockSum(Shared& sh, float x) {
  __syncthreads();
  const float total = ReduceF(sh.temp.f).Sum(x);
  if (threadIdx.x == 0) sh.f = total;
  __syncthreads();
  return sh.f;
}

__device__ unsigned long long BlockMax(Shared& sh, unsigned long long x) {
  __syncthreads();
  const unsigned long long m = ReduceU(sh.temp.u).Reduce(x, MaxOp());
  if (threadIdx.x == 0) sh.u = m;
  __syncthreads();
  return sh.u;
}

__device__ float BlockMaxF(Shared& sh, float x) {
  __syncthreads();
  const float m = ReduceF(sh.temp.f).Reduce(x, MaxOp());
  if (threadIdx.x == 0) sh.f = m;
  __syncthreads();
  return sh.f;
}

// The largest float key t for which `measure(t)` (decreasing in t) is still >= target.
template <typename F>
__device__ uint32_t BisectFloatKey(F&& measure, float target) {
  uint32_t lo = 1, hi = 0xFFFFFFFFu;
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo + 1) / 2;
    if (measure(mid) >= target) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// The rank key of the tie at float key `fkey` (in id order) at which the weight of the ties so far
// (weights `w`, starting from `before`) first reaches `target`. Each thread takes a contiguous
// range of ids so that the scan runs in id order.
template <typename T, typename W>
__device__ uint64_t TieBoundary(Shared& sh, const Row<T>& row, uint32_t fkey, uint64_t floor_key,
                                W&& w, float before, float target) {
  const int64_t per = (row.v + kSampleThreads - 1) / kSampleThreads;
  const int64_t begin = threadIdx.x * per, end = min(row.v, begin + per);
  float local = 0.f;
  for (int64_t j = begin; j < end; ++j) {
    const float z = row.z(j);
    if (FloatKey(z) == fkey && RankKey(fkey, j) >= floor_key) local += w(z);
  }
  float prefix;
  __syncthreads();
  ScanF(sh.temp.scan).ExclusiveSum(local, prefix);
  unsigned long long found = 0;  // the boundary's rank key (0: not in this thread)
  float acc = before + prefix;
  for (int64_t j = begin; j < end && found == 0; ++j) {
    const float z = row.z(j);
    if (FloatKey(z) != fkey || RankKey(fkey, j) < floor_key) continue;
    acc += w(z);
    if (acc >= target) found = RankKey(fkey, j);
  }
  // Several threads may reach the target (rounding): the first in id order ranks highest.
  const unsigned long long best = BlockMax(sh, found);
  return best != 0 ? best : RankKey(fkey, 0);
}

template <typename T>
__global__ void SoftcapSampleKernel(const T* __restrict__ logits, int64_t v, int64_t ld, float cap,
                                    const SamplingRow* __restrict__ params,
                                    int32_t* __restrict__ tokens, float* __restrict__ logprobs) {
  __shared__ Shared sh;
  const int64_t r = blockIdx.x;
  const Row<T> row{logits + r * ld, v, cap};
  const SamplingRow p = params[r];
  // The maximum, its rank key (greedy) and the softmax's normaliser at temperature 1.
  float m = -INFINITY;
  unsigned long long best = 0;
  for (int64_t j = threadIdx.x; j < v; j += kSampleThreads) {
    const float z = row.z(j);
    m = fmaxf(m, z);
    const uint32_t fk = FloatKey(z);
    if (fk != 0) best = max(best, static_cast<unsigned long long>(RankKey(fk, j)));
  }
  m = BlockMaxF(sh, m);
  best = BlockMax(sh, best);
  float s = 0.f;
  for (int64_t j = threadIdx.x; j < v; j += kSampleThreads) s += expf(row.z(j) - m);
  s = BlockSum(sh, s);

  int64_t token = 0xFFFFFFFFu - static_cast<uint32_t>(best & 0xFFFFFFFFu);
  if (!(p.temperature == 0.f || p.top_k == 1)) {
    const float inv_t = 1.f / p.temperature;
    auto weight = [&](float z) { return z == -INFINITY ? 0.f : expf((z - m) * inv_t); };
    // Count and weight of the tokens ranked at or above `key`.
    auto count_at_least = [&](uint64_t key) {
      float c = 0.f;
      for (int64_t j = threadIdx.x; j < v; j += kSampleThreads) {
        const uint32_t fk = FloatKey(row.z(j));
        if (fk != 0 && RankKey(fk, j) >= key) c += 1.f;
      }
      return BlockSum(sh, c);
    };
    auto mass_at_least = [&](uint64_t key) {
      float w = 0.f;
      for (int64_t j = threadIdx.x; j < v; j += kSampleThreads) {
        const float z = row.z(j);
        const uint32_t fk = FloatKey(z);
        if (fk != 0 && RankKey(fk, j) >= key) w += weight(z);
      }
      return BlockSum(sh, w);
    };
    uint64_t floor_key = 1;  // every unmasked token
    const float n = count_at_least(floor_key);
    if (p.top_k > 0 && static_cast<float>(p.top_k) < n) {
      const float k = static_cast<float>(p.top_k);
      // The float key of the k-th best, then the tie among equal logits that makes it k.
      const uint32_t fk = BisectFloatKey(
          [&](uint32_t t) { return count_at_least(static_cast<uint64_t>(t) << 32); }, k);
      const float above = count_at_least((static_cast<uint64_t>(fk) + 1) << 32);
      floor_key = TieBoundary(
          sh, row, fk, 0, [](float) { return 1.f; }, above, k);
    }
    if (p.top_p < 1.f) {
      const float target = p.top_p * mass_at_least(floor_key);
      const uint32_t fk = BisectFloatKey(
          [&](uint32_t t) {
            const uint64_t key = static_cast<uint64_t>(t) << 32;
            return mass_at_least(key > floor_key ? key : floor_key);
          },
          target);
      const uint64_t above_key = (static_cast<uint64_t>(fk) + 1) << 32;
      const float above = mass_at_least(above_key > floor_key ? above_key : floor_key);
      const uint64_t cut = TieBoundary(sh, row, fk, floor_key, weight, above, target);
      floor_key = cut > floor_key ? cut : floor_key;
    }
    // Inverse CDF over the kept tokens in id order.
    const float total = mass_at_least(floor_key);
    const float u = static_cast<float>(CounterUniform(p.seed, p.draw)) * total;
    const int64_t per = (v + kSampleThreads - 1) / kSampleThreads;
    const int64_t begin = threadIdx.x * per, end = min(v, begin + per);
    float local = 0.f;
    int64_t last_kept = -1;
    for (int64_t j = begin; j < end; ++j) {
      const float z = row.z(j);
      const uint32_t fk = FloatKey(z);
      if (fk != 0 && RankKey(fk, j) >= floor_key) {
        local += weight(z);
        last_kept = j;
      }
    }
    float prefix;
    __syncthreads();
    ScanF(sh.temp.scan).ExclusiveSum(local, prefix);
    unsigned long long chosen = 0;  // id + 1 where this thread's range holds u
    if (last_kept >= 0 && u >= prefix && u < prefix + local) {
      float mass = prefix;
      for (int64_t j = begin; j < end; ++j) {
        const float z = row.z(j);
        const uint32_t fk = FloatKey(z);
        if (fk == 0 || RankKey(fk, j) < floor_key) continue;
        mass += weight(z);
        if (u < mass) {
          chosen = j + 1;
          break;
        }
      }
      if (chosen == 0) chosen = last_kept + 1;
    }
    // Rounding may leave u at the top: the last kept token, as the host does.
    const unsigned long long any = BlockMax(sh, chosen);
    const unsigned long long last = BlockMax(sh, static_cast<unsigned long long>(last_kept + 1));
    token = static_cast<int64_t>(any != 0 ? any : last) - 1;
  }
  if (threadIdx.x == 0) {
    tokens[r] = static_cast<int32_t>(token);
    logprobs[r] = row.z(token) - m - logf(s);
  }
}

}  // namespace

template <typename T>
cudaError_t LaunchSoftcapSample(const T* logits, int64_t rows, int64_t v, int64_t ld, float cap,
                                const SamplingRow* params, int32_t* tokens, float* logprobs,
                                cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if (ld < v || !(cap >= 0)) return cudaErrorInvalidValue;
  return Run(SoftcapSampleKernel<T>, static_cast<unsigned>(rows), kSampleThreads, 0, s, logits, v,
             ld, cap, params, tokens, logprobs);
}

#define MESA_INSTANTIATE(T)                                                               \
  template cudaError_t LaunchSoftcapSample<T>(const T*, int64_t, int64_t, int64_t, float, \
                                              const SamplingRow*, int32_t*, float*, cudaStream_t);
MESA_INSTANTIATE(float)
MESA_INSTANTIATE(Bf16)
#undef MESA_INSTANTIATE

}  // namespace mesa::model::cuda
