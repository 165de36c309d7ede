// CUDA single-token decoding steps (float32): one thread block of 4 warps per (sequence, head).
//
// Mesa: the warps update H row by row (a warp per row, lanes over columns: coalesced), keeping
// the new H in shared memory (D^2 floats, 64 KiB at D = 128) for the CG; each CG step is one
// matrix-vector product (a warp per row, shuffle-reduced) and two block-wide float64 dot
// products, with the scalars and the stopping rule of kernels/mesa_types.h, so every thread takes
// the same branch. Then G is updated and read out row by row in one pass.
// DeltaNet: a warp per row of S: u_i = S_i . k, then S_i <- g S_i + beta (v_i - g u_i) k and
// o_i = S_i . q, in one pass over the row (rows are independent, no block synchronisation).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/decode_step_kernels.h"

namespace mesa::kernels::cuda {
namespace {

// Kernel arguments: the launch shape and the device pointers.
struct MesaArgs {
  int heads, head_dim, max_steps;
  float tolerance;
  MesaStepDevice p;
};
struct DeltaArgs {
  int head_dim;
  DeltaStepDevice p;
};

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kMaxDim = 128;

__device__ __forceinline__ float WarpSum(float x) {
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

__device__ __forceinline__ double WarpSum(double x) {
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

// sum_t a_t b_t over the first n threads' values, in float64; every thread gets the same value.
__device__ double BlockDot(float a, float b, int n, double* scratch) {
  double x = threadIdx.x < n ? double(a) * double(b) : 0.0;
  x = WarpSum(x);
  __syncthreads();  // scratch may still be read by a previous call
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = x;
  __syncthreads();
  double sum = 0;
  for (int w = 0; w < kWarps; ++w) sum += scratch[w];
  return sum;
}

template <bool kSolve>
__global__ void __launch_bounds__(kThreads) MesaStepKernel(MesaArgs args) {
  const MesaStepDevice& a = args.p;
  extern __shared__ float h_shared[];  // [D][D] when kSolve
  __shared__ float k_s[kMaxDim], v_s[kMaxDim], p_s[kMaxDim], w_s[kMaxDim], x_s[kMaxDim];
  __shared__ double scratch[kWarps];
  const int row = blockIdx.x, n = args.head_dim, t = threadIdx.x;
  const int warp = t >> 5, lane = t & 31;
  const int64_t vec = int64_t(row) * n, mat = int64_t(row) * n * n;
  const float gamma = static_cast<float>(exp(double(a.log_gamma[row])));
  const float beta = a.beta[row];
  float q = 0.f, lambda = 0.f;
  if (t < n) {
    q = a.q[vec + t];
    lambda = a.lambda[(row % args.heads) * n + t];
    k_s[t] = a.k[vec + t];
    v_s[t] = a.v[vec + t];
  }
  __syncthreads();
  // H <- gamma H + beta k k^T (kept in shared memory for the solve).
  if (a.h != nullptr) {
    float* h = a.h + mat;
    for (int i = warp; i < n; i += kWarps) {
      const float bk = beta * k_s[i];
      for (int j = lane; j < n; j += 32) {
        const float value = gamma * h[i * n + j] + bk * k_s[j];
        h[i * n + j] = value;
        if (kSolve) h_shared[i * n + j] = value;
      }
    }
  }
  int steps = 0;
  float x = q;  // GLA: q* = q
  if (kSolve) {
    // CG with x0 = 0 (kernels/mesa_types.h); thread t owns entry t of x, r and p.
    x = 0.f;
    float r = q;
    if (t < n) p_s[t] = q;
    double d_old = BlockDot(r, r, n, scratch);  // also makes h_shared and p_s visible
    const double d0 = d_old;
    const double tol2 = double(args.tolerance) * args.tolerance;
    for (int step = 0; step < args.max_steps && d_old > 0; ++step) {
      for (int i = warp; i < n; i += kWarps) {
        float acc = 0.f;
        for (int j = lane; j < n; j += 32) acc += h_shared[i * n + j] * p_s[j];
        acc = WarpSum(acc);
        if (lane == 0) w_s[i] = acc;
      }
      __syncthreads();
      const float p = t < n ? p_s[t] : 0.f;
      const float w = t < n ? w_s[t] + p * lambda : 0.f;
      const double pw = BlockDot(p, w, n, scratch);
      if (!(pw > 0)) break;  // lost positivity to rounding: freeze
      const float alpha = static_cast<float>(d_old / pw);
      x += alpha * p;
      r -= alpha * w;
      const double d_new = BlockDot(r, r, n, scratch);
      ++steps;
      if ((args.tolerance > 0 && d_new <= tol2 * d0) || !(d_new > 0)) break;
      const float ratio = static_cast<float>(d_new / d_old);
      if (t < n) p_s[t] = r + ratio * p;
      d_old = d_new;
      __syncthreads();
    }
  }
  if (t < n) {
    x_s[t] = x;
    if (a.q_star != nullptr) a.q_star[vec + t] = x;
  }
  if (t == 0 && a.cg_steps != nullptr) a.cg_steps[row] = steps;
  __syncthreads();
  // G <- gamma G + beta v k^T and o = G q*, a row per warp.
  float* g = a.g + mat;
  for (int i = warp; i < n; i += kWarps) {
    const float bv = beta * v_s[i];
    float acc = 0.f;
    for (int j = lane; j < n; j += 32) {
      const float value = gamma * g[i * n + j] + bv * k_s[j];
      g[i * n + j] = value;
      acc += value * x_s[j];
    }
    acc = WarpSum(acc);
    if (lane == 0) a.o[vec + i] = acc;
  }
}

__global__ void __launch_bounds__(kThreads) DeltaStepKernel(DeltaArgs args) {
  const DeltaStepDevice& a = args.p;
  const int row = blockIdx.x, n = args.head_dim;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t vec = int64_t(row) * n;
  float* s = a.s + vec * n;
  const float* k = a.k + vec;
  const float* q = a.q + vec;
  const float beta = a.beta[row];
  const float g = a.log_gamma == nullptr ? 1.f : static_cast<float>(exp(double(a.log_gamma[row])));
  for (int i = warp; i < n; i += kWarps) {
    float* srow = s + int64_t(i) * n;
    float u = 0.f;
    for (int j = lane; j < n; j += 32) u += srow[j] * k[j];
    u = WarpSum(u);
    const float delta = beta * (a.v[vec + i] - g * u);
    float acc = 0.f;
    for (int j = lane; j < n; j += 32) {
      const float value = g * srow[j] + delta * k[j];
      srow[j] = value;
      acc += value * q[j];
    }
    acc = WarpSum(acc);
    if (lane == 0) a.o[vec + i] = acc;
  }
}

}  // namespace

cudaError_t LaunchMesaStep(int rows, int heads, int head_dim, int max_steps, float tolerance,
                           const MesaStepDevice& ptrs, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  const MesaArgs args{heads, head_dim, max_steps, tolerance, ptrs};
  if (max_steps == 0) {
    MesaStepKernel<false><<<rows, kThreads, 0, stream>>>(args);
    return cudaGetLastError();
  }
  const size_t smem = size_t(head_dim) * head_dim * sizeof(float);
  const cudaError_t attr = cudaFuncSetAttribute(
      MesaStepKernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (attr != cudaSuccess) return attr;
  MesaStepKernel<true><<<rows, kThreads, smem, stream>>>(args);
  return cudaGetLastError();
}

cudaError_t LaunchDeltaNetStep(int rows, int head_dim, const DeltaStepDevice& ptrs,
                               cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  DeltaStepKernel<<<rows, kThreads, 0, stream>>>(DeltaArgs{head_dim, ptrs});
  return cudaGetLastError();
}

}  // namespace mesa::kernels::cuda
