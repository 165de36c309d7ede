// The RG-LRU's chained scan (rglru_scans.h): a single pass that reads every input once and writes
// every output once, whatever the shape (kernels/rglru/README.md, "The chained scan").
//
// A block owns one tile: a row, 32·kC channels (kC = 2 when the width and the pointers allow paired
// loads) and kCudaChunk = 64 tokens, as 8 runs of 8 tokens, one warp per run and one thread per
// (run, channel pair). Phase 1: every thread loads its run's inputs at once, computes the gates and
// reduces its run to an affine map h ↦ A h + X; the block composes the runs into the tile's map and
// publishes it (a flag per tile). Phase 2: the block composes the maps of the tiles before it, from
// their published maps, into the state entering the tile: the tiles of its own group of 32 one by
// one, earlier groups through a group map that each group's last tile publishes. The association
// is fixed by the tile's position, never by which blocks happened to finish first, so h, the
// gradients and dp repeat bit for bit. Blocks take their tiles from an atomic counter in time
// order, so every tile a block waits for belongs to a block that is already running (no deadlock).
// The backward is the same scan in reverse time for the flow f (δh_t = dh_t + f, f ← a_t δh_t),
// recomputing h inside the tile from the state the forward left at its start.
#include "kernels/rglru/cuda/rglru_scans.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/common/cuda/ordered_sum.cuh"
#include "kernels/rglru/cuda/rglru_device_math.cuh"
#include "kernels/rglru/cuda/rglru_packed_io.cuh"
#include "kernels/rglru/rglru_gates.h"

namespace mesa::kernels::rglru::cuda::chained {
namespace {

constexpr int kLanes = 32;                   // threads across channels: one warp
constexpr int kRuns = 8;                     // runs per tile, one warp each
constexpr int kRunLen = kCudaChunk / kRuns;  // tokens per run
constexpr int kThreads = kLanes * kRuns;     // 256
constexpr int kGroup = 32;                   // tiles per group
static_assert(kRuns * kRunLen == kCudaChunk);

// ---- The problem as the kernels see it.

struct Problem {
  int64_t B, T, D;
  int64_t tiles;    // tiles per row: ceil(T / kCudaChunk)
  int64_t groups;   // groups of kGroup tiles per row
  int64_t cgroups;  // channel groups per row (32·kC channels each)
  int64_t chains;   // B · cgroups: the independent scans
  const float* p;
  const float* h0;
  const float* started;
  const int32_t* doc_start;
};

// The workspace (WorkspaceBytes): float32 maps and states, then the flags and the tile counter.
struct Scratch {
  float* states;  // [B, tiles + 1, D]: the state entering each tile; last, the final state
  float* tile_a;  // [B, tiles, D]: each tile's map (the backward: its flow map)
  float* tile_x;
  float* group_a;  // [B, groups, D]: each group's map
  float* group_x;
  float* channel;    // [3, D]: per channel k2 (DecayLog2Scale), −c·softplus(p), −c·σ(p)
  int* counter;      // the next tile to hand out
  int* tile_flags;   // [chains, tiles]: the tile's map is published
  int* group_flags;  // [chains, groups]
};

// Where a block and thread work. Tiles are handed out in time order (the backward: reversed), all
// chains of one tile position before the next.
template <int kC>
struct Place {
  int64_t tile, chain, b, d0;  // d0: the thread's first channel
  int lane, run;
  bool active;  // the thread's channels exist (with kC = 2 the width is even: both or neither)
  RowStart row;
};

template <int kC>
__device__ __forceinline__ Place<kC> Locate(const Problem& pr, int64_t order, bool reverse) {
  Place<kC> at;
  const int64_t position = order / pr.chains;
  at.tile = reverse ? pr.tiles - 1 - position : position;
  at.chain = order % pr.chains;
  at.b = at.chain / pr.cgroups;
  at.lane = threadIdx.x % kLanes;
  at.run = threadIdx.x / kLanes;
  at.d0 = (at.chain % pr.cgroups) * (kLanes * kC) + at.lane * kC;
  at.active = at.d0 < pr.D;
  at.row = RowStartOf(pr.doc_start, pr.started, pr.T, at.b);
  return at;
}

__device__ __forceinline__ int64_t TileAt(const Problem& pr, int64_t b, int64_t tile, int64_t d) {
  return (b * pr.tiles + tile) * pr.D + d;
}
__device__ __forceinline__ int64_t GroupAt(const Problem& pr, int64_t b, int64_t g, int64_t d) {
  return (b * pr.groups + g) * pr.D + d;
}
__device__ __forceinline__ int64_t StateAt(const Problem& pr, int64_t b, int64_t tile, int64_t d) {
  return (b * (pr.tiles + 1) + tile) * pr.D + d;
}

// Claims the block's place in the order.
__device__ __forceinline__ int64_t ClaimOrder(int* counter) {
  __shared__ int order;
  if (threadIdx.x == 0) order = atomicAdd(counter, 1);
  __syncthreads();
  return order;
}

// Publishes a map (the calling warp's lanes write their channels): data, fence, then the flag.
template <int kC>
__device__ __forceinline__ void Publish(float* a, float* x, int64_t at, bool active,
                                        const float (&A)[kC], const float (&X)[kC], int* flag) {
  if (active) {
    StoreF<kC>(a + at, A);
    StoreF<kC>(x + at, X);
  }
  __threadfence();
  __syncwarp();
  if (threadIdx.x % kLanes == 0) StoreRelease(flag, 1);
}

// One warp composes the published maps of `count` items in the order they apply, item n at index
// first + step·n: M ← item ∘ M (A ← A_n A, X ← A_n X + X_n). Waits for each item's flag; up to
// kBatch items' flags are polled by as many lanes and their maps loaded at once.
constexpr int kBatch = 8;
template <int kC>
__device__ __forceinline__ void ComposePublished(const float* a, const float* x, const int* flags,
                                                 int64_t data_base, int64_t data_stride,
                                                 int64_t first, int64_t step, int64_t count,
                                                 bool active, float (&MA)[kC], float (&MX)[kC]) {
  const int lane = threadIdx.x % kLanes;
  for (int64_t n0 = 0; n0 < count; n0 += kBatch) {
    const int m = static_cast<int>(min(int64_t{kBatch}, count - n0));
    if (lane < m) {
      const int* flag = flags + first + step * (n0 + lane);
      while (LoadAcquire(flag) == 0) __nanosleep(32);
    }
    __syncwarp();
    float A[kBatch][kC], X[kBatch][kC];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      if (j < m && active) {
        const int64_t at = data_base + (first + step * (n0 + j)) * data_stride;
        LoadL2<kC>(a + at, A[j]);
        LoadL2<kC>(x + at, X[j]);
      }
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      if (j < m) {
#pragma unroll
        for (int c = 0; c < kC; ++c) {
          MX[c] = A[j][c] * MX[c] + X[j][c];
          MA[c] *= A[j][c];
        }
      }
    }
  }
}

// The maps before a tile come in two lists: earlier groups (list 0) and the earlier tiles of its
// own group (list 1). Each list is cut into kFoldWarps fixed slices by its length alone, one warp
// each (warps 0-3: list 0, warps 4-7: list 1), and the slices' maps go to part_a/part_x[warp]: the
// association depends only on the tile's position.
constexpr int kFoldWarps = kRuns / 2;
template <int kC>
__device__ __forceinline__ void FoldSlice(const float* a, const float* x, const int* flags,
                                          int64_t data_base, int64_t data_stride, int64_t first,
                                          int64_t step, int64_t count, bool active,
                                          float (*part_a)[kLanes * kC],
                                          float (*part_x)[kLanes * kC]) {
  const int warp = threadIdx.x / kLanes, slot = warp % kFoldWarps;
  const int64_t per = (count + kFoldWarps - 1) / kFoldWarps;
  const int64_t lo = min(count, slot * per), hi = min(count, lo + per);
  float MA[kC], MX[kC];
#pragma unroll
  for (int c = 0; c < kC; ++c) {
    MA[c] = 1.f;
    MX[c] = 0.f;
  }
  ComposePublished<kC>(a, x, flags, data_base, data_stride, first + step * lo, step, hi - lo,
                       active, MA, MX);
  const int ch = (threadIdx.x % kLanes) * kC;
#pragma unroll
  for (int c = 0; c < kC; ++c) {
    part_a[warp][ch + c] = MA[c];
    part_x[warp][ch + c] = MX[c];
  }
}

// The slices of one list composed in order: warps [w0, w0 + kFoldWarps) of part_a/part_x.
template <int kC>
__device__ __forceinline__ void ComposeParts(const float (*part_a)[kLanes * kC],
                                             const float (*part_x)[kLanes * kC], int w0, int ch,
                                             float (&MA)[kC], float (&MX)[kC]) {
#pragma unroll
  for (int c = 0; c < kC; ++c) {
    MA[c] = 1.f;
    MX[c] = 0.f;
#pragma unroll
    for (int w = w0; w < w0 + kFoldWarps; ++w) {
      MX[c] = part_a[w][ch + c] * MX[c] + part_x[w][ch + c];
      MA[c] *= part_a[w][ch + c];
    }
  }
}

// The four warps of list 1 (threads kFoldWarps·32 ... 255) wait for each other.
__device__ __forceinline__ void SyncListOneWarps() {
  asm volatile("bar.sync 1, %0;" ::"n"(kFoldWarps * kLanes) : "memory");
}

// One run's inputs as loaded (bf16 pairs stay packed until used).
template <typename T, int kC, int kInputs>
struct RunInputs {
  Packed<T, kC> v[kInputs][kRunLen];
  bool valid[kRunLen], restart[kRunLen];
};

template <typename T, int kC, int kInputs>
__device__ __forceinline__ void LoadRun(const Problem& pr, const Place<kC>& at,
                                        const T* const (&src)[kInputs],
                                        RunInputs<T, kC, kInputs>& in) {
  using P = Packed<T, kC>;
  const int64_t t0 = at.tile * kCudaChunk + at.run * kRunLen;
  const int64_t base = (at.b * pr.T + t0) * pr.D + at.d0;
#pragma unroll
  for (int k = 0; k < kRunLen; ++k) {
    const int64_t t = t0 + k;
    in.valid[k] = at.active && t < pr.T;
    in.restart[k] = in.valid[k] && Restarts(at.row, t);
#pragma unroll
    for (int n = 0; n < kInputs; ++n) {
      in.v[n][k] = in.valid[k] ? *reinterpret_cast<const P*>(src[n] + base + k * pr.D) : P{};
    }
  }
}

// The per-channel constants of the decay, computed once per launch (ChannelConstantsKernel) rather
// than with the accurate exp and log1p in every block of 64 tokens.
enum ChannelConstant { kDecayLog2Scale, kRhoScale, kDpScale, kChannelConstants };

__global__ void ChannelConstantsKernel(int64_t D, const float* __restrict__ p,
                                       float* __restrict__ channel) {
  const int64_t d = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (d >= D) return;
  const ChannelConstants k = ChannelConstantsOf(p[d]);
  channel[kDecayLog2Scale * D + d] = k.k2;
  channel[kRhoScale * D + d] = k.rho_scale;
  channel[kDpScale * D + d] = k.dp_scale;
}

template <int kC>
__device__ __forceinline__ void LoadChannelConstants(const Problem& pr, const Scratch& ws,
                                                     const Place<kC>& at, ChannelConstant which,
                                                     float (&v)[kC]) {
#pragma unroll
  for (int c = 0; c < kC; ++c) v[c] = at.active ? ws.channel[which * pr.D + at.d0 + c] : 0.f;
}

// ---- Forward. h_out null: only the states (for a backward without them).
template <typename T, int kC>
__global__ void __launch_bounds__(kThreads, 3)
    ForwardKernel(Problem pr, Scratch ws, const T* __restrict__ u, const T* __restrict__ rho,
                  const T* __restrict__ iota, T* __restrict__ h_out, float* h_final) {
  constexpr int kCh = kLanes * kC;
  __shared__ float run_a[kRuns][kCh], run_x[kRuns][kCh];
  __shared__ float part_a[kRuns][kCh], part_x[kRuns][kCh], enter_h0[kCh];
  // Every token's decay and input term, per thread (shared memory instead of registers: more
  // blocks per SM, hence more loads in flight).
  __shared__ float tok_a[kRunLen * kC][kThreads], tok_x[kRunLen * kC][kThreads];
  const Place<kC> at = Locate<kC>(pr, ClaimOrder(ws.counter), /*reverse=*/false);
  const int ch = at.lane * kC;
  float k2[kC];
  LoadChannelConstants<kC>(pr, ws, at, kDecayLog2Scale, k2);
  // h0, read before this tile's map is published: h_final may alias it, and the last tile writes
  // h_final only after every tile of the row has published.
  float h0[kC] = {};
  if (at.run == 0 && at.active && pr.h0 != nullptr) {
#pragma unroll
    for (int c = 0; c < kC; ++c) h0[c] = pr.h0[at.b * pr.D + at.d0 + c];
  }
  // Phase 1: the run's map.
  const T* const src[3] = {rho, iota, u};
  RunInputs<T, kC, 3> in;
  LoadRun<T, kC, 3>(pr, at, src, in);
  float A[kC], X[kC];
#pragma unroll
  for (int c = 0; c < kC; ++c) {
    A[c] = 1.f;
    X[c] = 0.f;
  }
#pragma unroll
  for (int k = 0; k < kRunLen; ++k) {
    float r[kC], i[kC], uu[kC];
    Unpack(in.v[0][k], r);
    Unpack(in.v[1][k], i);
    Unpack(in.v[2][k], uu);
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      const Gates g = FastGates(r[c], i[c], k2[c], in.restart[k]);
      const float ak = in.valid[k] ? g.a : 1.f, xk = in.valid[k] ? g.m * g.i * uu[c] : 0.f;
      tok_a[k * kC + c][threadIdx.x] = ak;
      tok_x[k * kC + c][threadIdx.x] = xk;
      X[c] = ak * X[c] + xk;
      A[c] *= ak;
    }
  }
#pragma unroll
  for (int c = 0; c < kC; ++c) {
    run_a[at.run][ch + c] = A[c];
    run_x[at.run][ch + c] = X[c];
  }
  __syncthreads();
  const int64_t group = at.tile / kGroup, group_first = group * kGroup;
  // The tile's map (its runs in order): published by warp 0 for the tiles after it, and composed
  // into its group's map by the group's last tile.
  const bool group_last = at.tile == group_first + kGroup - 1 && group + 1 < pr.groups;
  float TA[kC], TX[kC];
  if (at.run == 0 || (at.run == kFoldWarps && group_last)) {
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      TA[c] = 1.f;
      TX[c] = 0.f;
      for (int r = 0; r < kRuns; ++r) {
        TX[c] = run_a[r][ch + c] * TX[c] + run_x[r][ch + c];
        TA[c] *= run_a[r][ch + c];
      }
    }
  }
  if (at.run == 0 && at.tile + 1 < pr.tiles) {
    Publish<kC>(ws.tile_a, ws.tile_x, TileAt(pr, at.b, at.tile, at.d0), at.active, TA, TX,
                ws.tile_flags + at.chain * pr.tiles + at.tile);
  }
  if (at.run < kFoldWarps) {
    FoldSlice<kC>(ws.group_a, ws.group_x, ws.group_flags + at.chain * pr.groups,
                  at.b * pr.groups * pr.D + at.d0, pr.D, 0, 1, group, at.active, part_a, part_x);
  } else {
    FoldSlice<kC>(ws.tile_a, ws.tile_x, ws.tile_flags + at.chain * pr.tiles,
                  at.b * pr.tiles * pr.D + at.d0, pr.D, group_first, 1, at.tile - group_first,
                  at.active, part_a, part_x);
    if (group_last) {  // publish the group's map as soon as its tiles are composed
      SyncListOneWarps();
      if (at.run == kFoldWarps) {
        float MA[kC], MX[kC], GA[kC], GX[kC];
        ComposeParts<kC>(part_a, part_x, kFoldWarps, ch, MA, MX);
#pragma unroll
        for (int c = 0; c < kC; ++c) {
          GA[c] = TA[c] * MA[c];
          GX[c] = TA[c] * MX[c] + TX[c];
        }
        Publish<kC>(ws.group_a, ws.group_x, GroupAt(pr, at.b, group, at.d0), at.active, GA, GX,
                    ws.group_flags + at.chain * pr.groups + group);
      }
    }
  }
  if (at.run == 0) {
#pragma unroll
    for (int c = 0; c < kC; ++c) enter_h0[ch + c] = h0[c];
  }
  __syncthreads();
  // Phase 2: the state entering the tile, then the run's.
  float h[kC], GA[kC], GX[kC], MA[kC], MX[kC];
  ComposeParts<kC>(part_a, part_x, 0, ch, GA, GX);
  ComposeParts<kC>(part_a, part_x, kFoldWarps, ch, MA, MX);
#pragma unroll
  for (int c = 0; c < kC; ++c) h[c] = MA[c] * (GA[c] * enter_h0[ch + c] + GX[c]) + MX[c];
  if (at.run == 0 && at.active) StoreF<kC>(ws.states + StateAt(pr, at.b, at.tile, at.d0), h);
#pragma unroll
  for (int c = 0; c < kC; ++c) {
    for (int r = 0; r < at.run; ++r) h[c] = run_a[r][ch + c] * h[c] + run_x[r][ch + c];
  }
  const int64_t base = (at.b * pr.T + at.tile * kCudaChunk + at.run * kRunLen) * pr.D + at.d0;
#pragma unroll
  for (int k = 0; k < kRunLen; ++k) {
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      h[c] = tok_a[k * kC + c][threadIdx.x] * h[c] + tok_x[k * kC + c][threadIdx.x];
    }
    if (h_out != nullptr && in.valid[k]) StoreC<T, kC>(h_out, base + k * pr.D, h);
  }
  if (at.run == kRuns - 1 && at.tile == pr.tiles - 1 && at.active) {
    StoreF<kC>(ws.states + StateAt(pr, at.b, pr.tiles, at.d0), h);
    if (h_final != nullptr) StoreF<kC>(h_final + at.b * pr.D + at.d0, h);
  }
}

// The backward's per-token values of each thread, kept from phase 1 for phase 2 in dynamic shared
// memory (more than the 48 KB of static shared memory; registers stay free for more blocks):
// [field][token · kC + channel][thread], consecutive threads in consecutive banks.
enum TokenField { kTokA, kTokX, kTokR, kTokI, kTokM, kTokSqrtGrad, kTokenFields };
template <int kC>
constexpr size_t BackwardDynamicSmem() {
  return sizeof(float) * kTokenFields * kRunLen * kC * kThreads;
}
template <int kC>
__device__ __forceinline__ float& Tok(float* tok, int field, int k, int c) {
  return tok[((field * kRunLen + k) * kC + c) * kThreads + threadIdx.x];
}

// ---- Backward: the same scan in reverse time for the flow, from dh_final. Each tile's flow map
// f ↦ A f + F (f leaving the tile on its left from f entering on its right) is published; the
// first tile of a group publishes the group's. Writes du, dρ, dι, dh0 (the first tile) and a dp
// partial per tile.
template <typename T, int kC>
__global__ void __launch_bounds__(kThreads, 2)
    BackwardKernel(Problem pr, Scratch ws, const T* __restrict__ u, const T* __restrict__ rho,
                   const T* __restrict__ iota, const T* __restrict__ dh, const float* dh_final,
                   T* __restrict__ du, T* __restrict__ drho, T* __restrict__ diota,
                   float* __restrict__ dp_partials, float* dh0) {
  constexpr int kCh = kLanes * kC;
  __shared__ float run_a[kRuns][kCh], run_x[kRuns][kCh], run_f[kRuns][kCh];
  __shared__ float part_a[kRuns][kCh], part_f[kRuns][kCh], enter_flow[kCh], enter_h[kCh];
  extern __shared__ float tok[];  // BackwardDynamicSmem<kC>()
  const Place<kC> at = Locate<kC>(pr, ClaimOrder(ws.counter), /*reverse=*/true);
  const int ch = at.lane * kC;
  float k2[kC], rho_scale[kC], dp_scale[kC];
  LoadChannelConstants<kC>(pr, ws, at, kDecayLog2Scale, k2);
  LoadChannelConstants<kC>(pr, ws, at, kRhoScale, rho_scale);
  LoadChannelConstants<kC>(pr, ws, at, kDpScale, dp_scale);
  float flow_final[kC] = {};  // read first: dh0 may alias dh_final
  if (at.run == 0 && at.active && dh_final != nullptr) {
#pragma unroll
    for (int c = 0; c < kC; ++c) flow_final[c] = dh_final[at.b * pr.D + at.d0 + c];
  }
  // Phase 1: the run's state map (to recompute h) and flow map.
  const T* const src[4] = {rho, iota, u, dh};
  RunInputs<T, kC, 4> in;
  LoadRun<T, kC, 4>(pr, at, src, in);
  float A[kC], X[kC], F[kC];
#pragma unroll
  for (int c = 0; c < kC; ++c) {
    A[c] = 1.f;
    X[c] = 0.f;
    F[c] = 0.f;
  }
#pragma unroll
  for (int k = 0; k < kRunLen; ++k) {
    float r[kC], i[kC], uu[kC];
    Unpack(in.v[0][k], r);
    Unpack(in.v[1][k], i);
    Unpack(in.v[2][k], uu);
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      const Gates g = FastGates(r[c], i[c], k2[c], in.restart[k]);
      const float ak = in.valid[k] ? g.a : 1.f, xk = in.valid[k] ? g.m * g.i * uu[c] : 0.f;
      Tok<kC>(tok, kTokA, k, c) = ak;
      Tok<kC>(tok, kTokX, k, c) = xk;
      Tok<kC>(tok, kTokR, k, c) = g.r;
      Tok<kC>(tok, kTokI, k, c) = g.i;
      Tok<kC>(tok, kTokM, k, c) = g.m;
      Tok<kC>(tok, kTokSqrtGrad, k, c) = g.sqrt_grad;
      X[c] = ak * X[c] + xk;
      A[c] *= ak;
    }
  }
#pragma unroll
  for (int k = kRunLen - 1; k >= 0; --k) {
    float g[kC];
    Unpack(in.v[3][k], g);
#pragma unroll
    for (int c = 0; c < kC; ++c) F[c] = Tok<kC>(tok, kTokA, k, c) * (g[c] + F[c]);
  }
#pragma unroll
  for (int c = 0; c < kC; ++c) {
    run_a[at.run][ch + c] = A[c];
    run_x[at.run][ch + c] = X[c];
    run_f[at.run][ch + c] = F[c];
  }
  __syncthreads();
  const int64_t group = at.tile / kGroup, group_first = group * kGroup;
  const int64_t group_end = min(pr.tiles, group_first + kGroup);
  // The tile's flow map (its runs from the right): published by warp 0 for the tiles before it,
  // and composed into its group's map by the group's first tile.
  const bool group_first_tile = at.tile == group_first && group > 0;
  float TA[kC], TF[kC];
  if (at.run == 0 || (at.run == kFoldWarps && group_first_tile)) {
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      TA[c] = 1.f;
      TF[c] = 0.f;
      for (int r = kRuns - 1; r >= 0; --r) {
        TF[c] = run_a[r][ch + c] * TF[c] + run_f[r][ch + c];
        TA[c] *= run_a[r][ch + c];
      }
    }
  }
  if (at.run == 0 && at.tile > 0) {
    Publish<kC>(ws.tile_a, ws.tile_x, TileAt(pr, at.b, at.tile, at.d0), at.active, TA, TF,
                ws.tile_flags + at.chain * pr.tiles + at.tile);
  }
  if (at.run < kFoldWarps) {
    FoldSlice<kC>(ws.group_a, ws.group_x, ws.group_flags + at.chain * pr.groups,
                  at.b * pr.groups * pr.D + at.d0, pr.D, pr.groups - 1, -1, pr.groups - 1 - group,
                  at.active, part_a, part_f);
  } else {
    FoldSlice<kC>(ws.tile_a, ws.tile_x, ws.tile_flags + at.chain * pr.tiles,
                  at.b * pr.tiles * pr.D + at.d0, pr.D, group_end - 1, -1, group_end - 1 - at.tile,
                  at.active, part_a, part_f);
    if (group_first_tile) {
      SyncListOneWarps();
      if (at.run == kFoldWarps) {
        float MA[kC], MF[kC], GA[kC], GF[kC];
        ComposeParts<kC>(part_a, part_f, kFoldWarps, ch, MA, MF);
#pragma unroll
        for (int c = 0; c < kC; ++c) {
          GA[c] = TA[c] * MA[c];
          GF[c] = TA[c] * MF[c] + TF[c];
        }
        Publish<kC>(ws.group_a, ws.group_x, GroupAt(pr, at.b, group, at.d0), at.active, GA, GF,
                    ws.group_flags + at.chain * pr.groups + group);
      }
    }
  }
  if (at.run == 0) {
    float s[kC] = {};
    if (at.active) LoadL2<kC>(ws.states + StateAt(pr, at.b, at.tile, at.d0), s);
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      enter_h[ch + c] = s[c];
      enter_flow[ch + c] = flow_final[c];
    }
  }
  __syncthreads();
  // Phase 2: the flow entering the run from its right, the state entering it from its left.
  float f[kC], h[kC], GA[kC], GF[kC], MA[kC], MF[kC];
  ComposeParts<kC>(part_a, part_f, 0, ch, GA, GF);
  ComposeParts<kC>(part_a, part_f, kFoldWarps, ch, MA, MF);
#pragma unroll
  for (int c = 0; c < kC; ++c) {
    f[c] = MA[c] * (GA[c] * enter_flow[ch + c] + GF[c]) + MF[c];
    for (int r = kRuns - 1; r > at.run; --r) f[c] = run_a[r][ch + c] * f[c] + run_f[r][ch + c];
    h[c] = at.active ? enter_h[ch + c] : 0.f;
    for (int r = 0; r < at.run; ++r) h[c] = run_a[r][ch + c] * h[c] + run_x[r][ch + c];
  }
  // h before each token, in place of the token's input term (read back in reverse order).
#pragma unroll
  for (int k = 0; k < kRunLen; ++k) {
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      const float h_prev = h[c];
      h[c] = Tok<kC>(tok, kTokA, k, c) * h[c] + Tok<kC>(tok, kTokX, k, c);
      Tok<kC>(tok, kTokX, k, c) = h_prev;
    }
  }
  float dp[kC] = {};
  const int64_t base = (at.b * pr.T + at.tile * kCudaChunk + at.run * kRunLen) * pr.D + at.d0;
#pragma unroll
  for (int k = kRunLen - 1; k >= 0; --k) {
    float uu[kC], g[kC], out_u[kC], out_r[kC], out_i[kC];
    Unpack(in.v[2][k], uu);
    Unpack(in.v[3][k], g);
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      const float a = Tok<kC>(tok, kTokA, k, c), r = Tok<kC>(tok, kTokR, k, c);
      const float i = Tok<kC>(tok, kTokI, k, c);
      const float dh_t = g[c] + f[c];
      const float dh_m = dh_t * Tok<kC>(tok, kTokM, k, c);
      out_r[c] = 0.f;
      if (in.valid[k] && !in.restart[k]) {  // ℓ is constant at a restart: no gradient to ρ, p
        const float d_a = dh_t * Tok<kC>(tok, kTokX, k, c) -
                          2.f * a * (dh_t * i * uu[c]) * Tok<kC>(tok, kTokSqrtGrad, k, c);
        const float d_log_a = a * d_a;
        out_r[c] = rho_scale[c] * d_log_a * r * (1.f - r);
        dp[c] += r * dp_scale[c] * d_log_a;
      }
      out_u[c] = dh_m * i;
      out_i[c] = dh_m * uu[c] * i * (1.f - i);
      f[c] = a * dh_t;
    }
    if (in.valid[k]) {
      StoreC<T, kC>(du, base + k * pr.D, out_u);
      StoreC<T, kC>(drho, base + k * pr.D, out_r);
      StoreC<T, kC>(diota, base + k * pr.D, out_i);
    }
  }
  if (at.tile == 0 && at.run == 0 && at.active && dh0 != nullptr) {
    StoreF<kC>(dh0 + at.b * pr.D + at.d0, f);
  }
  // dp over the tile's runs, in run order.
  __syncthreads();
#pragma unroll
  for (int c = 0; c < kC; ++c) run_a[at.run][ch + c] = dp[c];
  __syncthreads();
  if (at.run == 0 && at.active) {
    float sum[kC] = {};
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      for (int r = 0; r < kRuns; ++r) sum[c] += run_a[r][ch + c];
    }
    StoreF<kC>(dp_partials + TileAt(pr, at.b, at.tile, at.d0), sum);
  }
}

// ---- Host side.

int64_t Groups(int64_t tiles) { return (tiles + kGroup - 1) / kGroup; }

Problem ToProblem(const DeviceProblem& p, int channels_per_thread) {
  Problem pr{};
  pr.B = p.batch;
  pr.T = p.seq_len;
  pr.D = p.width;
  pr.tiles = p.Chunks();
  pr.groups = Groups(pr.tiles);
  const int64_t block_channels = int64_t{kLanes} * channels_per_thread;
  pr.cgroups = (p.width + block_channels - 1) / block_channels;
  pr.chains = pr.B * pr.cgroups;
  pr.p = p.p;
  pr.h0 = p.h0;
  pr.started = p.started;
  pr.doc_start = p.doc_start;
  return pr;
}

// The most chains any launch uses (one channel per thread).
int64_t MaxChains(const DeviceProblem& p) { return p.batch * ((p.width + kLanes - 1) / kLanes); }

// Flag ints: the counter, then the tile and group flags of the most chains.
int64_t FlagInts(const DeviceProblem& p) {
  return 1 + MaxChains(p) * (p.Chunks() + Groups(p.Chunks()));
}

Scratch Carve(const DeviceProblem& p, void* base) {
  const int64_t tiles = p.Chunks(), groups = Groups(tiles), bd = p.batch * p.width;
  float* f = static_cast<float*>(base);
  Scratch s{};
  s.states = f;
  s.tile_a = s.states + bd * (tiles + 1);
  s.tile_x = s.tile_a + bd * tiles;
  s.group_a = s.tile_x + bd * tiles;
  s.group_x = s.group_a + bd * groups;
  s.channel = s.group_x + bd * groups;
  s.counter = reinterpret_cast<int*>(s.channel + kChannelConstants * p.width);
  s.tile_flags = s.counter + 1;
  s.group_flags = s.tile_flags + MaxChains(p) * tiles;
  return s;
}

// Zeroes the counter and flags of one launch.
cudaError_t ResetFlags(const DeviceProblem& p, const Scratch& ws, cudaStream_t s) {
  return cudaMemsetAsync(ws.counter, 0, sizeof(int) * static_cast<size_t>(FlagInts(p)), s);
}

// Resets the flags and computes the channel constants: the start of every launch.
cudaError_t Prepare(const DeviceProblem& p, const Scratch& ws, cudaStream_t s) {
  if (cudaError_t e = ResetFlags(p, ws, s); e != cudaSuccess) return e;
  constexpr int kConstantThreads = 128;
  ChannelConstantsKernel<<<static_cast<unsigned>((p.width + kConstantThreads - 1) /
                                                 kConstantThreads),
                           kConstantThreads, 0, s>>>(p.width, p.p, ws.channel);
  return cudaGetLastError();
}

// Lets `kernel` take `bytes` of dynamic shared memory (beyond the default 48 KB).
template <typename Kernel>
cudaError_t AllowDynamicSmem(Kernel kernel, size_t bytes) {
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              static_cast<int>(bytes));
}

unsigned Blocks(const Problem& pr) { return static_cast<unsigned>(pr.chains * pr.tiles); }

template <typename T>
cudaError_t LaunchForward(const DeviceProblem& p, T* h, float* h_final, const Scratch& ws,
                          cudaStream_t s) {
  if (cudaError_t e = Prepare(p, ws, s); e != cudaSuccess) return e;
  const T* u = static_cast<const T*>(p.u);
  const T* rho = static_cast<const T*>(p.rho);
  const T* iota = static_cast<const T*>(p.iota);
  if (PairedChannels(p.width, sizeof(T), {u, rho, iota, h})) {
    const Problem pr = ToProblem(p, 2);
    ForwardKernel<T, 2><<<Blocks(pr), kThreads, 0, s>>>(pr, ws, u, rho, iota, h, h_final);
  } else {
    const Problem pr = ToProblem(p, 1);
    ForwardKernel<T, 1><<<Blocks(pr), kThreads, 0, s>>>(pr, ws, u, rho, iota, h, h_final);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t BackwardTyped(const DeviceProblem& p, const T* dh, const float* dh_final, T* du,
                          T* drho, T* diota, float* dp, float* dh0, const Scratch& ws,
                          bool carried_valid, float* dp_partials, cudaStream_t s) {
  // A forward run here has computed the channel constants: the backward needs only fresh flags.
  cudaError_t status =
      carried_valid ? Prepare(p, ws, s) : LaunchForward<T>(p, nullptr, nullptr, ws, s);
  if (status == cudaSuccess && !carried_valid) status = ResetFlags(p, ws, s);
  if (status != cudaSuccess) return status;
  const T* u = static_cast<const T*>(p.u);
  const T* rho = static_cast<const T*>(p.rho);
  const T* iota = static_cast<const T*>(p.iota);
  if (PairedChannels(p.width, sizeof(T), {u, rho, iota, dh, du, drho, diota})) {
    const Problem pr = ToProblem(p, 2);
    if (cudaError_t e = AllowDynamicSmem(BackwardKernel<T, 2>, BackwardDynamicSmem<2>());
        e != cudaSuccess) {
      return e;
    }
    BackwardKernel<T, 2><<<Blocks(pr), kThreads, BackwardDynamicSmem<2>(), s>>>(
        pr, ws, u, rho, iota, dh, dh_final, du, drho, diota, dp_partials, dh0);
  } else {
    const Problem pr = ToProblem(p, 1);
    if (cudaError_t e = AllowDynamicSmem(BackwardKernel<T, 1>, BackwardDynamicSmem<1>());
        e != cudaSuccess) {
      return e;
    }
    BackwardKernel<T, 1><<<Blocks(pr), kThreads, BackwardDynamicSmem<1>(), s>>>(
        pr, ws, u, rho, iota, dh, dh_final, du, drho, diota, dp_partials, dh0);
  }
  // dp += Σ over (row, tile) of the partials, in a fixed order (ordered_sum.cuh).
  return ::mesa::kernels::cuda::LaunchSumPartsInOrder<8, /*kAccumulate=*/true>(
      p.batch * p.Chunks(), p.width, dp_partials, dp, s);
}

}  // namespace

size_t WorkspaceBytes(const DeviceProblem& p) {
  const int64_t tiles = p.Chunks(), bd = p.batch * p.width;
  const int64_t floats =
      bd * (tiles + 1) + 2 * bd * tiles + 2 * bd * Groups(tiles) + kChannelConstants * p.width;
  return sizeof(float) * static_cast<size_t>(floats) +
         sizeof(int) * static_cast<size_t>(FlagInts(p));
}

size_t DpPartialBytes(const DeviceProblem& p) {
  return sizeof(float) * static_cast<size_t>(p.batch * p.Chunks() * p.width);
}

template <typename T>
cudaError_t Forward(const DeviceProblem& p, T* h, float* h_final, void* workspace, cudaStream_t s) {
  return LaunchForward(p, h, h_final, Carve(p, workspace), s);
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

}  // namespace mesa::kernels::rglru::cuda::chained
