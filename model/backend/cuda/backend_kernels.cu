// Fused kernels of the CUDA backend (see backend_kernels.h). fp32 in and out, fp32 math (double for
// the loss and norm sums that the host reads), same formulas as model/layers/cpu_layers.cc.
#include "model/backend/cuda/backend_kernels.h"

#include <algorithm>
#include <cmath>

namespace mesa::model::cuda {
namespace {

constexpr int kThreads = 256;
constexpr float kL2NormEps = 1e-6f;  // cpu_layers.cc's kL2NormEps

int ElementwiseBlocks(int64_t n) {
  // Grid-stride loops: enough blocks to fill the chip (132 SMs x 16), never a huge grid.
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, 2112)));
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

// out[i] += sum_k partials[k * n + i], k ascending: the deterministic second pass.
__global__ void ReducePartialsKernel(const float* __restrict__ partials, int64_t num_partials,
                                     int64_t n, float* __restrict__ out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    float acc = 0.f;
    for (int64_t k = 0; k < num_partials; ++k) acc += partials[k * n + i];
    out[i] += acc;
  }
}

cudaError_t ReducePartials(const float* partials, int64_t num_partials, int64_t n, float* out,
                           cudaStream_t s) {
  ReducePartialsKernel<<<ElementwiseBlocks(n), kThreads, 0, s>>>(partials, num_partials, n, out);
  return cudaGetLastError();
}

// ------------------------------------------------------------------------------------------------
__global__ void BiasForwardKernel(float* out, const float* bias, int64_t total, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] += bias[i % n];
  }
}

// partials[blk][j] = sum over the block's rows of x[r][j].
__global__ void ColumnPartialsKernel(const float* __restrict__ x, int64_t rows, int64_t n,
                                     float* __restrict__ partials) {
  const int64_t r0 = blockIdx.x * kRowsPerPartial;
  const int64_t r1 = min(rows, r0 + kRowsPerPartial);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    float acc = 0.f;
    for (int64_t r = r0; r < r1; ++r) acc += x[r * n + j];
    partials[blockIdx.x * n + j] = acc;
  }
}

__global__ void EmbeddingForwardKernel(const int32_t* __restrict__ tokens,
                                       const float* __restrict__ table, float* __restrict__ out,
                                       int64_t n, int64_t c, float scale) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n * c;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = i / c;
    out[i] = table[static_cast<int64_t>(tokens[row]) * c + (i - row * c)] * scale;
  }
}

// One block per token group: the positions of a token are summed in ascending order.
__global__ void EmbeddingBackwardKernel(const int32_t* __restrict__ order,
                                        const int32_t* __restrict__ seg_start,
                                        const int32_t* __restrict__ seg_token,
                                        const float* __restrict__ d_out, float* __restrict__ d_table,
                                        int64_t c, float scale) {
  const int seg = blockIdx.x;
  const int b = seg_start[seg], e = seg_start[seg + 1];
  float* row = d_table + static_cast<int64_t>(seg_token[seg]) * c;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
    float acc = row[j];
    for (int i = b; i < e; ++i) acc += d_out[static_cast<int64_t>(order[i]) * c + j] * scale;
    row[j] = acc;
  }
}

// One warp per row.
__global__ void RmsNormForwardKernel(const float* __restrict__ x, const float* __restrict__ w,
                                     float* __restrict__ out, float* __restrict__ rstd,
                                     int64_t rows, int64_t c, float eps) {
  const int64_t row = blockIdx.x * int64_t{blockDim.x / 32} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const float* xr = x + row * c;
  float ss = 0.f;
  for (int64_t j = lane; j < c; j += 32) ss += xr[j] * xr[j];
  ss = WarpSum(ss);
  const float s = 1.f / sqrtf(ss / static_cast<float>(c) + eps);
  if (lane == 0) rstd[row] = s;
  for (int64_t j = lane; j < c; j += 32) out[row * c + j] = xr[j] * s * w[j];
}

// Block = 8 warps over kRowsPerPartial rows; per-warp column accumulators in shared memory, summed
// in warp order into the block's partial row.
__global__ void RmsNormBackwardKernel(const float* __restrict__ x, const float* __restrict__ w,
                                      const float* __restrict__ rstd,
                                      const float* __restrict__ d_out, float* __restrict__ d_x,
                                      float* __restrict__ partials, int64_t rows, int64_t c) {
  extern __shared__ float acc[];  // [warps][c]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  float* my = acc + warp * c;
  for (int64_t j = lane; j < c; j += 32) my[j] = 0.f;
  const int64_t r0 = blockIdx.x * kRowsPerPartial;
  const int64_t r1 = min(rows, r0 + kRowsPerPartial);
  const float inv_c = 1.f / static_cast<float>(c);
  for (int64_t r = r0 + warp; r < r1; r += warps) {
    const float* xr = x + r * c;
    const float* dr = d_out + r * c;
    const float s = rstd[r];
    float dot = 0.f;
    for (int64_t j = lane; j < c; j += 32) {
      dot += dr[j] * w[j] * xr[j];
      my[j] += dr[j] * xr[j] * s;
    }
    dot = WarpSum(dot);
    const float coef = dot * s * s * s * inv_c;
    for (int64_t j = lane; j < c; j += 32) d_x[r * c + j] += dr[j] * w[j] * s - xr[j] * coef;
  }
  __syncthreads();
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
    float sum = 0.f;
    for (int k = 0; k < warps; ++k) sum += acc[k * c + j];
    partials[blockIdx.x * c + j] = sum;
  }
}

__global__ void CausalConvForwardKernel(const float* __restrict__ x, const float* __restrict__ w,
                                        float* __restrict__ out, int64_t bt, int64_t t, int64_t ch,
                                        int64_t width) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < bt * ch;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = i / ch, c = i - row * ch;
    const int64_t ti = row % t;
    float acc = 0.f;
    for (int64_t j = 0; j < width; ++j) {
      const int64_t back = width - 1 - j;  // source is `back` steps earlier in the same sequence
      if (ti >= back) acc += w[c * width + j] * x[(row - back) * ch + c];
    }
    out[i] = acc;
  }
}

// grid (PartialRows(bt), ceil(ch / blockDim)); a thread owns one channel over the block's rows:
// d_x of those rows directly, d_weight as a partial row.
__global__ void CausalConvBackwardKernel(const float* __restrict__ x, const float* __restrict__ w,
                                         const float* __restrict__ d_out, float* __restrict__ d_x,
                                         float* __restrict__ partials, int64_t bt, int64_t t,
                                         int64_t ch, int64_t width) {
  const int64_t c = blockIdx.y * int64_t{blockDim.x} + threadIdx.x;
  if (c >= ch) return;
  const int64_t r0 = blockIdx.x * kRowsPerPartial;
  const int64_t r1 = min(bt, r0 + kRowsPerPartial);
  float wc[kMaxConvWidth], acc[kMaxConvWidth];
#pragma unroll
  for (int j = 0; j < kMaxConvWidth; ++j) {
    wc[j] = j < width ? w[c * width + j] : 0.f;
    acc[j] = 0.f;
  }
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t ti = r % t;
    // As a source position: d_x[r] += sum_j w[j] * d_out[r + back(j)] within the sequence.
    float dx = 0.f;
    // As an output position: d_w[j] += x[r - back(j)] * d_out[r].
    const float g = d_out[r * ch + c];
#pragma unroll
    for (int j = 0; j < kMaxConvWidth; ++j) {
      if (j >= width) break;
      const int64_t back = width - 1 - j;
      if (ti + back < t) dx += wc[j] * d_out[(r + back) * ch + c];
      if (ti >= back) acc[j] += x[(r - back) * ch + c] * g;
    }
    d_x[r * ch + c] += dx;
  }
#pragma unroll
  for (int j = 0; j < kMaxConvWidth; ++j) {
    if (j < width) partials[blockIdx.x * ch * width + c * width + j] = acc[j];
  }
}

// One warp per group.
__global__ void SiluL2NormForwardKernel(const float* __restrict__ x, float* __restrict__ y,
                                        int64_t groups, int64_t d) {
  const int64_t g = blockIdx.x * int64_t{blockDim.x / 32} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (g >= groups) return;
  const float* xg = x + g * d;
  float ss = 0.f;
  for (int64_t j = lane; j < d; j += 32) {
    const float s = xg[j] * Sigmoid(xg[j]);
    ss += s * s;
  }
  ss = WarpSum(ss);
  const float inv = 1.f / sqrtf(ss + kL2NormEps);
  for (int64_t j = lane; j < d; j += 32) y[g * d + j] = xg[j] * Sigmoid(xg[j]) * inv;
}

__global__ void SiluL2NormBackwardKernel(const float* __restrict__ x, const float* __restrict__ dy,
                                         float* __restrict__ dx, int64_t groups, int64_t d) {
  const int64_t g = blockIdx.x * int64_t{blockDim.x / 32} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (g >= groups) return;
  const float* xg = x + g * d;
  const float* dg = dy + g * d;
  float ss = 0.f, dot = 0.f;
  for (int64_t j = lane; j < d; j += 32) {
    const float s = xg[j] * Sigmoid(xg[j]);
    ss += s * s;
    dot += s * dg[j];
  }
  ss = WarpSum(ss);
  dot = WarpSum(dot);
  const float inv = 1.f / sqrtf(ss + kL2NormEps);
  for (int64_t j = lane; j < d; j += 32) {
    const float sig = Sigmoid(xg[j]);
    const float s = xg[j] * sig;
    const float ds = inv * (dg[j] - s * inv * inv * dot);
    dx[g * d + j] += ds * sig * (1.f + xg[j] * (1.f - sig));
  }
}

__global__ void GatesForwardKernel(const float* a_pre, const float* b_pre, float* beta,
                                   float* log_gamma, int64_t n, float cap) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float b = Sigmoid(b_pre[i]);
    beta[i] = b;
    log_gamma[i] = -Softplus(-a_pre[i]) + log1pf(-cap * b * b);
  }
}

__global__ void GatesBackwardKernel(const float* a_pre, const float* b_pre, const float* d_beta,
                                    const float* d_log_gamma, float* d_a_pre, float* d_b_pre,
                                    int64_t n, float cap) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float b = Sigmoid(b_pre[i]);
    d_a_pre[i] = d_log_gamma[i] * (1.f - Sigmoid(a_pre[i]));
    const float d_b = d_beta[i] + d_log_gamma[i] * (-2.f * cap * b / (1.f - cap * b * b));
    d_b_pre[i] = d_b * b * (1.f - b);
  }
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

__global__ void SwiGluForwardKernel(const float* __restrict__ gate, const float* __restrict__ up,
                                    float* __restrict__ h, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float g = gate[i];
    h[i] = g * Sigmoid(g) * up[i];
  }
}

__global__ void SwiGluBackwardKernel(const float* __restrict__ gate, const float* __restrict__ up,
                                     const float* __restrict__ d_h, float* __restrict__ d_gate,
                                     float* __restrict__ d_up, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float g = gate[i], dh = d_h[i];
    const float sig = Sigmoid(g);
    d_up[i] = dh * g * sig;
    d_gate[i] = dh * up[i] * sig * (1.f + g * (1.f - sig));
  }
}

__global__ void AddInPlaceKernel(float* out, const float* in, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] += in[i];
  }
}

__global__ void ScaleKernel(float* x, int64_t n, float factor) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    x[i] *= factor;
  }
}

__global__ void FillKernel(float* x, int64_t n, float value) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    x[i] = value;
  }
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

__device__ MaxSum RowMaxSum(const float* __restrict__ lr, int64_t v, float cap) {
  MaxSum ms{-INFINITY, 0.f};
  const float inv_cap = 1.f / cap;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
    const float z = cap * tanhf(lr[j] * inv_cap);
    if (z > ms.m) {
      ms.s = ms.s * expf(ms.m - z) + 1.f;
      ms.m = z;
    } else {
      ms.s += expf(z - ms.m);
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    MaxSum other{__shfl_xor_sync(0xffffffffu, ms.m, o), __shfl_xor_sync(0xffffffffu, ms.s, o)};
    ms = Combine(ms, other);
  }
  __shared__ MaxSum warp_ms[32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_ms[warp] = ms;
  __syncthreads();
  MaxSum total{-INFINITY, 0.f};
  for (int k = 0; k < static_cast<int>(blockDim.x / 32); ++k) total = Combine(total, warp_ms[k]);
  return total;  // identical on every thread (same order)
}

__global__ void SoftcapCeForwardKernel(const float* __restrict__ logits,
                                       const int32_t* __restrict__ targets,
                                       float* __restrict__ losses, int64_t v, int64_t ld,
                                       float cap, int32_t ignore_token) {
  const int64_t row = blockIdx.x;
  const int32_t target = targets[row];
  if (target == ignore_token) {
    if (threadIdx.x == 0) losses[row] = 0.f;
    return;
  }
  const float* lr = logits + row * ld;
  const MaxSum ms = RowMaxSum(lr, v, cap);
  if (threadIdx.x == 0) {
    const float z_t = cap * tanhf(lr[target] / cap);
    losses[row] = logf(ms.s) + ms.m - z_t;
  }
}

__global__ void SoftcapCeBackwardKernel(float* __restrict__ logits,
                                        const int32_t* __restrict__ targets, int64_t v, int64_t ld,
                                        float cap, int32_t ignore_token, float loss_scale) {
  const int64_t row = blockIdx.x;
  const int32_t target = targets[row];
  float* lr = logits + row * ld;
  if (target == ignore_token) {
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x) lr[j] = 0.f;
    return;
  }
  const MaxSum ms = RowMaxSum(lr, v, cap);
  const float inv_sum = 1.f / ms.s, inv_cap = 1.f / cap;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
    const float th = tanhf(lr[j] * inv_cap);
    const float p = expf(cap * th - ms.m) * inv_sum;
    const float dz = (p - (j == target ? 1.f : 0.f)) * loss_scale;
    lr[j] = dz * (1.f - th * th);
  }
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

__global__ void AdamWKernel(float* __restrict__ params, const float* __restrict__ grads,
                            float* __restrict__ m, float* __restrict__ v, int64_t n, float lr,
                            float beta1, float beta2, float eps, float weight_decay, float bc1,
                            float bc2) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float g = grads[i];
    const float mi = beta1 * m[i] + (1.f - beta1) * g;
    const float vi = beta2 * v[i] + (1.f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float m_hat = mi / bc1;
    const float v_hat = vi / bc2;
    const float p = params[i];
    params[i] = p - lr * (m_hat / (sqrtf(v_hat) + eps) + weight_decay * p);
  }
}

}  // namespace

// ------------------------------------------------------------------------------------------------
cudaError_t LaunchBiasForward(float* out, const float* bias, int64_t rows, int64_t n,
                              cudaStream_t s) {
  if (rows * n == 0) return cudaSuccess;
  BiasForwardKernel<<<ElementwiseBlocks(rows * n), kThreads, 0, s>>>(out, bias, rows * n, n);
  return cudaGetLastError();
}

cudaError_t LaunchBiasBackward(const float* d_out, float* d_bias, float* partials, int64_t rows,
                               int64_t n, cudaStream_t s) {
  if (rows * n == 0) return cudaSuccess;
  const int64_t blocks = PartialRows(rows);
  ColumnPartialsKernel<<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(d_out, rows, n, partials);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  return ReducePartials(partials, blocks, n, d_bias, s);
}

cudaError_t LaunchEmbeddingForward(const int32_t* tokens, const float* table, float* out,
                                   int64_t n, int64_t c, float scale, cudaStream_t s) {
  if (n * c == 0) return cudaSuccess;
  EmbeddingForwardKernel<<<ElementwiseBlocks(n * c), kThreads, 0, s>>>(tokens, table, out, n, c,
                                                                       scale);
  return cudaGetLastError();
}

cudaError_t LaunchEmbeddingBackward(const int32_t* order, const int32_t* seg_start,
                                    const int32_t* seg_token, int64_t num_segments,
                                    const float* d_out, float* d_table, int64_t c, float scale,
                                    cudaStream_t s) {
  if (num_segments == 0 || c == 0) return cudaSuccess;
  const int threads = static_cast<int>(std::min<int64_t>(kThreads, ((c + 31) / 32) * 32));
  EmbeddingBackwardKernel<<<static_cast<unsigned>(num_segments), threads, 0, s>>>(
      order, seg_start, seg_token, d_out, d_table, c, scale);
  return cudaGetLastError();
}

int64_t MaxRmsNormWidth() { return 6144; }  // 8 warps x 6144 floats = 192 KiB of shared memory

cudaError_t LaunchRmsNormForward(const float* x, const float* weight, float* out, float* rstd,
                                 int64_t rows, int64_t c, float eps, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  const int64_t rows_per_block = kThreads / 32;
  RmsNormForwardKernel<<<static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block),
                         kThreads, 0, s>>>(x, weight, out, rstd, rows, c, eps);
  return cudaGetLastError();
}

cudaError_t LaunchRmsNormBackward(const float* x, const float* weight, const float* rstd,
                                  const float* d_out, float* d_x, float* d_weight, float* partials,
                                  int64_t rows, int64_t c, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if (c > MaxRmsNormWidth()) return cudaErrorInvalidValue;
  const size_t smem = sizeof(float) * (kThreads / 32) * c;
  if (smem > 48 * 1024) {
    if (cudaError_t e = cudaFuncSetAttribute(RmsNormBackwardKernel,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(smem));
        e != cudaSuccess) {
      return e;
    }
  }
  const int64_t blocks = PartialRows(rows);
  RmsNormBackwardKernel<<<static_cast<unsigned>(blocks), kThreads, smem, s>>>(
      x, weight, rstd, d_out, d_x, partials, rows, c);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  return ReducePartials(partials, blocks, c, d_weight, s);
}

cudaError_t LaunchCausalConvForward(const float* x, const float* weight, float* out, int64_t b,
                                    int64_t t, int64_t ch, int64_t w, cudaStream_t s) {
  if (b * t * ch == 0) return cudaSuccess;
  CausalConvForwardKernel<<<ElementwiseBlocks(b * t * ch), kThreads, 0, s>>>(x, weight, out, b * t,
                                                                             t, ch, w);
  return cudaGetLastError();
}

cudaError_t LaunchCausalConvBackward(const float* x, const float* weight, const float* d_out,
                                     float* d_x, float* d_weight, float* partials, int64_t b,
                                     int64_t t, int64_t ch, int64_t w, cudaStream_t s) {
  if (b * t * ch == 0) return cudaSuccess;
  if (w < 1 || w > kMaxConvWidth) return cudaErrorInvalidValue;
  constexpr int kConvThreads = 128;
  const int64_t blocks = PartialRows(b * t);
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>((ch + kConvThreads - 1) / kConvThreads));
  CausalConvBackwardKernel<<<grid, kConvThreads, 0, s>>>(x, weight, d_out, d_x, partials, b * t, t,
                                                         ch, w);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  return ReducePartials(partials, blocks, ch * w, d_weight, s);
}

cudaError_t LaunchSiluL2NormForward(const float* x, float* y, int64_t groups, int64_t d,
                                    cudaStream_t s) {
  if (groups == 0) return cudaSuccess;
  const int64_t per_block = kThreads / 32;
  SiluL2NormForwardKernel<<<static_cast<unsigned>((groups + per_block - 1) / per_block), kThreads, 0,
                            s>>>(x, y, groups, d);
  return cudaGetLastError();
}

cudaError_t LaunchSiluL2NormBackward(const float* x, const float* d_y, float* d_x, int64_t groups,
                                     int64_t d, cudaStream_t s) {
  if (groups == 0) return cudaSuccess;
  const int64_t per_block = kThreads / 32;
  SiluL2NormBackwardKernel<<<static_cast<unsigned>((groups + per_block - 1) / per_block), kThreads,
                             0, s>>>(x, d_y, d_x, groups, d);
  return cudaGetLastError();
}

cudaError_t LaunchGatesForward(const float* a_pre, const float* b_pre, float* beta,
                               float* log_gamma, int64_t n, float cap, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  GatesForwardKernel<<<ElementwiseBlocks(n), kThreads, 0, s>>>(a_pre, b_pre, beta, log_gamma, n,
                                                               cap);
  return cudaGetLastError();
}

cudaError_t LaunchGatesBackward(const float* a_pre, const float* b_pre, const float* d_beta,
                                const float* d_log_gamma, float* d_a_pre, float* d_b_pre,
                                int64_t n, float cap, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  GatesBackwardKernel<<<ElementwiseBlocks(n), kThreads, 0, s>>>(a_pre, b_pre, d_beta, d_log_gamma,
                                                                d_a_pre, d_b_pre, n, cap);
  return cudaGetLastError();
}

cudaError_t LaunchLambdaForward(const float* p, float* lambda, int64_t n, float floor,
                                cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  LambdaForwardKernel<<<ElementwiseBlocks(n), kThreads, 0, s>>>(p, lambda, n, floor);
  return cudaGetLastError();
}

cudaError_t LaunchLambdaBackward(const float* p, const float* d_lambda, float* d_p, int64_t n,
                                 cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  LambdaBackwardKernel<<<ElementwiseBlocks(n), kThreads, 0, s>>>(p, d_lambda, d_p, n);
  return cudaGetLastError();
}

cudaError_t LaunchSwiGluForward(const float* gate, const float* up, float* h, int64_t n,
                                cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  SwiGluForwardKernel<<<ElementwiseBlocks(n), kThreads, 0, s>>>(gate, up, h, n);
  return cudaGetLastError();
}

cudaError_t LaunchSwiGluBackward(const float* gate, const float* up, const float* d_h,
                                 float* d_gate, float* d_up, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  SwiGluBackwardKernel<<<ElementwiseBlocks(n), kThreads, 0, s>>>(gate, up, d_h, d_gate, d_up, n);
  return cudaGetLastError();
}

cudaError_t LaunchAddInPlace(float* out, const float* in, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  AddInPlaceKernel<<<ElementwiseBlocks(n), kThreads, 0, s>>>(out, in, n);
  return cudaGetLastError();
}

cudaError_t LaunchScale(float* x, int64_t n, float factor, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  ScaleKernel<<<ElementwiseBlocks(n), kThreads, 0, s>>>(x, n, factor);
  return cudaGetLastError();
}

cudaError_t LaunchFill(float* x, int64_t n, float value, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  FillKernel<<<ElementwiseBlocks(n), kThreads, 0, s>>>(x, n, value);
  return cudaGetLastError();
}

cudaError_t LaunchSoftcapCrossEntropyForward(const float* logits, const int32_t* targets,
                                             float* losses, int64_t rows, int64_t v, int64_t ld,
                                             float cap, int32_t ignore_token, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if (ld < v) return cudaErrorInvalidValue;
  SoftcapCeForwardKernel<<<static_cast<unsigned>(rows), 512, 0, s>>>(logits, targets, losses, v, ld,
                                                                     cap, ignore_token);
  return cudaGetLastError();
}

cudaError_t LaunchSoftcapCrossEntropyBackward(float* logits, const int32_t* targets, int64_t rows,
                                              int64_t v, int64_t ld, float cap,
                                              int32_t ignore_token, float loss_scale,
                                              cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if (ld < v) return cudaErrorInvalidValue;
  SoftcapCeBackwardKernel<<<static_cast<unsigned>(rows), 512, 0, s>>>(logits, targets, v, ld, cap,
                                                                      ignore_token, loss_scale);
  return cudaGetLastError();
}

cudaError_t LaunchSumOfSquares(const float* x, int64_t n, double* partials, double* out,
                               cudaStream_t s) {
  SumPartialsKernel<true><<<kSumBlocks, kThreads, 0, s>>>(x, n, partials);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  SumFinalKernel<<<1, kSumBlocks, 0, s>>>(partials, out);
  return cudaGetLastError();
}

cudaError_t LaunchSum(const float* x, int64_t n, double* partials, double* out, cudaStream_t s) {
  SumPartialsKernel<false><<<kSumBlocks, kThreads, 0, s>>>(x, n, partials);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  SumFinalKernel<<<1, kSumBlocks, 0, s>>>(partials, out);
  return cudaGetLastError();
}

cudaError_t LaunchAdamW(float* params, const float* grads, float* m, float* v, int64_t n, float lr,
                        float beta1, float beta2, float eps, float weight_decay,
                        float bias_correction1, float bias_correction2, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  AdamWKernel<<<ElementwiseBlocks(n), kThreads, 0, s>>>(params, grads, m, v, n, lr, beta1, beta2,
                                                        eps, weight_decay, bias_correction1,
                                                        bias_correction2);
  return cudaGetLastError();
}

}  // namespace mesa::model::cuda
