// The RG-LRU's CUDA kernels (rglru_kernels.h). One thread per (row, chunk, channel) in the chunk
// phases, one per (row, channel) in the carries: consecutive threads take consecutive channels,
// so every load and store is coalesced along the channel axis.
#include "kernels/rglru/cuda/rglru_kernels.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/rglru/rglru_gates.h"

namespace mesa::kernels::rglru::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int C = kCudaChunk;

__device__ __forceinline__ float Load(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float Load(const __nv_bfloat16* p, int64_t i) {
  return __bfloat162float(p[i]);
}
__device__ __forceinline__ void Store(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void Store(__nv_bfloat16* p, int64_t i, float v) {
  p[i] = __float2bfloat16(v);
}

struct Problem {
  int64_t B, T, D, chunks;
  const float* p;
  const float* h0;
  const float* started;
  const int32_t* doc_start;
};

__device__ __forceinline__ bool Restart(const Problem& pr, int64_t b, int64_t t) {
  if (pr.doc_start != nullptr && pr.doc_start[b * pr.T + t] == t) return true;
  return t == 0 && (pr.started == nullptr || pr.started[b] == 0.f);
}

// Phase 1 of the forward: each chunk scans from zero; its end value and total log decay.
template <typename T>
__global__ void ChunkSummaryKernel(Problem pr, const T* __restrict__ u, const T* __restrict__ rho,
                                   const T* __restrict__ iota, float* __restrict__ end_state,
                                   float* __restrict__ end_decay) {
  const int64_t d = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  const int64_t c = blockIdx.y, b = blockIdx.z;
  if (d >= pr.D) return;
  const float sp = RgSoftplus(pr.p[d]);
  const int64_t t0 = c * C, t1 = min(pr.T, t0 + C);
  float h = 0.f, decay = 0.f;
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t at = (b * pr.T + t) * pr.D + d;
    const RgLruGates<float> g =
        ComputeRgLruGates(Load(rho, at), Load(iota, at), sp, Restart(pr, b, t));
    h = g.a * h + g.m * g.i * Load(u, at);
    decay += g.log_a;
  }
  const int64_t s = (b * pr.chunks + c) * pr.D + d;
  end_state[s] = h;
  end_decay[s] = decay;
}

// Phase 2 of the forward: the state carried into every chunk, carried [B, chunks + 1, D].
__global__ void CarryKernel(Problem pr, const float* __restrict__ end_state,
                            const float* __restrict__ end_decay, float* __restrict__ carried,
                            float* h_final) {
  const int64_t d = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  const int64_t b = blockIdx.y;
  if (d >= pr.D) return;
  float h = pr.h0 != nullptr ? pr.h0[b * pr.D + d] : 0.f;
  float* row = carried + b * (pr.chunks + 1) * pr.D;
  row[d] = h;
  for (int64_t c = 0; c < pr.chunks; ++c) {
    const int64_t s = (b * pr.chunks + c) * pr.D + d;
    h = __expf(end_decay[s]) * h + end_state[s];
    row[(c + 1) * pr.D + d] = h;
  }
  if (h_final != nullptr) h_final[b * pr.D + d] = h;  // after every read of h0 by this thread
}

// After the rescan (which still reads the flags when started_out aliases them): rows have started.
__global__ void MarkStartedKernel(int64_t rows, float* started_out) {
  const int64_t b = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  if (b < rows) started_out[b] = 1.f;
}

// Phase 3 of the forward: each chunk re-scans from its carried-in state and writes h.
template <typename T>
__global__ void RescanKernel(Problem pr, const T* __restrict__ u, const T* __restrict__ rho,
                             const T* __restrict__ iota, const float* __restrict__ carried,
                             T* __restrict__ h_out) {
  const int64_t d = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  const int64_t c = blockIdx.y, b = blockIdx.z;
  if (d >= pr.D) return;
  const float sp = RgSoftplus(pr.p[d]);
  const int64_t t0 = c * C, t1 = min(pr.T, t0 + C);
  float h = carried[(b * (pr.chunks + 1) + c) * pr.D + d];
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t at = (b * pr.T + t) * pr.D + d;
    const RgLruGates<float> g =
        ComputeRgLruGates(Load(rho, at), Load(iota, at), sp, Restart(pr, b, t));
    h = g.a * h + g.m * g.i * Load(u, at);
    Store(h_out, at, h);
  }
}

// Phase 1 of the backward: each chunk scans δ backwards from zero; a_first δ̂_first.
template <typename T>
__global__ void GradSummaryKernel(Problem pr, const T* __restrict__ rho, const T* __restrict__ iota,
                                  const T* __restrict__ dh, float* __restrict__ start_grad,
                                  float* __restrict__ total_decay) {
  const int64_t d = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  const int64_t c = blockIdx.y, b = blockIdx.z;
  if (d >= pr.D) return;
  const float sp = RgSoftplus(pr.p[d]);
  const int64_t t0 = c * C, t1 = min(pr.T, t0 + C);
  float delta = 0.f, decay = 0.f;
  for (int64_t t = t1 - 1; t >= t0; --t) {
    const int64_t at = (b * pr.T + t) * pr.D + d;
    const RgLruGates<float> g =
        ComputeRgLruGates(Load(rho, at), Load(iota, at), sp, Restart(pr, b, t));
    delta = g.a * (Load(dh, at) + delta);
    decay += g.log_a;
  }
  const int64_t s = (b * pr.chunks + c) * pr.D + d;
  start_grad[s] = delta;
  total_decay[s] = decay;
}

// Phase 2 of the backward: the gradient entering every chunk from its right, incoming
// [B, chunks + 1, D] (entry `chunks` is dh_final, entry 0 is dh0).
__global__ void GradCarryKernel(Problem pr, const float* __restrict__ start_grad,
                                const float* __restrict__ total_decay, const float* dh_final,
                                float* __restrict__ incoming, float* dh0) {
  const int64_t d = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  const int64_t b = blockIdx.y;
  if (d >= pr.D) return;
  float* row = incoming + b * (pr.chunks + 1) * pr.D;
  float flow = dh_final != nullptr ? dh_final[b * pr.D + d] : 0.f;
  row[pr.chunks * pr.D + d] = flow;
  for (int64_t c = pr.chunks - 1; c >= 0; --c) {
    const int64_t s = (b * pr.chunks + c) * pr.D + d;
    flow = __expf(total_decay[s]) * flow + start_grad[s];
    row[c * pr.D + d] = flow;
  }
  if (dh0 != nullptr) dh0[b * pr.D + d] = flow;
}

// Phase 3 of the backward: per chunk, h forward from the carried state (kept in registers), then
// δh backward from the incoming gradient; the gradients, and dp's partial sum per (row, chunk).
template <typename T>
__global__ void GradKernel(Problem pr, const T* __restrict__ u, const T* __restrict__ rho,
                           const T* __restrict__ iota, const T* __restrict__ dh,
                           const float* __restrict__ carried, const float* __restrict__ incoming,
                           T* __restrict__ du, T* __restrict__ drho, T* __restrict__ diota,
                           float* __restrict__ dp_partials) {
  const int64_t d = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  const int64_t c = blockIdx.y, b = blockIdx.z;
  if (d >= pr.D) return;
  const float sp = RgSoftplus(pr.p[d]), sig_p = RgSigmoid(pr.p[d]);
  const int64_t t0 = c * C;
  const int n = static_cast<int>(min(pr.T - t0, int64_t{C}));
  float h_prev[C];  // h before each token of the chunk
  float h = carried[(b * (pr.chunks + 1) + c) * pr.D + d];
#pragma unroll
  for (int r = 0; r < C; ++r) {
    if (r < n) {
      const int64_t at = (b * pr.T + t0 + r) * pr.D + d;
      h_prev[r] = h;
      const RgLruGates<float> g =
          ComputeRgLruGates(Load(rho, at), Load(iota, at), sp, Restart(pr, b, t0 + r));
      h = g.a * h + g.m * g.i * Load(u, at);
    }
  }
  float flow = incoming[(b * (pr.chunks + 1) + c + 1) * pr.D + d];
  float dp = 0.f;
#pragma unroll
  for (int r = C - 1; r >= 0; --r) {
    if (r < n) {
      const int64_t at = (b * pr.T + t0 + r) * pr.D + d;
      const bool restart = Restart(pr, b, t0 + r);
      const float uu = Load(u, at);
      const RgLruGates<float> g = ComputeRgLruGates(Load(rho, at), Load(iota, at), sp, restart);
      const float dh_t = Load(dh, at) + flow;
      const RgLruTokenGrads<float> tg =
          RgLruTokenBackward(g, uu, h_prev[r], dh_t, sp, sig_p, restart);
      Store(du, at, tg.d_u);
      Store(drho, at, tg.d_rho);
      Store(diota, at, tg.d_iota);
      dp += tg.d_p;
      flow = g.a * dh_t;
    }
  }
  dp_partials[(b * pr.chunks + c) * pr.D + d] = dp;
}

// dp[d] += Σ over (row, chunk) in order.
__global__ void DpReduceKernel(int64_t parts, int64_t D, const float* __restrict__ dp_partials,
                               float* __restrict__ dp) {
  const int64_t d = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  if (d >= D) return;
  float sum = 0.f;
  for (int64_t k = 0; k < parts; ++k) sum += dp_partials[k * D + d];
  dp[d] += sum;
}

Problem ToProblem(const DeviceProblem& p) {
  return {p.batch, p.seq_len, p.width, p.Chunks(), p.p, p.h0, p.started, p.doc_start};
}

// The workspace: two summaries [B, chunks, D] and the carried states [B, chunks + 1, D].
struct Workspace {
  float *summary_a, *summary_b, *carried;
};
Workspace Carve(const DeviceProblem& p, void* base) {
  const int64_t s = p.batch * p.Chunks() * p.width;
  float* f = static_cast<float*>(base);
  return {f, f + s, f + 2 * s};
}

template <typename T>
cudaError_t Forward(const DeviceProblem& p, T* h, float* h_final, float* started_out, Workspace w,
                    cudaStream_t s) {
  const Problem pr = ToProblem(p);
  const dim3 chunk_grid((p.width + kThreads - 1) / kThreads, pr.chunks, p.batch);
  const dim3 row_grid((p.width + kThreads - 1) / kThreads, p.batch);
  const T* u = static_cast<const T*>(p.u);
  const T* rho = static_cast<const T*>(p.rho);
  const T* iota = static_cast<const T*>(p.iota);
  ChunkSummaryKernel<T><<<chunk_grid, kThreads, 0, s>>>(pr, u, rho, iota, w.summary_a, w.summary_b);
  CarryKernel<<<row_grid, kThreads, 0, s>>>(pr, w.summary_a, w.summary_b, w.carried, h_final);
  RescanKernel<T><<<chunk_grid, kThreads, 0, s>>>(pr, u, rho, iota, w.carried, h);
  if (started_out != nullptr) {
    MarkStartedKernel<<<(p.batch + kThreads - 1) / kThreads, kThreads, 0, s>>>(p.batch,
                                                                               started_out);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t Backward(const DeviceProblem& p, const T* dh, const float* dh_final, T* du, T* drho,
                     T* diota, float* dp, float* dh0, Workspace w, bool carried_valid,
                     float* dp_partials, cudaStream_t s) {
  const Problem pr = ToProblem(p);
  const dim3 chunk_grid((p.width + kThreads - 1) / kThreads, pr.chunks, p.batch);
  const dim3 row_grid((p.width + kThreads - 1) / kThreads, p.batch);
  const T* u = static_cast<const T*>(p.u);
  const T* rho = static_cast<const T*>(p.rho);
  const T* iota = static_cast<const T*>(p.iota);
  if (!carried_valid) {
    ChunkSummaryKernel<T>
        <<<chunk_grid, kThreads, 0, s>>>(pr, u, rho, iota, w.summary_a, w.summary_b);
    CarryKernel<<<row_grid, kThreads, 0, s>>>(pr, w.summary_a, w.summary_b, w.carried, nullptr);
  }
  // The forward's summaries are free again: the gradient's summaries reuse them.
  float* start_grad = w.summary_a;
  float* total_decay = w.summary_b;
  GradSummaryKernel<T><<<chunk_grid, kThreads, 0, s>>>(pr, rho, iota, dh, start_grad, total_decay);
  float* incoming = dp_partials + p.batch * pr.chunks * p.width;
  GradCarryKernel<<<row_grid, kThreads, 0, s>>>(pr, start_grad, total_decay, dh_final, incoming,
                                                dh0);
  GradKernel<T><<<chunk_grid, kThreads, 0, s>>>(pr, u, rho, iota, dh, w.carried, incoming, du, drho,
                                                diota, dp_partials);
  DpReduceKernel<<<(p.width + kThreads - 1) / kThreads, kThreads, 0, s>>>(p.batch * pr.chunks,
                                                                          p.width, dp_partials, dp);
  return cudaGetLastError();
}

}  // namespace

size_t WorkspaceBytes(const DeviceProblem& p) {
  return sizeof(float) * static_cast<size_t>(p.batch * p.width * (3 * p.Chunks() + 1));
}

size_t DpPartialBytes(const DeviceProblem& p) {
  // The dp partials [B, chunks, D], then the incoming gradients [B, chunks + 1, D].
  return sizeof(float) * static_cast<size_t>(p.batch * p.width * (2 * p.Chunks() + 1));
}

int RgLruForwardDevice(const DeviceProblem& p, void* h, float* h_final, float* started_out,
                       void* workspace, void* stream) {
  const Workspace w = Carve(p, workspace);
  auto s = static_cast<cudaStream_t>(stream);
  return p.bf16 ? Forward(p, static_cast<__nv_bfloat16*>(h), h_final, started_out, w, s)
                : Forward(p, static_cast<float*>(h), h_final, started_out, w, s);
}

int RgLruBackwardDevice(const DeviceProblem& p, const void* dh, const float* dh_final, void* du,
                        void* drho, void* diota, float* dp, float* dh0, void* workspace,
                        bool carried_valid, float* dp_partials, void* stream) {
  const Workspace w = Carve(p, workspace);
  auto s = static_cast<cudaStream_t>(stream);
  using B16 = __nv_bfloat16;
  return p.bf16 ? Backward(p, static_cast<const B16*>(dh), dh_final, static_cast<B16*>(du),
                           static_cast<B16*>(drho), static_cast<B16*>(diota), dp, dh0, w,
                           carried_valid, dp_partials, s)
                : Backward(p, static_cast<const float*>(dh), dh_final, static_cast<float*>(du),
                           static_cast<float*>(drho), static_cast<float*>(diota), dp, dh0, w,
                           carried_valid, dp_partials, s);
}

}  // namespace mesa::kernels::rglru::cuda
