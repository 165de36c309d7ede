// The RG-LRU's streaming scan (rglru_scans.h): a scan that reads every input once when rows fill
// the GPU.
//
// A block owns one (row, tile of 16 channels, segment of steps) and walks its steps in order (the
// backward: in reverse). A step is kCudaChunk = 64 tokens: 16 runs of 4 tokens × 16 channels, one
// thread per (run, channel), so a warp's bf16 load covers two 32-byte rows (whole sectors). Each
// thread reduces its run to an affine map (A, X), the block publishes them in shared memory, and
// every thread folds the runs before it, in order, into the state carried across steps: the same
// association on every launch, so results do not depend on scheduling. With enough (row, tile)
// blocks to fill the GPU a row is one segment and the inputs are read once; otherwise (B = 1,
// long T) segments are summarised first and carried by one short sequential kernel.
#include "kernels/rglru/cuda/rglru_scans.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/common/cuda/kernel_problem.h"
#include "kernels/common/cuda/ordered_sum.cuh"
#include "kernels/rglru/cuda/rglru_device_math.cuh"
#include "kernels/rglru/rglru_gates.h"

namespace mesa::kernels::rglru::cuda::streaming {
namespace {

constexpr int kTileWidth = 16;                // channels per tile: a 32-byte bf16 row
constexpr int kRuns = 16;                     // runs per step
constexpr int kRunLen = 4;                    // tokens per run
constexpr int kThreads = kTileWidth * kRuns;  // 256
constexpr int kCarryThreads = 128;
static_assert(kRuns * kRunLen == kCudaChunk);

// Only the decay, for the backward's summaries.
__device__ __forceinline__ float FastDecay(float rho, float softplus_p, bool restart) {
  return __expf(restart ? float(kRgLruResetLogDecay)
                        : float(-kRgLruC) * FastSigmoid(rho) * softplus_p);
}

// ---- The problem as the kernels see it.

struct Problem {
  int64_t B, T, D, steps, tiles, segs, steps_per_seg;
  const float* p;
  const float* h0;
  const float* started;
  const int32_t* doc_start;
};

__device__ __forceinline__ bool Restart(const Problem& pr, int64_t b, int64_t t) {
  return RowRestarts(pr.doc_start, pr.started, pr.T, b, t);
}

// Where a thread works: its row, segment, channel and run.
struct Place {
  int64_t b, seg, d;
  int lane, run;  // lane: the channel's column in the shared tiles
  bool active;    // channel d exists
  int64_t step0, step1;
};

__device__ __forceinline__ Place Locate(const Problem& pr) {
  Place at;
  at.lane = threadIdx.x % kTileWidth;
  at.run = threadIdx.x / kTileWidth;
  at.b = blockIdx.z;
  at.seg = blockIdx.y;
  at.d = blockIdx.x * int64_t{kTileWidth} + at.lane;
  at.active = at.d < pr.D;
  at.step0 = at.seg * pr.steps_per_seg;
  at.step1 = min(pr.steps, at.step0 + pr.steps_per_seg);
  return at;
}

// carried [B, steps + 1, D]: the state entering each step (and, last, the final state).
__device__ __forceinline__ int64_t CarriedAt(const Problem& pr, int64_t b, int64_t step,
                                             int64_t d) {
  return (b * (pr.steps + 1) + step) * pr.D + d;
}
// Per-segment arrays [B, segs, D].
__device__ __forceinline__ int64_t SegAt(const Problem& pr, int64_t b, int64_t seg, int64_t d) {
  return (b * pr.segs + seg) * pr.D + d;
}

__device__ __forceinline__ float ToFloat(float v) { return v; }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ void StoreAs(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void StoreAs(__nv_bfloat16* p, int64_t i, float v) {
  p[i] = __float2bfloat16(v);
}

// One run's inputs for one step, as loaded (bf16 stays bf16 until used: a prefetched step holds
// half the registers), loaded a step ahead of their use.
template <typename T, int kInputs>
struct RunInputs {
  T v[kInputs][kRunLen];
  bool valid[kRunLen], restart[kRunLen];
};

template <typename T, int kInputs>
__device__ __forceinline__ void LoadRun(const Problem& pr, const Place& at, int64_t step,
                                        const T* const (&src)[kInputs], RunInputs<T, kInputs>& in) {
  const int64_t t0 = step * kCudaChunk + at.run * kRunLen;
  const int64_t base = (at.b * pr.T + t0) * pr.D + at.d;
#pragma unroll
  for (int k = 0; k < kRunLen; ++k) {
    const int64_t t = t0 + k;
    in.valid[k] = at.active && t < pr.T;
    in.restart[k] = in.valid[k] && Restart(pr, at.b, t);
#pragma unroll
    for (int n = 0; n < kInputs; ++n) in.v[n][k] = in.valid[k] ? src[n][base + k * pr.D] : T{};
  }
}

enum class Mode { kSummary, kFull };

// ---- Forward. kSummary: each segment from zero; its decay product and end state to seg_a/seg_x.
// kFull: from the carried-in state; h (when h_out), the step states to `carried`, and h_final.
template <typename T, Mode kMode>
__global__ void __launch_bounds__(kThreads)
    ForwardScanKernel(Problem pr, const T* __restrict__ u, const T* __restrict__ rho,
                      const T* __restrict__ iota, float* __restrict__ carried, float* seg_a,
                      float* seg_x, T* __restrict__ h_out, float* h_final) {
  __shared__ float run_a[kRuns][kTileWidth], run_x[kRuns][kTileWidth], carry[kTileWidth];
  const Place at = Locate(pr);
  const float sp = at.active ? RgSoftplus(pr.p[at.d]) : 0.f;
  const bool last_run = at.run == kRuns - 1;
  // The last run's threads own the state carried across steps (and the decay, for a summary).
  float state = 0.f, decay = 1.f;
  if (kMode == Mode::kFull && last_run && at.active) {
    if (pr.segs == 1) {  // h0 is read here and h_final written by the same threads
      if (pr.h0 != nullptr) state = pr.h0[at.b * pr.D + at.d];
    } else {
      state = carried[CarriedAt(pr, at.b, at.step0, at.d)];
    }
  }
  if (last_run) carry[at.lane] = state;
  __syncthreads();
  const T* const src[3] = {rho, iota, u};
  RunInputs<T, 3> next;
  if (at.step0 < at.step1) LoadRun(pr, at, at.step0, src, next);
  for (int64_t step = at.step0; step < at.step1; ++step) {
    const RunInputs<T, 3> in = next;
    if (step + 1 < at.step1) LoadRun(pr, at, step + 1, src, next);  // in flight during this step
    float a[kRunLen], x[kRunLen];
#pragma unroll
    for (int k = 0; k < kRunLen; ++k) {
      const Gates g = FastGates(ToFloat(in.v[0][k]), ToFloat(in.v[1][k]), sp, in.restart[k]);
      a[k] = in.valid[k] ? g.a : 1.f;
      x[k] = in.valid[k] ? g.m * g.i * ToFloat(in.v[2][k]) : 0.f;
    }
    float A = 1.f, X = 0.f;
#pragma unroll
    for (int k = 0; k < kRunLen; ++k) {
      X = a[k] * X + x[k];
      A *= a[k];
    }
    run_a[at.run][at.lane] = A;
    run_x[at.run][at.lane] = X;
    __syncthreads();
    float h = carry[at.lane];
    for (int r = 0; r < at.run; ++r) h = run_a[r][at.lane] * h + run_x[r][at.lane];
    if (kMode == Mode::kFull && at.run == 0 && at.active) {
      carried[CarriedAt(pr, at.b, step, at.d)] = h;
    }
    const int64_t base = (at.b * pr.T + step * kCudaChunk + at.run * kRunLen) * pr.D + at.d;
#pragma unroll
    for (int k = 0; k < kRunLen; ++k) {
      h = a[k] * h + x[k];
      if (kMode == Mode::kFull && h_out != nullptr && in.valid[k]) {
        StoreAs(h_out, base + k * pr.D, h);
      }
    }
    if (kMode == Mode::kSummary && last_run) {
      for (int r = 0; r < kRuns; ++r) decay *= run_a[r][at.lane];
    }
    __syncthreads();  // every read of run_a, run_x and carry of this step is done
    if (last_run) {
      state = h;
      carry[at.lane] = h;
    }
  }
  if (!last_run || !at.active) return;
  if (kMode == Mode::kSummary) {
    seg_a[SegAt(pr, at.b, at.seg, at.d)] = decay;
    seg_x[SegAt(pr, at.b, at.seg, at.d)] = state;
  } else if (at.seg == pr.segs - 1) {
    carried[CarriedAt(pr, at.b, pr.steps, at.d)] = state;
    if (h_final != nullptr) h_final[at.b * pr.D + at.d] = state;
  }
}

// The state entering every segment, from the segment summaries: carried at each segment's first
// step (segment 0's is h0).
__global__ void CarryKernel(Problem pr, const float* __restrict__ seg_a,
                            const float* __restrict__ seg_x, float* __restrict__ carried) {
  const int64_t d = blockIdx.x * int64_t{kCarryThreads} + threadIdx.x;
  const int64_t b = blockIdx.y;
  if (d >= pr.D) return;
  float h = pr.h0 != nullptr ? pr.h0[b * pr.D + d] : 0.f;
  carried[CarriedAt(pr, b, 0, d)] = h;
  for (int64_t s = 0; s + 1 < pr.segs; ++s) {
    h = seg_a[SegAt(pr, b, s, d)] * h + seg_x[SegAt(pr, b, s, d)];
    carried[CarriedAt(pr, b, (s + 1) * pr.steps_per_seg, d)] = h;
  }
}

// ---- Backward, in reverse over the steps. The flow f is the gradient reaching h_t from h_{t+1}:
// δh_t = dh_t + f, and the flow to h_{t−1} is a_t δh_t.
// kSummary: from zero flow; the segment's decay product and outgoing flow to seg_a/seg_x.
// kFull: from the incoming flow (dh_final, or flow_in of the segment); du, dρ, dι, the segment's
// dp partial, and dh0 (segment 0).
template <typename T, Mode kMode>
__global__ void __launch_bounds__(kThreads)
    BackwardScanKernel(Problem pr, const T* __restrict__ u, const T* __restrict__ rho,
                       const T* __restrict__ iota, const T* __restrict__ dh,
                       const float* __restrict__ carried, const float* flow_in,
                       const float* dh_final, T* __restrict__ du, T* __restrict__ drho,
                       T* __restrict__ diota, float* __restrict__ dp_partials, float* dh0,
                       float* seg_a, float* seg_x) {
  __shared__ float run_a[kRuns][kTileWidth], run_x[kRuns][kTileWidth], run_f[kRuns][kTileWidth];
  __shared__ float carry[kTileWidth];
  const Place at = Locate(pr);
  const float sp = at.active ? RgSoftplus(pr.p[at.d]) : 0.f;
  const float sig_p = at.active ? RgSigmoid(pr.p[at.d]) : 0.f;
  const bool first_run = at.run == 0;
  // The first run's threads own the flow carried across steps (and the decay, for a summary).
  float flow = 0.f, decay = 1.f;
  if (kMode == Mode::kFull && first_run && at.active) {
    if (pr.segs == 1) {
      if (dh_final != nullptr) flow = dh_final[at.b * pr.D + at.d];
    } else {
      flow = flow_in[SegAt(pr, at.b, at.seg, at.d)];
    }
  }
  if (first_run) carry[at.lane] = flow;
  float dp = 0.f;
  __syncthreads();
  // Inputs in the order rho, dh (every mode), then iota, u (kFull).
  constexpr int kInputs = kMode == Mode::kFull ? 4 : 2;
  const T* src[kInputs];
  src[0] = rho;
  src[1] = dh;
  if constexpr (kInputs == 4) {
    src[2] = iota;
    src[3] = u;
  }
  RunInputs<T, kInputs> next;
  if (at.step0 < at.step1) LoadRun(pr, at, at.step1 - 1, src, next);
  for (int64_t step = at.step1 - 1; step >= at.step0; --step) {
    const RunInputs<T, kInputs> in = next;
    if (step > at.step0) LoadRun(pr, at, step - 1, src, next);  // in flight during this step
    // The gates of every token of the run (kFull), its decays, and h ↦ A h + X, f ↦ A f + F.
    Gates g[kRunLen];
    float a[kRunLen], x[kRunLen];
#pragma unroll
    for (int k = 0; k < kRunLen; ++k) {
      if constexpr (kMode == Mode::kFull) {
        g[k] = FastGates(ToFloat(in.v[0][k]), ToFloat(in.v[2][k]), sp, in.restart[k]);
        a[k] = in.valid[k] ? g[k].a : 1.f;
        x[k] = in.valid[k] ? g[k].m * g[k].i * ToFloat(in.v[3][k]) : 0.f;
      } else {
        a[k] = in.valid[k] ? FastDecay(ToFloat(in.v[0][k]), sp, in.restart[k]) : 1.f;
        x[k] = 0.f;
      }
    }
    float A = 1.f, X = 0.f, F = 0.f;
#pragma unroll
    for (int k = 0; k < kRunLen; ++k) {
      X = a[k] * X + x[k];
      A *= a[k];
    }
#pragma unroll
    for (int k = kRunLen - 1; k >= 0; --k) F = a[k] * (ToFloat(in.v[1][k]) + F);
    run_a[at.run][at.lane] = A;
    run_x[at.run][at.lane] = X;
    run_f[at.run][at.lane] = F;
    __syncthreads();
    float f = carry[at.lane];
    for (int r = kRuns - 1; r > at.run; --r) f = run_a[r][at.lane] * f + run_f[r][at.lane];
    if constexpr (kMode == Mode::kFull) {
      float h_prev[kRunLen];
      float h = at.active ? carried[CarriedAt(pr, at.b, step, at.d)] : 0.f;
      for (int r = 0; r < at.run; ++r) h = run_a[r][at.lane] * h + run_x[r][at.lane];
#pragma unroll
      for (int k = 0; k < kRunLen; ++k) {
        h_prev[k] = h;
        h = a[k] * h + x[k];
      }
      const int64_t base = (at.b * pr.T + step * kCudaChunk + at.run * kRunLen) * pr.D + at.d;
#pragma unroll
      for (int k = kRunLen - 1; k >= 0; --k) {
        const float dh_t = ToFloat(in.v[1][k]) + f;
        const float i = g[k].i, uu = ToFloat(in.v[3][k]);
        const float dh_m = dh_t * g[k].m;
        float gr = 0.f;
        if (in.valid[k] && !in.restart[k]) {  // ℓ is constant at a restart: no gradient to ρ, p
          const float d_a = dh_t * h_prev[k] - 2.f * g[k].a * (dh_t * i * uu) * g[k].sqrt_grad;
          const float d_log_a = g[k].a * d_a, r = g[k].r;
          gr = float(-kRgLruC) * sp * d_log_a * r * (1.f - r);
          dp += float(-kRgLruC) * r * sig_p * d_log_a;
        }
        if (in.valid[k]) {
          StoreAs(du, base + k * pr.D, dh_m * i);
          StoreAs(drho, base + k * pr.D, gr);
          StoreAs(diota, base + k * pr.D, dh_m * uu * i * (1.f - i));
        }
        f = a[k] * dh_t;
      }
    } else {
      f = run_a[at.run][at.lane] * f + run_f[at.run][at.lane];
      if (first_run) {
        for (int r = 0; r < kRuns; ++r) decay *= run_a[r][at.lane];
      }
    }
    __syncthreads();  // every read of the shared summaries and carry of this step is done
    if (first_run) {
      flow = f;
      carry[at.lane] = f;
    }
  }
  if constexpr (kMode == Mode::kSummary) {
    if (first_run && at.active) {
      seg_a[SegAt(pr, at.b, at.seg, at.d)] = decay;
      seg_x[SegAt(pr, at.b, at.seg, at.d)] = flow;
    }
    return;
  }
  if (first_run && at.active && at.seg == 0 && dh0 != nullptr) dh0[at.b * pr.D + at.d] = flow;
  // dp over the block's runs, in run order.
  __syncthreads();
  run_a[at.run][at.lane] = dp;
  __syncthreads();
  if (first_run && at.active) {
    float sum = 0.f;
    for (int r = 0; r < kRuns; ++r) sum += run_a[r][at.lane];
    dp_partials[SegAt(pr, at.b, at.seg, at.d)] = sum;
  }
}

// The flow entering every segment from its right (the last segment's is dh_final).
__global__ void GradCarryKernel(Problem pr, const float* __restrict__ seg_a,
                                const float* __restrict__ seg_x, const float* dh_final,
                                float* __restrict__ flow_in) {
  const int64_t d = blockIdx.x * int64_t{kCarryThreads} + threadIdx.x;
  const int64_t b = blockIdx.y;
  if (d >= pr.D) return;
  float f = dh_final != nullptr ? dh_final[b * pr.D + d] : 0.f;
  flow_in[SegAt(pr, b, pr.segs - 1, d)] = f;
  for (int64_t s = pr.segs - 1; s > 0; --s) {
    f = seg_a[SegAt(pr, b, s, d)] * f + seg_x[SegAt(pr, b, s, d)];
    flow_in[SegAt(pr, b, s - 1, d)] = f;
  }
}

// ---- Host side.

// Blocks wanted in flight: with fewer (row, tile) pairs than this, rows are split into segments.
int64_t BlocksWanted() { return 2 * int64_t{::mesa::kernels::cuda::SmCount()}; }

Problem ToProblem(const DeviceProblem& p) {
  Problem pr{};
  pr.B = p.batch;
  pr.T = p.seq_len;
  pr.D = p.width;
  pr.steps = p.Chunks();
  pr.tiles = (p.width + kTileWidth - 1) / kTileWidth;
  const int64_t rows_tiles = std::max<int64_t>(1, pr.B * pr.tiles);
  pr.segs = std::clamp<int64_t>((BlocksWanted() + rows_tiles - 1) / rows_tiles, 1,
                                std::max<int64_t>(1, pr.steps));
  pr.steps_per_seg = (pr.steps + pr.segs - 1) / pr.segs;
  pr.segs = std::max<int64_t>(1, (pr.steps + pr.steps_per_seg - 1) / pr.steps_per_seg);
  pr.p = p.p;
  pr.h0 = p.h0;
  pr.started = p.started;
  pr.doc_start = p.doc_start;
  return pr;
}

// The workspace: carried [B, steps + 1, D], then the segment summaries seg_a, seg_x [B, steps, D]
// (segs ≤ steps).
struct Workspace {
  float *carried, *seg_a, *seg_x;
};
Workspace Carve(const DeviceProblem& p, void* base) {
  const int64_t s = p.batch * p.Chunks() * p.width;
  float* f = static_cast<float*>(base);
  return {f, f + s + p.batch * p.width, f + 2 * s + p.batch * p.width};
}

dim3 ScanGrid(const Problem& pr) {
  return dim3(static_cast<unsigned>(pr.tiles), static_cast<unsigned>(pr.segs),
              static_cast<unsigned>(pr.B));
}
dim3 CarryGrid(const Problem& pr) {
  return dim3(static_cast<unsigned>((pr.D + kCarryThreads - 1) / kCarryThreads),
              static_cast<unsigned>(pr.B));
}

// The forward; with h == nullptr only the carried states (for a backward without them).
template <typename T>
void LaunchForward(const Problem& pr, const DeviceProblem& p, T* h, float* h_final, Workspace w,
                   cudaStream_t s) {
  const T* u = static_cast<const T*>(p.u);
  const T* rho = static_cast<const T*>(p.rho);
  const T* iota = static_cast<const T*>(p.iota);
  if (pr.segs > 1) {
    ForwardScanKernel<T, Mode::kSummary><<<ScanGrid(pr), kThreads, 0, s>>>(
        pr, u, rho, iota, w.carried, w.seg_a, w.seg_x, nullptr, nullptr);
    CarryKernel<<<CarryGrid(pr), kCarryThreads, 0, s>>>(pr, w.seg_a, w.seg_x, w.carried);
  }
  ForwardScanKernel<T, Mode::kFull>
      <<<ScanGrid(pr), kThreads, 0, s>>>(pr, u, rho, iota, w.carried, w.seg_a, w.seg_x, h, h_final);
}

template <typename T>
cudaError_t BackwardTyped(const DeviceProblem& p, const T* dh, const float* dh_final, T* du,
                          T* drho, T* diota, float* dp, float* dh0, Workspace w, bool carried_valid,
                          float* dp_partials, cudaStream_t s) {
  const Problem pr = ToProblem(p);
  const T* u = static_cast<const T*>(p.u);
  const T* rho = static_cast<const T*>(p.rho);
  const T* iota = static_cast<const T*>(p.iota);
  if (!carried_valid) LaunchForward<T>(pr, p, nullptr, nullptr, w, s);
  // dp partials [B, segs, D], then the flow entering each segment [B, segs, D].
  float* flow_in = dp_partials + p.batch * p.Chunks() * p.width;
  if (pr.segs > 1) {
    BackwardScanKernel<T, Mode::kSummary><<<ScanGrid(pr), kThreads, 0, s>>>(
        pr, u, rho, iota, dh, w.carried, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
        nullptr, w.seg_a, w.seg_x);
    GradCarryKernel<<<CarryGrid(pr), kCarryThreads, 0, s>>>(pr, w.seg_a, w.seg_x, dh_final,
                                                            flow_in);
  }
  BackwardScanKernel<T, Mode::kFull>
      <<<ScanGrid(pr), kThreads, 0, s>>>(pr, u, rho, iota, dh, w.carried, flow_in, dh_final, du,
                                         drho, diota, dp_partials, dh0, w.seg_a, w.seg_x);
  // dp += Σ over (row, segment) of the partials, in a fixed order (ordered_sum.cuh).
  return ::mesa::kernels::cuda::LaunchSumPartsInOrder<8, /*kAccumulate=*/true>(
      p.batch * pr.segs, p.width, dp_partials, dp, s);
}

}  // namespace

bool RowsFillTheGpu(const DeviceProblem& p) {
  return p.batch * ((p.width + kTileWidth - 1) / kTileWidth) >= BlocksWanted();
}

size_t WorkspaceBytes(const DeviceProblem& p) {
  return sizeof(float) * static_cast<size_t>(p.batch * p.width * (3 * p.Chunks() + 1));
}

size_t DpPartialBytes(const DeviceProblem& p) {
  // The dp partials [B, segs ≤ steps, D], then the flow entering each segment [B, segs, D].
  return sizeof(float) * static_cast<size_t>(p.batch * p.width * (2 * p.Chunks() + 1));
}

template <typename T>
cudaError_t Forward(const DeviceProblem& p, T* h, float* h_final, void* workspace, cudaStream_t s) {
  LaunchForward(ToProblem(p), p, h, h_final, Carve(p, workspace), s);
  return cudaGetLastError();
}

template <typename T>
cudaError_t Backward(const DeviceProblem& p, const T* dh, const float* dh_final, T* du, T* drho,
                     T* diota, float* dp, float* dh0, void* workspace, bool carried_valid,
                     float* dp_partials, cudaStream_t s) {
  return BackwardTyped(p, dh, dh_final, du, drho, diota, dp, dh0, Carve(p, workspace),
                       carried_valid, dp_partials, s);
}

MESA_RGLRU_INSTANTIATE_SCAN(float)
MESA_RGLRU_INSTANTIATE_SCAN(__nv_bfloat16)

}  // namespace mesa::kernels::rglru::cuda::streaming
