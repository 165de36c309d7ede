// Mamba-2's SSD on the GPU (ssd_kernels.h): pack per head, the SSD's gates, the gated scan with
// the plain readout (y = S C + D x, no stabiliser: m ≡ 0 because every log a ≤ 0), then the
// gradients back to the SSD's own tensors.
#include "kernels/ssd/cuda/ssd_kernels.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/common/cuda/gated_scan.cuh"
#include "kernels/common/cuda/gated_scan.h"

namespace mesa::kernels::ssd::cuda {
namespace {

namespace gs = ::mesa::kernels::cuda::gated_scan;

constexpr int kThreads = 256;

// The problem in the scan's terms (q = C, k = B, v = x, each packed per head) and the SSD's own
// pieces of the workspace after the scan's.
struct Layout {
  gs::Problem scan;
  gs::Buffers buf;
  void *q, *k, *v, *dq, *dk, *dv;  // [B,T,H,N], [B,T,H,N], [B,T,H,P] (activation type)
  float *zeros_n, *zeros_m;        // [B,H,N], [B,H]: n'0, m0 and ∂n' of the scan (all zero)
  float* partials;                 // [B,H,3]: Σ dt ∂log a, Σ ∂dt̃, Σ dy·x per row and head
  size_t bytes;
};

size_t Align(size_t x) { return (x + 255) & ~size_t(255); }

Layout MakeLayout(const DeviceProblem& p, void* workspace) {
  Layout l{};
  const int64_t bth = p.batch * p.seq_len * p.heads, bh = p.batch * p.heads;
  const size_t elem = p.bf16 ? 2 : 4;
  l.scan = {.batch = p.batch,
            .seq_len = p.seq_len,
            .heads = p.heads,
            .key_dim = p.state_dim,
            .value_dim = p.head_dim,
            .bf16 = p.bf16,
            .readout = gs::Readout::kPlain,
            .skip = p.d,
            .c0 = p.s0,
            .doc_start = p.doc_start,
            .restart_at_row_start = p.restart_at_row_start};
  char* base = static_cast<char*>(workspace);
  size_t off = Align(gs::WorkspaceBytes(l.scan));
  auto take = [&](size_t bytes) {
    char* at = base == nullptr ? nullptr : base + off;
    off += Align(bytes);
    return static_cast<void*>(at);
  };
  l.q = take(bth * p.state_dim * elem);
  l.k = take(bth * p.state_dim * elem);
  l.v = take(bth * p.head_dim * elem);
  l.dq = take(bth * p.state_dim * elem);
  l.dk = take(bth * p.state_dim * elem);
  l.dv = take(bth * p.head_dim * elem);
  l.zeros_n = static_cast<float*>(take(bh * p.state_dim * sizeof(float)));
  l.zeros_m = static_cast<float*>(take(bh * sizeof(float)));
  l.partials = static_cast<float*>(take(bh * 3 * sizeof(float)));
  l.bytes = off;
  l.scan.q = l.q;
  l.scan.k = l.k;
  l.scan.v = l.v;
  if (p.s0 != nullptr) {
    l.scan.n0 = l.zeros_n;
    l.scan.m0 = l.zeros_m;
  }
  if (base != nullptr) l.buf = gs::Carve(l.scan, workspace);
  return l;
}

// q[bt,h] = C[bt, g(h)], k[bt,h] = B[bt, g(h)], v[bt,h] = x[bt,h]: a block per (bt, h) row, its
// threads along the row (no divisions per element).
template <typename T>
__global__ void PackKernel(DeviceProblem p, Layout l) {
  const int64_t bth = blockIdx.x, h = bth % p.heads, bt = bth / p.heads;
  const int N = int(p.state_dim), P = int(p.head_dim);
  const int64_t g = h / (p.heads / p.groups);
  const T* c = static_cast<const T*>(p.c_ptr) + bt * p.bc_stride + g * N;
  const T* b = static_cast<const T*>(p.b_ptr) + bt * p.bc_stride + g * N;
  const T* x = static_cast<const T*>(p.x) + bt * p.x_stride + h * P;
  for (int e = threadIdx.x; e < N; e += blockDim.x) {
    static_cast<T*>(l.q)[bth * N + e] = c[e];
    static_cast<T*>(l.k)[bth * N + e] = b[e];
  }
  for (int e = threadIdx.x; e < P; e += blockDim.x) static_cast<T*>(l.v)[bth * P + e] = x[e];
}

// One thread per (row, head, chunk): lw = log dt, Σ log a = Σ dt A over the chunk (restarting
// after a document start), no stabiliser (ml = 0).
template <typename T>
__global__ void GatesKernel(DeviceProblem p, gs::Buffers buf, int chunks) {
  const int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (idx >= p.batch * p.heads * chunks) return;
  const int c = idx % chunks;
  const int64_t bh = idx / chunks, h = bh % p.heads, b = bh / p.heads;
  const int T_ = int(p.seq_len), t0 = c * gs::kChunk, n = min(T_ - t0, gs::kChunk);
  const float a = -expf(p.a_log[h]), bias = p.dt_bias[h];
  float cum = 0.f;
  int last = -1;
  for (int r = 0; r < n; ++r) {
    const int t = t0 + r;
    const int64_t bt = b * T_ + t, g = bh * T_ + t;
    const float dt = gs::Softplus(gs::ToF(static_cast<const T*>(p.dt)[bt * p.heads + h]) + bias);
    if (gs::Restarts(p.doc_start, p.restart_at_row_start, T_, int(b), t)) {
      last = r;
      cum = 0.f;
    } else {
      cum += dt * a;
    }
    buf.lw[g] = dt > 0.f ? logf(dt) : -INFINITY;
    buf.bc[g] = cum;
    buf.ml[g] = 0.f;
    if (h == 0) buf.lr[bt] = last;
  }
  buf.bend[idx] = last >= 0 ? -INFINITY : cum;
  buf.mlend[idx] = 0.f;
}

// Per (row, head): ∂dt̃ = (∂lw / dt + A ∂log a) σ(dt̃ + bias) per token, and the row's sums for
// A_log, dt_bias and D (a fixed-order tree over the threads).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    FinishGatesKernel(DeviceProblem p, Layout l, const void* dy, void* ddt_out) {
  __shared__ float red[3][kThreads];
  const int64_t bh = blockIdx.x, h = bh % p.heads, b = bh / p.heads;
  const float a = -expf(p.a_log[h]), bias = p.dt_bias[h];
  float sum_a = 0.f, sum_bias = 0.f, sum_d = 0.f;
  for (int64_t t = threadIdx.x; t < p.seq_len; t += kThreads) {
    const int64_t bt = b * p.seq_len + t, tok = bt * p.heads + h, g = bh * p.seq_len + t;
    const float u = gs::ToF(static_cast<const T*>(p.dt)[tok]) + bias, dt = gs::Softplus(u);
    const float dlf = l.buf.dlf[g];
    const float ddt = (dt > 0.f ? l.buf.dig[g] / dt : 0.f) + a * dlf;
    const float du = ddt * gs::Sigmoid(u);
    static_cast<T*>(ddt_out)[tok] = gs::FromF<T>(du);
    sum_a += dt * dlf;
    sum_bias += du;
    const T* e = static_cast<const T*>(dy) + tok * p.head_dim;
    const T* x = static_cast<const T*>(p.x) + bt * p.x_stride + h * p.head_dim;
    for (int64_t j = 0; j < p.head_dim; ++j) sum_d += gs::ToF(e[j]) * gs::ToF(x[j]);
  }
  red[0][threadIdx.x] = sum_a;
  red[1][threadIdx.x] = sum_bias;
  red[2][threadIdx.x] = sum_d;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      for (int k = 0; k < 3; ++k) red[k][threadIdx.x] += red[k][threadIdx.x + s];
    }
    __syncthreads();
  }
  if (threadIdx.x < 3) l.partials[bh * 3 + threadIdx.x] = red[threadIdx.x][0];
}

// dx = ∂v + D dy (x's layout), a block per (bt, h) row; dB, dC = Σ over the group's heads of ∂k,
// ∂q (their layout), a block per (bt, g) row.
template <typename T>
__global__ void UnpackXKernel(DeviceProblem p, Layout l, const void* dy, void* dx) {
  const int64_t bth = blockIdx.x, h = bth % p.heads, bt = bth / p.heads;
  const int P = int(p.head_dim);
  const T* dv = static_cast<const T*>(l.dv) + bth * P;
  const T* e = static_cast<const T*>(dy) + bth * P;
  T* out = static_cast<T*>(dx) + bt * p.x_stride + h * P;
  for (int j = threadIdx.x; j < P; j += blockDim.x) {
    out[j] = gs::FromF<T>(gs::ToF(dv[j]) + p.d[h] * gs::ToF(e[j]));
  }
}

template <typename T>
__global__ void UnpackBcKernel(DeviceProblem p, Layout l, void* db, void* dc) {
  const int64_t btg = blockIdx.x, g = btg % p.groups, bt = btg / p.groups;
  const int N = int(p.state_dim);
  const int64_t hpg = p.heads / p.groups;
  const T* dk = static_cast<const T*>(l.dk);
  const T* dq = static_cast<const T*>(l.dq);
  for (int n = threadIdx.x; n < N; n += blockDim.x) {
    float sb = 0.f, sc = 0.f;
    for (int64_t h = g * hpg; h < (g + 1) * hpg; ++h) {
      sb += gs::ToF(dk[(bt * p.heads + h) * N + n]);
      sc += gs::ToF(dq[(bt * p.heads + h) * N + n]);
    }
    static_cast<T*>(db)[bt * p.bc_stride + g * N + n] = gs::FromF<T>(sb);
    static_cast<T*>(dc)[bt * p.bc_stride + g * N + n] = gs::FromF<T>(sc);
  }
}

// The parameters' gradients: the rows' sums in order, accumulated.
__global__ void ReduceParamsKernel(DeviceProblem p, Layout l, float* da_log, float* ddt_bias,
                                   float* dd) {
  const int h = blockIdx.x * blockDim.x + threadIdx.x;
  if (h >= p.heads) return;
  float sa = 0.f, sb = 0.f, sd = 0.f;
  for (int64_t b = 0; b < p.batch; ++b) {
    const float* part = l.partials + (b * p.heads + h) * 3;
    sa += part[0];
    sb += part[1];
    sd += part[2];
  }
  da_log[h] += sa * -expf(p.a_log[h]);  // ∂A_log = ∂A · A
  ddt_bias[h] += sb;
  dd[h] += sd;
}

unsigned Blocks(int64_t n) {
  return unsigned(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535));
}

template <typename T>
int Prepare(const DeviceProblem& p, const Layout& l, bool gates, cudaStream_t s) {
  PackKernel<T><<<unsigned(p.batch * p.seq_len * p.heads), 128, 0, s>>>(p, l);
  if (p.s0 != nullptr) {
    cudaMemsetAsync(l.zeros_n, 0, p.batch * p.heads * p.state_dim * sizeof(float), s);
    cudaMemsetAsync(l.zeros_m, 0, p.batch * p.heads * sizeof(float), s);
  }
  if (gates) {
    const int chunks = int(l.scan.Chunks());
    GatesKernel<T><<<Blocks(p.batch * p.heads * chunks), kThreads, 0, s>>>(p, l.buf, chunks);
  }
  return int(cudaGetLastError());
}

template <typename T>
int ForwardT(const DeviceProblem& p, void* y, float* s_final, void* workspace, cudaStream_t s) {
  const Layout l = MakeLayout(p, workspace);
  if (int e = Prepare<T>(p, l, true, s); e != 0) return e;
  return gs::Forward(l.scan, l.buf, y, s_final, nullptr, nullptr, s);
}

template <typename T>
int BackwardT(const DeviceProblem& p, const void* dy, const float* ds_final, void* dx, void* ddt,
              void* db, void* dc, float* da_log, float* ddt_bias, float* dd, float* ds0,
              void* workspace, bool states_valid, cudaStream_t s) {
  const Layout l = MakeLayout(p, workspace);
  if (ds_final != nullptr) {  // the scan's ∂n'_final: zero
    cudaMemsetAsync(l.zeros_n, 0, p.batch * p.heads * p.state_dim * sizeof(float), s);
  }
  if (int e = Prepare<T>(p, l, !states_valid, s); e != 0) return e;
  if (int e = gs::Backward(l.scan, l.buf, dy, ds_final, ds_final != nullptr ? l.zeros_n : nullptr,
                           l.dq, l.dk, l.dv, ds0, nullptr, states_valid, s);
      e != 0) {
    return e;
  }
  FinishGatesKernel<T><<<unsigned(p.batch * p.heads), kThreads, 0, s>>>(p, l, dy, ddt);
  UnpackXKernel<T><<<unsigned(p.batch * p.seq_len * p.heads), 64, 0, s>>>(p, l, dy, dx);
  UnpackBcKernel<T><<<unsigned(p.batch * p.seq_len * p.groups), 128, 0, s>>>(p, l, db, dc);
  ReduceParamsKernel<<<unsigned((p.heads + 63) / 64), 64, 0, s>>>(p, l, da_log, ddt_bias, dd);
  return int(cudaGetLastError());
}

}  // namespace

bool Supported(const DeviceProblem& p) {
  if (p.groups < 1 || p.heads % p.groups != 0) return false;
  return gs::Supported(MakeLayout(p, nullptr).scan);
}

size_t WorkspaceBytes(const DeviceProblem& p) { return MakeLayout(p, nullptr).bytes; }

int SsdForwardDevice(const DeviceProblem& p, void* y, float* s_final, void* workspace,
                     void* stream) {
  if (!Supported(p)) return int(cudaErrorInvalidValue);
  auto s = static_cast<cudaStream_t>(stream);
  return p.bf16 ? ForwardT<__nv_bfloat16>(p, y, s_final, workspace, s)
                : ForwardT<float>(p, y, s_final, workspace, s);
}

int SsdBackwardDevice(const DeviceProblem& p, const void* dy, const float* ds_final, void* dx,
                      void* ddt, void* db, void* dc, float* da_log, float* ddt_bias, float* dd,
                      float* ds0, void* workspace, bool states_valid, void* stream) {
  if (!Supported(p)) return int(cudaErrorInvalidValue);
  auto s = static_cast<cudaStream_t>(stream);
  return p.bf16 ? BackwardT<__nv_bfloat16>(p, dy, ds_final, dx, ddt, db, dc, da_log, ddt_bias, dd,
                                           ds0, workspace, states_valid, s)
                : BackwardT<float>(p, dy, ds_final, dx, ddt, db, dc, da_log, ddt_bias, dd, ds0,
                                   workspace, states_valid, s);
}

}  // namespace mesa::kernels::ssd::cuda
