// The RG-LRU's streaming scan (rglru_scans.h): a scan that reads every input once when rows fill
// the GPU.
//
// A block owns one (row, tile of 16·kC channels, segment of steps) and walks its steps in order
// (the backward: in reverse). A step is kCudaChunk = 64 tokens: 16 runs of 4 tokens, one thread
// per (run, kC consecutive channels; kC = 2 when the width and the pointers allow one bf16 pair or
// float2 per load), so a warp's load covers two rows of 32·kC bytes. Each thread reduces its run
// to an affine map (A, X), the block publishes them in shared memory, and every thread folds the
// runs before it, in order, into the state carried across steps: the same association on every
// launch, so results do not depend on scheduling. With enough (row, tile) blocks to fill the GPU
// a row is one segment and the inputs are read once; otherwise (B = 1, long T) segments are
// summarised first and carried by one short sequential kernel.
//
// The scan is bound by instruction issue (docs/journal.md, 2026-12-07), so the per-token work is
// kept lean: the gates branch-free (rglru_device_math.cuh), the restart test once per token for
// all of a thread's channels, and the backward keeps per token only the products its gradients
// need (BackwardTokens) instead of the gates.
#include "kernels/rglru/cuda/rglru_scans.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/common/cuda/kernel_problem.h"
#include "kernels/common/cuda/ordered_sum.cuh"
#include "kernels/rglru/cuda/rglru_device_math.cuh"
#include "kernels/rglru/cuda/rglru_packed_io.cuh"
#include "kernels/rglru/rglru_gates.h"

namespace mesa::kernels::rglru::cuda::streaming {
namespace {

constexpr int kLanes = 16;                // threads across a tile's channels
constexpr int kRuns = 16;                 // runs per step
constexpr int kRunLen = 4;                // tokens per run
constexpr int kThreads = kLanes * kRuns;  // 256
constexpr int kUnitWidth = 16;  // channels per unit of work when choosing the scan and segments
constexpr int kCarryThreads = 128;
static_assert(kRuns * kRunLen == kCudaChunk);

// ---- The problem as the kernels see it.

struct Problem {
  int64_t B, T, D, steps, tiles, segs, steps_per_seg;  // tiles: of kLanes·kC channels
  const float* p;
  const float* h0;
  const float* started;
  const int32_t* doc_start;
};

// kC channels of shared memory as one access.
template <int kC>
struct alignas(4 * kC) Vec {
  float v[kC];
};

// Where a thread works: its row, segment, first channel and run.
template <int kC>
struct Place {
  int64_t b, seg, d0;
  int lane, run;  // lane: the thread's column in the shared tiles
  bool active;    // its channels exist (with kC = 2 the width is even: both or neither)
  RowStart row;
  int64_t step0, step1;
};

template <int kC>
__device__ __forceinline__ Place<kC> Locate(const Problem& pr) {
  Place<kC> at;
  at.lane = threadIdx.x % kLanes;
  at.run = threadIdx.x / kLanes;
  at.b = blockIdx.z;
  at.seg = blockIdx.y;
  at.d0 = blockIdx.x * int64_t{kLanes * kC} + at.lane * kC;
  at.active = at.d0 < pr.D;
  at.row = RowStartOf(pr.doc_start, pr.started, pr.T, at.b);
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

template <int kC>
__device__ __forceinline__ Vec<kC> LoadVec(const float* p) {
  Vec<kC> v;
  LoadF<kC>(p, v.v);
  return v;
}
template <int kC>
__device__ __forceinline__ Vec<kC> Filled(float value) {
  Vec<kC> v;
#pragma unroll
  for (int c = 0; c < kC; ++c) v.v[c] = value;
  return v;
}
// m ← n ∘ m for affine maps (A, X): A ← A_n A, X ← A_n X + X_n; on a state: h ← A_n h + X_n.
template <int kC>
__device__ __forceinline__ void Apply(const Vec<kC>& an, const Vec<kC>& xn, Vec<kC>& h) {
#pragma unroll
  for (int c = 0; c < kC; ++c) h.v[c] = an.v[c] * h.v[c] + xn.v[c];
}

// One run's inputs for one step, as loaded (bf16 stays packed until used: a prefetched step holds
// half the registers), loaded a step ahead of their use.
template <typename T, int kC, int kInputs>
struct RunInputs {
  Packed<T, kC> v[kInputs][kRunLen];
  int valid;         // tokens of the run inside the row (0 for a thread without channels)
  unsigned restart;  // bit k: token k restarts the recurrence
};

template <typename T, int kC, int kInputs>
__device__ __forceinline__ void LoadRun(const Problem& pr, const Place<kC>& at, int64_t step,
                                        const T* const (&src)[kInputs],
                                        RunInputs<T, kC, kInputs>& in) {
  using P = Packed<T, kC>;
  const int64_t t0 = step * kCudaChunk + at.run * kRunLen;
  const int64_t base = (at.b * pr.T + t0) * pr.D + at.d0;
  in.valid = at.active ? static_cast<int>(min(int64_t{kRunLen}, pr.T - t0)) : 0;
  in.restart = 0;
#pragma unroll
  for (int k = 0; k < kRunLen; ++k) {
    const int64_t t = t0 + k;
    if (k < in.valid) in.restart |= unsigned{Restarts(at.row, t)} << k;
#pragma unroll
    for (int n = 0; n < kInputs; ++n) {
      in.v[n][k] = k < in.valid ? *reinterpret_cast<const P*>(src[n] + base + k * pr.D) : P{};
    }
  }
}

template <int kC>
__device__ __forceinline__ void LoadChannelConstants(const Problem& pr, const Place<kC>& at,
                                                     ChannelConstants (&channel)[kC]) {
#pragma unroll
  for (int c = 0; c < kC; ++c) channel[c] = ChannelConstantsOf(at.active ? pr.p[at.d0 + c] : 0.f);
}

enum class Mode { kSummary, kFull };

// ---- Forward. kSummary: each segment from zero; its decay product and end state to seg_a/seg_x.
// kFull: from the carried-in state; h (when h_out), the step states to `carried`, and h_final.
template <typename T, int kC, Mode kMode>
__global__ void __launch_bounds__(kThreads)
    ForwardScanKernel(Problem pr, const T* __restrict__ u, const T* __restrict__ rho,
                      const T* __restrict__ iota, float* __restrict__ carried, float* seg_a,
                      float* seg_x, T* __restrict__ h_out, float* h_final) {
  __shared__ Vec<kC> run_a[kRuns][kLanes], run_x[kRuns][kLanes], carry[kLanes];
  const Place<kC> at = Locate<kC>(pr);
  ChannelConstants channel[kC];
  LoadChannelConstants<kC>(pr, at, channel);
  const bool last_run = at.run == kRuns - 1;
  // The last run's threads own the state carried across steps (and the decay, for a summary).
  Vec<kC> state = Filled<kC>(0.f), decay = Filled<kC>(1.f);
  if (kMode == Mode::kFull && last_run && at.active) {
    if (pr.segs == 1) {  // h0 is read here and h_final written by the same threads
      if (pr.h0 != nullptr) state = LoadVec<kC>(pr.h0 + at.b * pr.D + at.d0);
    } else {
      state = LoadVec<kC>(carried + CarriedAt(pr, at.b, at.step0, at.d0));
    }
  }
  if (last_run) carry[at.lane] = state;
  __syncthreads();
  const T* const src[3] = {rho, iota, u};
  RunInputs<T, kC, 3> next;
  if (at.step0 < at.step1) LoadRun(pr, at, at.step0, src, next);
  for (int64_t step = at.step0; step < at.step1; ++step) {
    const RunInputs<T, kC, 3> in = next;
    if (step + 1 < at.step1) LoadRun(pr, at, step + 1, src, next);  // in flight during this step
    Vec<kC> a[kRunLen], x[kRunLen];
#pragma unroll
    for (int k = 0; k < kRunLen; ++k) {
      float r[kC], i[kC], uu[kC];
      Unpack(in.v[0][k], r);
      Unpack(in.v[1][k], i);
      Unpack(in.v[2][k], uu);
      const bool restart = (in.restart >> k) & 1u;
#pragma unroll
      for (int c = 0; c < kC; ++c) {
        const Gates g = FastGates(r[c], i[c], channel[c].k2, restart);
        a[k].v[c] = k < in.valid ? g.a : 1.f;  // a token past the row's end leaves h alone
        x[k].v[c] = g.m * g.i * uu[c];         // (its u is loaded as 0)
      }
    }
    Vec<kC> run = Filled<kC>(1.f), run_in = Filled<kC>(0.f);
#pragma unroll
    for (int k = 0; k < kRunLen; ++k) {
      Apply<kC>(a[k], x[k], run_in);
#pragma unroll
      for (int c = 0; c < kC; ++c) run.v[c] *= a[k].v[c];
    }
    run_a[at.run][at.lane] = run;
    run_x[at.run][at.lane] = run_in;
    __syncthreads();
    Vec<kC> h = carry[at.lane];
    for (int r = 0; r < at.run; ++r) Apply<kC>(run_a[r][at.lane], run_x[r][at.lane], h);
    if (kMode == Mode::kFull && at.run == 0 && at.active) {
      StoreF<kC>(carried + CarriedAt(pr, at.b, step, at.d0), h.v);
    }
    const int64_t base = (at.b * pr.T + step * kCudaChunk + at.run * kRunLen) * pr.D + at.d0;
#pragma unroll
    for (int k = 0; k < kRunLen; ++k) {
      Apply<kC>(a[k], x[k], h);
      if (kMode == Mode::kFull && h_out != nullptr && k < in.valid) {
        StoreC<T, kC>(h_out, base + k * pr.D, h.v);
      }
    }
    if (kMode == Mode::kSummary && last_run) {
      for (int r = 0; r < kRuns; ++r) {
#pragma unroll
        for (int c = 0; c < kC; ++c) decay.v[c] *= run_a[r][at.lane].v[c];
      }
    }
    __syncthreads();  // every read of run_a, run_x and carry of this step is done
    if (last_run) {
      state = h;
      carry[at.lane] = h;
    }
  }
  if (!last_run || !at.active) return;
  if (kMode == Mode::kSummary) {
    StoreF<kC>(seg_a + SegAt(pr, at.b, at.seg, at.d0), decay.v);
    StoreF<kC>(seg_x + SegAt(pr, at.b, at.seg, at.d0), state.v);
  } else if (at.seg == pr.segs - 1) {
    StoreF<kC>(carried + CarriedAt(pr, at.b, pr.steps, at.d0), state.v);
    if (h_final != nullptr) StoreF<kC>(h_final + at.b * pr.D + at.d0, state.v);
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

// What the backward keeps of one token and channel between its run summaries and its gradients,
// so that neither the gates nor the inputs but dh are needed again (δh: the token's total gradient;
// h_prev: the state before it):
//   du = δh·mi, d_a = δh·(h_prev − q), dρ = c_rho·d_a, dp += c_p·d_a (times −c·σ(p) at the end),
//   dι = δh·c_iota, and the flow to the token before is a·δh.
template <int kC>
struct BackwardTokens {
  Vec<kC> a, x, mi, q, c_rho, c_p, c_iota;
};

// ---- Backward, in reverse over the steps. The flow f is the gradient reaching h_t from h_{t+1}:
// δh_t = dh_t + f, and the flow to h_{t−1} is a_t δh_t.
// kSummary: from zero flow; the segment's decay product and outgoing flow to seg_a/seg_x.
// kFull: from the incoming flow (dh_final, or flow_in of the segment); du, dρ, dι, the segment's
// dp partial, and dh0 (segment 0).
template <typename T, int kC, Mode kMode>
__global__ void __launch_bounds__(kThreads, 2)
    BackwardScanKernel(Problem pr, const T* __restrict__ u, const T* __restrict__ rho,
                       const T* __restrict__ iota, const T* __restrict__ dh,
                       const float* __restrict__ carried, const float* flow_in,
                       const float* dh_final, T* __restrict__ du, T* __restrict__ drho,
                       T* __restrict__ diota, float* __restrict__ dp_partials, float* dh0,
                       float* seg_a, float* seg_x) {
  __shared__ Vec<kC> run_a[kRuns][kLanes], run_x[kRuns][kLanes], run_f[kRuns][kLanes];
  __shared__ Vec<kC> carry[kLanes];
  const Place<kC> at = Locate<kC>(pr);
  ChannelConstants channel[kC];
  LoadChannelConstants<kC>(pr, at, channel);
  const bool first_run = at.run == 0;
  // The first run's threads own the flow carried across steps (and the decay, for a summary).
  Vec<kC> flow = Filled<kC>(0.f), decay = Filled<kC>(1.f);
  if (kMode == Mode::kFull && first_run && at.active) {
    if (pr.segs == 1) {
      if (dh_final != nullptr) flow = LoadVec<kC>(dh_final + at.b * pr.D + at.d0);
    } else {
      flow = LoadVec<kC>(flow_in + SegAt(pr, at.b, at.seg, at.d0));
    }
  }
  if (first_run) carry[at.lane] = flow;
  Vec<kC> dp = Filled<kC>(0.f);  // Σ c_p·d_a over the block's tokens of this run
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
  RunInputs<T, kC, kInputs> next;
  if (at.step0 < at.step1) LoadRun(pr, at, at.step1 - 1, src, next);
  for (int64_t step = at.step1 - 1; step >= at.step0; --step) {
    const RunInputs<T, kC, kInputs> in = next;
    if (step > at.step0) LoadRun(pr, at, step - 1, src, next);  // in flight during this step
    BackwardTokens<kC> tok[kRunLen];
#pragma unroll
    for (int k = 0; k < kRunLen; ++k) {
      const bool restart = (in.restart >> k) & 1u, valid = k < in.valid;
      float r[kC];
      Unpack(in.v[0][k], r);
      if constexpr (kMode == Mode::kFull) {
        float i[kC], uu[kC];
        Unpack(in.v[2][k], i);
        Unpack(in.v[3][k], uu);
        const bool live = valid && !restart;  // ℓ is constant at a restart: no gradient to ρ, p
#pragma unroll
        for (int c = 0; c < kC; ++c) {
          const Gates g = FastGates(r[c], i[c], channel[c].k2, restart);
          const float a = valid ? g.a : 1.f, iu = g.i * uu[c], x = g.m * iu;
          tok[k].a.v[c] = a;
          tok[k].x.v[c] = x;
          tok[k].mi.v[c] = g.m * g.i;
          tok[k].q.v[c] = 2.f * a * iu * g.sqrt_grad;  // h_prev is subtracted once known
          tok[k].c_rho.v[c] = live ? a * channel[c].rho_scale * g.r * (1.f - g.r) : 0.f;
          tok[k].c_p.v[c] = live ? a * g.r : 0.f;
          tok[k].c_iota.v[c] = x * (1.f - g.i);
        }
      } else {
#pragma unroll
        for (int c = 0; c < kC; ++c)
          tok[k].a.v[c] = valid ? FastDecay(r[c], channel[c].k2, restart) : 1.f;
      }
    }
    // The run's state map h ↦ A h + X and flow map f ↦ A f + F.
    Vec<kC> run = Filled<kC>(1.f), run_in = Filled<kC>(0.f), run_flow = Filled<kC>(0.f);
#pragma unroll
    for (int k = 0; k < kRunLen; ++k) {
      if constexpr (kMode == Mode::kFull) Apply<kC>(tok[k].a, tok[k].x, run_in);
#pragma unroll
      for (int c = 0; c < kC; ++c) run.v[c] *= tok[k].a.v[c];
    }
#pragma unroll
    for (int k = kRunLen - 1; k >= 0; --k) {
      float g[kC];
      Unpack(in.v[1][k], g);
#pragma unroll
      for (int c = 0; c < kC; ++c) run_flow.v[c] = tok[k].a.v[c] * (g[c] + run_flow.v[c]);
    }
    run_a[at.run][at.lane] = run;
    run_x[at.run][at.lane] = run_in;
    run_f[at.run][at.lane] = run_flow;
    __syncthreads();
    Vec<kC> f = carry[at.lane];
    for (int r = kRuns - 1; r > at.run; --r) Apply<kC>(run_a[r][at.lane], run_f[r][at.lane], f);
    if constexpr (kMode == Mode::kFull) {
      Vec<kC> h =
          at.active ? LoadVec<kC>(carried + CarriedAt(pr, at.b, step, at.d0)) : Filled<kC>(0.f);
      for (int r = 0; r < at.run; ++r) Apply<kC>(run_a[r][at.lane], run_x[r][at.lane], h);
#pragma unroll
      for (int k = 0; k < kRunLen; ++k) {
#pragma unroll
        for (int c = 0; c < kC; ++c) tok[k].q.v[c] = h.v[c] - tok[k].q.v[c];
        Apply<kC>(tok[k].a, tok[k].x, h);
      }
      const int64_t base = (at.b * pr.T + step * kCudaChunk + at.run * kRunLen) * pr.D + at.d0;
#pragma unroll
      for (int k = kRunLen - 1; k >= 0; --k) {
        float g[kC], out_u[kC], out_r[kC], out_i[kC];
        Unpack(in.v[1][k], g);
#pragma unroll
        for (int c = 0; c < kC; ++c) {
          const float dh_t = g[c] + f.v[c], d_a = dh_t * tok[k].q.v[c];
          out_u[c] = dh_t * tok[k].mi.v[c];
          out_r[c] = tok[k].c_rho.v[c] * d_a;
          out_i[c] = dh_t * tok[k].c_iota.v[c];
          dp.v[c] += tok[k].c_p.v[c] * d_a;
          f.v[c] = tok[k].a.v[c] * dh_t;
        }
        if (k < in.valid) {
          StoreC<T, kC>(du, base + k * pr.D, out_u);
          StoreC<T, kC>(drho, base + k * pr.D, out_r);
          StoreC<T, kC>(diota, base + k * pr.D, out_i);
        }
      }
    } else {
      Apply<kC>(run_a[at.run][at.lane], run_f[at.run][at.lane], f);
      if (first_run) {
        for (int r = 0; r < kRuns; ++r) {
#pragma unroll
          for (int c = 0; c < kC; ++c) decay.v[c] *= run_a[r][at.lane].v[c];
        }
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
      StoreF<kC>(seg_a + SegAt(pr, at.b, at.seg, at.d0), decay.v);
      StoreF<kC>(seg_x + SegAt(pr, at.b, at.seg, at.d0), flow.v);
    }
    return;
  }
  if (first_run && at.active && at.seg == 0 && dh0 != nullptr) {
    StoreF<kC>(dh0 + at.b * pr.D + at.d0, flow.v);
  }
  // dp over the block's runs, in run order: ∂p = −c·σ(p)·Σ c_p·d_a.
  __syncthreads();
  run_a[at.run][at.lane] = dp;
  __syncthreads();
  if (first_run && at.active) {
    Vec<kC> sum = Filled<kC>(0.f);
    for (int r = 0; r < kRuns; ++r) {
#pragma unroll
      for (int c = 0; c < kC; ++c) sum.v[c] += run_a[r][at.lane].v[c];
    }
#pragma unroll
    for (int c = 0; c < kC; ++c) sum.v[c] *= channel[c].dp_scale;
    StoreF<kC>(dp_partials + SegAt(pr, at.b, at.seg, at.d0), sum.v);
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

// Blocks of kUnitWidth channels wanted in flight: with fewer (row, unit) pairs than this, rows are
// split into segments.
int64_t BlocksWanted() { return 2 * int64_t{::mesa::kernels::cuda::SmCount()}; }
int64_t Units(const DeviceProblem& p) {
  return p.batch * ((p.width + kUnitWidth - 1) / kUnitWidth);
}

// Segments per row. They depend only on the shape (not on kC), so that a backward with other
// pointers than its forward's reads the carried states where the forward wrote them.
int64_t Segments(const DeviceProblem& p) {
  const int64_t steps = p.Chunks(), units = std::max<int64_t>(1, Units(p));
  const int64_t segs =
      std::clamp<int64_t>((BlocksWanted() + units - 1) / units, 1, std::max<int64_t>(1, steps));
  const int64_t steps_per_seg = (steps + segs - 1) / segs;
  return std::max<int64_t>(1, (steps + steps_per_seg - 1) / steps_per_seg);
}

Problem ToProblem(const DeviceProblem& p, int channels_per_thread) {
  Problem pr{};
  pr.B = p.batch;
  pr.T = p.seq_len;
  pr.D = p.width;
  pr.steps = p.Chunks();
  const int64_t tile_width = int64_t{kLanes} * channels_per_thread;
  pr.tiles = (p.width + tile_width - 1) / tile_width;
  pr.segs = Segments(p);
  pr.steps_per_seg = (pr.steps + pr.segs - 1) / pr.segs;
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

// The forward with kC channels per thread; with h == nullptr only the carried states (for a
// backward without them).
template <typename T, int kC>
void LaunchForwardC(const DeviceProblem& p, T* h, float* h_final, Workspace w, cudaStream_t s) {
  const Problem pr = ToProblem(p, kC);
  const T* u = static_cast<const T*>(p.u);
  const T* rho = static_cast<const T*>(p.rho);
  const T* iota = static_cast<const T*>(p.iota);
  if (pr.segs > 1) {
    ForwardScanKernel<T, kC, Mode::kSummary><<<ScanGrid(pr), kThreads, 0, s>>>(
        pr, u, rho, iota, w.carried, w.seg_a, w.seg_x, nullptr, nullptr);
    CarryKernel<<<CarryGrid(pr), kCarryThreads, 0, s>>>(pr, w.seg_a, w.seg_x, w.carried);
  }
  ForwardScanKernel<T, kC, Mode::kFull>
      <<<ScanGrid(pr), kThreads, 0, s>>>(pr, u, rho, iota, w.carried, w.seg_a, w.seg_x, h, h_final);
}

template <typename T>
void LaunchForward(const DeviceProblem& p, T* h, float* h_final, Workspace w, cudaStream_t s) {
  if (PairedChannels(p.width, sizeof(T), {p.u, p.rho, p.iota, h})) {
    LaunchForwardC<T, 2>(p, h, h_final, w, s);
  } else {
    LaunchForwardC<T, 1>(p, h, h_final, w, s);
  }
}

template <typename T, int kC>
void LaunchBackwardC(const DeviceProblem& p, const T* dh, const float* dh_final, T* du, T* drho,
                     T* diota, float* dh0, Workspace w, float* dp_partials, float* flow_in,
                     cudaStream_t s) {
  const Problem pr = ToProblem(p, kC);
  const T* u = static_cast<const T*>(p.u);
  const T* rho = static_cast<const T*>(p.rho);
  const T* iota = static_cast<const T*>(p.iota);
  if (pr.segs > 1) {
    BackwardScanKernel<T, kC, Mode::kSummary><<<ScanGrid(pr), kThreads, 0, s>>>(
        pr, u, rho, iota, dh, w.carried, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
        nullptr, w.seg_a, w.seg_x);
    GradCarryKernel<<<CarryGrid(pr), kCarryThreads, 0, s>>>(pr, w.seg_a, w.seg_x, dh_final,
                                                            flow_in);
  }
  BackwardScanKernel<T, kC, Mode::kFull>
      <<<ScanGrid(pr), kThreads, 0, s>>>(pr, u, rho, iota, dh, w.carried, flow_in, dh_final, du,
                                         drho, diota, dp_partials, dh0, w.seg_a, w.seg_x);
}

template <typename T>
cudaError_t BackwardTyped(const DeviceProblem& p, const T* dh, const float* dh_final, T* du,
                          T* drho, T* diota, float* dp, float* dh0, Workspace w, bool carried_valid,
                          float* dp_partials, cudaStream_t s) {
  if (!carried_valid) LaunchForward<T>(p, nullptr, nullptr, w, s);
  // dp partials [B, segs, D], then the flow entering each segment [B, segs, D].
  float* flow_in = dp_partials + p.batch * p.Chunks() * p.width;
  if (PairedChannels(p.width, sizeof(T), {p.u, p.rho, p.iota, dh, du, drho, diota})) {
    LaunchBackwardC<T, 2>(p, dh, dh_final, du, drho, diota, dh0, w, dp_partials, flow_in, s);
  } else {
    LaunchBackwardC<T, 1>(p, dh, dh_final, du, drho, diota, dh0, w, dp_partials, flow_in, s);
  }
  // dp += Σ over (row, segment) of the partials, in a fixed order (ordered_sum.cuh).
  return ::mesa::kernels::cuda::LaunchSumPartsInOrder<8, /*kAccumulate=*/true>(
      p.batch * Segments(p), p.width, dp_partials, dp, s);
}

}  // namespace

bool RowsFillTheGpu(const DeviceProblem& p) { return Units(p) >= BlocksWanted(); }

size_t WorkspaceBytes(const DeviceProblem& p) {
  return sizeof(float) * static_cast<size_t>(p.batch * p.width * (3 * p.Chunks() + 1));
}

size_t DpPartialBytes(const DeviceProblem& p) {
  // The dp partials [B, segs ≤ steps, D], then the flow entering each segment [B, segs, D].
  return sizeof(float) * static_cast<size_t>(p.batch * p.width * (2 * p.Chunks() + 1));
}

template <typename T>
cudaError_t Forward(const DeviceProblem& p, T* h, float* h_final, void* workspace, cudaStream_t s) {
  LaunchForward(p, h, h_final, Carve(p, workspace), s);
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
