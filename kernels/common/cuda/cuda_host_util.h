// Host helpers shared by the GPU tests and the benchmarks (tags gpu/manual): CUDA error and
// absl::Status checks, and fp32 host data to device memory as fp32 or bf16.
#ifndef MESANET_KERNELS_COMMON_CUDA_CUDA_HOST_UTIL_H_
#define MESANET_KERNELS_COMMON_CUDA_CUDA_HOST_UTIL_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "absl/status/status.h"

// Prints the CUDA error with its location and exits with status 2.
#define CHECK_CUDA(x)                                                                    \
  do {                                                                                   \
    cudaError_t e_ = (x);                                                                \
    if (e_ != cudaSuccess) {                                                             \
      std::fprintf(stderr, "CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, \
                   __LINE__);                                                            \
      std::exit(2);                                                                      \
    }                                                                                    \
  } while (0)

// Prints a non-OK absl::Status with its location and exits with status 2.
#define CHECK_STATUS(x)                                                                 \
  do {                                                                                  \
    absl::Status s_ = (x);                                                              \
    if (!s_.ok()) {                                                                     \
      std::fprintf(stderr, "%s at %s:%d\n", s_.ToString().c_str(), __FILE__, __LINE__); \
      std::exit(2);                                                                     \
    }                                                                                   \
  } while (0)

namespace mesa::kernels::cuda {

// Device bytes of n elements stored as bf16 (2 bytes) or fp32 (4 bytes).
inline size_t DeviceBytes(size_t n, bool bf16) { return n * (bf16 ? 2 : 4); }

// Copies fp32 host data to dst (DeviceBytes(x.size(), bf16) bytes of device memory), converted to
// bf16 (round to nearest even) when bf16.
inline void CopyToDevice(void* dst, const std::vector<float>& x, bool bf16) {
  if (bf16) {
    std::vector<__nv_bfloat16> h(x.size());
    for (size_t i = 0; i < x.size(); ++i) h[i] = __float2bfloat16(x[i]);
    CHECK_CUDA(cudaMemcpy(dst, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
  } else {
    CHECK_CUDA(cudaMemcpy(dst, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
  }
}

// A new device allocation (cudaMalloc; the caller frees it) holding x as bf16 or fp32.
inline void* NewDeviceCopy(const std::vector<float>& x, bool bf16) {
  void* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, DeviceBytes(x.size(), bf16)));
  CopyToDevice(p, x, bf16);
  return p;
}

// ||x − ref|| / ||ref|| with the reference's squared norm floored at 1e-6 per element (a tensor
// that is zero in exact arithmetic is rounding either way); INFINITY if x has a non-finite
// value, 0 for an absent (empty) reference.
inline double RelErrFloored(const std::vector<float>& x, const std::vector<float>& ref) {
  if (ref.empty()) return 0;
  double num = 0, den = 1e-6 * static_cast<double>(ref.size());
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i])) return INFINITY;
    num += (double(x[i]) - ref[i]) * (double(x[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / den);
}

// x rounded to bf16 and back.
inline std::vector<float> RoundBf16(std::vector<float> x) {
  for (float& y : x) y = __bfloat162float(__float2bfloat16(y));
  return x;
}

// n bf16 values from device memory, as floats.
inline std::vector<float> FetchBf16(const void* device, size_t n) {
  std::vector<__nv_bfloat16> raw(n);
  CHECK_CUDA(cudaMemcpy(raw.data(), device, n * 2, cudaMemcpyDeviceToHost));
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = __bfloat162float(raw[i]);
  return out;
}

// Median wall time (CUDA events on the default stream) of `reps` runs of f after 3 warm-up runs.
template <typename F>
double MedianMs(F&& f, int reps) {
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) f();  // warm-up
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    CHECK_CUDA(cudaEventRecord(a));
    f();
    CHECK_CUDA(cudaEventRecord(b));
    CHECK_CUDA(cudaEventSynchronize(b));
    float t = 0;
    CHECK_CUDA(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  CHECK_CUDA(cudaEventDestroy(a));
  CHECK_CUDA(cudaEventDestroy(b));
  return ms[ms.size() / 2];
}

// Mean ms of `reps` calls of f enqueued back to back between two events: what a training step
// sees, where the host runs ahead of the GPU and per-call host work overlaps earlier kernels.
// (MedianMs times each call alone, host set-up before its first kernel included.)
template <typename F>
double BackToBackMs(F&& f, int reps) {
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) f();
  CHECK_CUDA(cudaDeviceSynchronize());
  CHECK_CUDA(cudaEventRecord(a));
  for (int i = 0; i < reps; ++i) f();
  CHECK_CUDA(cudaEventRecord(b));
  CHECK_CUDA(cudaEventSynchronize(b));
  float t = 0;
  CHECK_CUDA(cudaEventElapsedTime(&t, a, b));
  CHECK_CUDA(cudaEventDestroy(a));
  CHECK_CUDA(cudaEventDestroy(b));
  return t / reps;
}

}  // namespace mesa::kernels::cuda

#endif  // MESANET_KERNELS_COMMON_CUDA_CUDA_HOST_UTIL_H_
