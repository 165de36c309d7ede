// Sequential state scans over chunks (docs/math.md §2.2 step 1 and the reverse dS pass of §3).
// One CTA per (sequence, head, which state); DP/16 warps, warp w owns state rows 16w..16w+15 as
// fp32 accumulators that persist across chunks. Per chunk:
//   forward:  store S (fp16, chunk-start state), then S = e^{B} S + A^T Bm with
//             H: A = diag(e^{B-b} beta) K, Bm = K;   G: A = V, Bm = diag(e^{B-b} beta) K
//   backward: store dS (fp16, gradient w.r.t. the state after the chunk), then
//             dS = e^{B} dS + A^T Q*  with  G: A = diag(e^b) E / s,  H: A = -diag(e^b) E*/s.
#include <algorithm>

#include "kernels/common/cuda/tile_staging.cuh"
#include "kernels/mesa/cuda/mesa_kernels.h"

namespace mesa::kernels::cuda {
namespace {

template <int DP>
struct StateSmem {
  static constexpr int S = kStride<DP>;
  static constexpr int kA = 0;
  static constexpr int kB = kA + kChunk * S * 2;
  static constexpr int kBytes = kB + kChunk * S * 2;
};

// acc (rows 16w.., all DP columns) = decay * acc + A^T B over the 64 chunk rows.
template <int DP>
__device__ __forceinline__ void DecayAndAccumulate(float acc[DP / 8][4], float decay,
                                                   const __half* s_a, const __half* s_b, int warp,
                                                   int lane) {
  constexpr int S = kStride<DP>;
#pragma unroll
  for (int n = 0; n < DP / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[n][e] *= decay;
#pragma unroll
  for (int ks = 0; ks < kChunk / 16; ++ks) {
    uint32_t a[4];
    LoadA_KM(a, s_a, S, warp * 16, ks * 16, lane);
#pragma unroll
    for (int np = 0; np < DP / 16; ++np) {
      uint32_t b[4];
      LoadB_KN(b, s_b, S, ks * 16, np * 16, lane);
      Mma16816(acc[2 * np], a, b[0], b[1]);
      Mma16816(acc[2 * np + 1], a, b[2], b[3]);
    }
  }
}

template <int DP>
__device__ __forceinline__ void StoreStateHalf(const float acc[DP / 8][4], __half* dst, int warp,
                                               int lane) {
  const int g = lane >> 2, c = lane & 3;
#pragma unroll
  for (int n = 0; n < DP / 8; ++n) {
    const int col = n * 8 + 2 * c;
    Store2(dst + (warp * 16 + g) * DP + col, acc[n][0], acc[n][1]);
    Store2(dst + (warp * 16 + g + 8) * DP + col, acc[n][2], acc[n][3]);
  }
}

// fp32 [D][D] <-> accumulators (only the unpadded D x D block exists in memory).
template <int DP>
__device__ __forceinline__ void LoadStateF32(float acc[DP / 8][4], const float* src, int D, float s,
                                             int warp, int lane) {
  const int g = lane >> 2, c = lane & 3;
#pragma unroll
  for (int n = 0; n < DP / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = warp * 16 + g + (e >> 1) * 8, col = n * 8 + 2 * c + (e & 1);
      acc[n][e] = (src != nullptr && row < D && col < D) ? src[row * D + col] * s : 0.f;
    }
  }
}

template <int DP>
__device__ __forceinline__ float DotStateF32(const float acc[DP / 8][4], const float* src, int D,
                                             int warp, int lane) {
  const int g = lane >> 2, c = lane & 3;
  float sum = 0.f;
#pragma unroll
  for (int n = 0; n < DP / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = warp * 16 + g + (e >> 1) * 8, col = n * 8 + 2 * c + (e & 1);
      if (row < D && col < D) sum += acc[n][e] * src[row * D + col];
    }
  }
  return sum;
}

template <int DP>
__device__ __forceinline__ void StoreStateF32(const float acc[DP / 8][4], float* dst, int D,
                                              float s, int warp, int lane) {
  const int g = lane >> 2, c = lane & 3;
#pragma unroll
  for (int n = 0; n < DP / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = warp * 16 + g + (e >> 1) * 8, col = n * 8 + 2 * c + (e & 1);
      if (row < D && col < D) dst[row * D + col] = acc[n][e] * s;
    }
  }
}

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// ---------------------------------------------------------------------------------------------
// The scans issue a tile's loads all at once (raw bits kept in registers until the gates are
// known), the gates with them, and compute the prefix by a warp scan: 2 round trips per chunk (1
// for the forward H scan, whose two tiles are both K), where a loop over one tile at a time made ~9
// dependent global round trips (two gate loads, 4 + 4 token-tile load->store steps) plus a 64-step
// serial prefix sum (before 2026-11-21, NOTES.md). <= 128 registers so that 2 CTAs/SM keep all
// (sequence, head, state) CTAs resident in one wave.
template <int DP, typename T>
struct RawTile {
  static constexpr int kThreads = DP * 2;
  static constexpr int kGroups = DP / 8;
  static constexpr int kIters = kChunk * kGroups / kThreads;
  static constexpr int kVecs = sizeof(T) / 2;  // uint4 per 8 elements
  uint4 u[kIters][kVecs];
};

template <int DP, typename T>
__device__ __forceinline__ void LoadRaw(RawTile<DP, T>& rt, const T* src, int64_t tok0, int len,
                                        int heads, int h, int D) {
  using R = RawTile<DP, T>;
#pragma unroll
  for (int j = 0; j < R::kIters; ++j) {
    const int idx = static_cast<int>(threadIdx.x) + j * R::kThreads;
    const int r = idx / R::kGroups, g = idx % R::kGroups;
    if (r < len && g * 8 < D) {
      const uint4* p = reinterpret_cast<const uint4*>(
          src + ((tok0 + r) * heads + h) * static_cast<int64_t>(D) + g * 8);
#pragma unroll
      for (int v = 0; v < R::kVecs; ++v) rt.u[j][v] = p[v];
    } else {
#pragma unroll
      for (int v = 0; v < R::kVecs; ++v) rt.u[j][v] = make_uint4(0u, 0u, 0u, 0u);
    }
  }
}

// tile[r][:] = fp16(raw * scalar * (row_scale ? row_scale[r] : 1)); zero rows/columns stay zero.
template <int DP, typename T>
__device__ __forceinline__ void StoreRaw(__half* tile, const RawTile<DP, T>& rt, float scalar,
                                         const float* row_scale) {
  using R = RawTile<DP, T>;
#pragma unroll
  for (int j = 0; j < R::kIters; ++j) {
    const int idx = static_cast<int>(threadIdx.x) + j * R::kThreads;
    const int r = idx / R::kGroups, g = idx % R::kGroups;
    float f[8];
    Load8(reinterpret_cast<const T*>(&rt.u[j][0]), f);
    const float s = scalar * (row_scale ? row_scale[r] : 1.f);
    uint4 u;
    u.x = PackHalf2(f[0] * s, f[1] * s);
    u.y = PackHalf2(f[2] * s, f[3] * s);
    u.z = PackHalf2(f[4] * s, f[5] * s);
    u.w = PackHalf2(f[6] * s, f[7] * s);
    *reinterpret_cast<uint4*>(tile + r * kStride<DP> + g * 8) = u;
  }
}

// Warp 0: loads of the chunk's log gates (and beta), two tokens per lane.
struct GateRegs {
  float lg0, lg1, be0, be1;
};
__device__ __forceinline__ void LoadGateRegs(GateRegs& gr, const float* log_gamma,
                                             const float* beta, int64_t tok0, int len, int heads,
                                             int h) {
  const int t0 = 2 * static_cast<int>(threadIdx.x), t1 = t0 + 1;
  gr.lg0 = t0 < len ? log_gamma[(tok0 + t0) * heads + h] : 0.f;
  gr.lg1 = t1 < len ? log_gamma[(tok0 + t1) * heads + h] : 0.f;
  gr.be0 = (beta != nullptr && t0 < len) ? beta[(tok0 + t0) * heads + h] : 0.f;
  gr.be1 = (beta != nullptr && t1 < len) ? beta[(tok0 + t1) * heads + h] : 0.f;
}
// Warp 0: b2[t] = log2(e) sum_{s<=t} lg_s (warp scan), scale[t] = forward ? e^{b_last - b_t} beta_t
// : e^{b_t}.
__device__ __forceinline__ void ScanGates(const GateRegs& gr, float* b2, float* scale,
                                          bool forward) {
  const int lane = static_cast<int>(threadIdx.x);
  const float pair = gr.lg0 + gr.lg1;
  float incl = pair;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const float n = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += n;
  }
  const float b0 = (incl - pair + gr.lg0) * kLog2e, b1 = incl * kLog2e;
  const float last = __shfl_sync(0xffffffffu, incl, 31) * kLog2e;
  b2[2 * lane] = b0;
  b2[2 * lane + 1] = b1;
  if (forward) {
    scale[2 * lane] = exp2f(last - b0) * gr.be0;
    scale[2 * lane + 1] = exp2f(last - b1) * gr.be1;
  } else {
    scale[2 * lane] = exp2f(b0);
    scale[2 * lane + 1] = exp2f(b1);
  }
}

// Which part of a segmented scan a launch runs (PlanStateScan, mesa_kernels.h).
enum class ScanPass { kWhole, kLocal, kRescan };

// Where a segment's fp32 state (DP x DP) and its log2 decay live in the scratch.
struct SegmentScratch {
  float* states;       // [seq][H][2][segments][DP][DP]
  float* log2_decay;   // [seq][H][segments]
  int seg_chunks = 0;  // chunks per segment
  int segments = 1;
  __device__ float* State(size_t sh, int which, int seg, int dp) const {
    return states + ((sh * 2 + which) * segments + seg) * static_cast<size_t>(dp) * dp;
  }
};

// The chunks [begin, end) a CTA scans: all of its sequence's, or those of segment `seg` (false:
// nothing to do — past the sequence's end, or the last segment's local pass, never needed).
__device__ __forceinline__ bool SegmentChunks(ScanPass pass, const SegmentScratch& sg, int seg,
                                              int num_chunks, int& begin, int& end) {
  begin = 0;
  end = num_chunks;
  if (pass == ScanPass::kWhole) return true;
  begin = seg * sg.seg_chunks;
  end = min(num_chunks, begin + sg.seg_chunks);
  // An empty sequence's first segment still runs its rescan: it writes the final state (gradient).
  return begin < num_chunks || (seg == 0 && pass == ScanPass::kRescan);
}

// The local pass's result: the segment's contribution (fp32) and its log2 decay (the same for
// both states; the H CTA writes it).
template <int DP>
__device__ __forceinline__ void StoreLocal(const float acc[DP / 8][4], const SegmentScratch& sg,
                                           size_t sh, int which, int seg, float log2_decay,
                                           int warp, int lane) {
  StoreStateF32<DP>(acc, sg.State(sh, which, seg, DP), DP, 1.f, warp, lane);
  if (threadIdx.x == 0 && which == 0) sg.log2_decay[sh * sg.segments + seg] = log2_decay;
}

template <int DP, typename T>
__global__ void __launch_bounds__(DP * 2, 2)
    StateForwardKernel(KernelProblem prob, StateForwardArgs args, SegmentScratch sg,
                       ScanPass pass) {
  using L = StateSmem<DP>;
  extern __shared__ __align__(16) unsigned char smem[];
  __half* s_a = reinterpret_cast<__half*>(smem + L::kA);
  __half* s_b = reinterpret_cast<__half*>(smem + L::kB);
  __shared__ float s_b2[kChunk], s_scale[kChunk];
  const int seq = blockIdx.x, h = blockIdx.y;
  const int which = blockIdx.z & 1, seg = blockIdx.z >> 1;
  const bool is_g = which == 1;
  const int H = prob.heads, D = prob.head_dim;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int4 sinfo = prob.seqs[seq];
  const size_t state_elems = static_cast<size_t>(D) * D;
  const size_t sh = static_cast<size_t>(seq) * H + h;
  int begin, end;
  if (!SegmentChunks(pass, sg, seg, sinfo.w, begin, end)) return;
  // The last segment's contribution flows into no later segment: its local pass is not needed.
  if (pass == ScanPass::kLocal && end == sinfo.w) return;

  float acc[DP / 8][4];
  if (pass == ScanPass::kWhole) {
    LoadStateF32<DP>(acc,
                     is_g ? (args.g0 ? args.g0 + sh * state_elems : nullptr)
                          : (args.h0 ? args.h0 + sh * state_elems : nullptr),
                     D, 1.f, warp, lane);
  } else {  // kLocal: from zero; kRescan: from the state the combine pass left
    LoadStateF32<DP>(acc, pass == ScanPass::kRescan ? sg.State(sh, which, seg, DP) : nullptr, DP,
                     1.f, warp, lane);
  }
  __half* out = is_g ? args.gc : args.hc;
  const T* k = static_cast<const T*>(args.k);
  float log2_decay = 0.f;
  for (int ci = begin; ci < end; ++ci) {
    const int chunk = sinfo.z + ci;
    const int4 info = prob.chunks[chunk];
    if (pass != ScanPass::kLocal) {
      StoreStateHalf<DP>(acc, out + (static_cast<size_t>(chunk) * H + h) * DP * DP, warp, lane);
    }
    GateRegs gr;
    if (warp == 0) LoadGateRegs(gr, args.log_gamma, args.beta, info.y, info.z, H, h);
    RawTile<DP, T> rt;
    LoadRaw<DP, T>(rt, k, info.y, info.z, H, h,
                   D);  // K (both tiles of the H scan, B of the G scan)
    __syncthreads();    // previous chunk's tiles and gates are no longer read
    if (warp == 0) ScanGates(gr, s_b2, s_scale, true);
    __syncthreads();
    if (is_g) {
      StoreRaw<DP, T>(s_b, rt, 1.f, s_scale);
      LoadRaw<DP, T>(rt, static_cast<const T*>(args.v), info.y, info.z, H, h, D);
      StoreRaw<DP, T>(s_a, rt, 1.f, nullptr);
    } else {
      StoreRaw<DP, T>(s_a, rt, 1.f, s_scale);
      StoreRaw<DP, T>(s_b, rt, 1.f, nullptr);
    }
    __syncthreads();
    log2_decay += s_b2[kChunk - 1];
    DecayAndAccumulate<DP>(acc, exp2f(s_b2[kChunk - 1]), s_a, s_b, warp, lane);
  }
  if (pass == ScanPass::kLocal) {
    StoreLocal<DP>(acc, sg, sh, which, seg, log2_decay, warp, lane);
    return;
  }
  if (end != sinfo.w) return;  // a middle segment: the final state is the last one's
  float* fin = is_g ? args.g_final : args.h_final;
  if (fin != nullptr) StoreStateF32<DP>(acc, fin + sh * state_elems, D, 1.f, warp, lane);
  const float* dfin = is_g ? args.d_final_g : args.d_final_h;
  if (dfin != nullptr && args.r_final != nullptr) {
    const float part = WarpSum(DotStateF32<DP>(acc, dfin + sh * state_elems, D, warp, lane));
    // One slot per state and warp (kRFinalSlots per (seq, head)), summed in order by the gate
    // scan: no float atomics.
    static_assert(2 * (DP * 2 / 32) <= kRFinalSlots);
    if (lane == 0) args.r_final[sh * kRFinalSlots + which * (DP * 2 / 32) + warp] = part;
  }
}

template <int DP, typename T>
__global__ void __launch_bounds__(DP * 2, 2)
    StateBackwardKernel(KernelProblem prob, StateBackwardArgs args, SegmentScratch sg,
                        ScanPass pass) {
  using L = StateSmem<DP>;
  extern __shared__ __align__(16) unsigned char smem[];
  __half* s_a = reinterpret_cast<__half*>(smem + L::kA);
  __half* s_b = reinterpret_cast<__half*>(smem + L::kB);
  __shared__ float s_b2[kChunk], s_scale[kChunk];
  const int seq = blockIdx.x, h = blockIdx.y;
  const int which = blockIdx.z & 1, seg = blockIdx.z >> 1;
  const bool is_g = which == 1;
  const int H = prob.heads, D = prob.head_dim;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int4 sinfo = prob.seqs[seq];
  const size_t state_elems = static_cast<size_t>(D) * D;
  const size_t sh = static_cast<size_t>(seq) * H + h;
  const float inv_s = 1.f / args.scale[sh];
  int begin, end;
  if (!SegmentChunks(pass, sg, seg, sinfo.w, begin, end)) return;
  // The reverse scan flows from the last chunk to the first: the first segment's contribution
  // reaches no earlier segment, so its local pass is not needed.
  if (pass == ScanPass::kLocal && begin == 0) return;

  float acc[DP / 8][4];
  const float* dfin = is_g ? args.d_final_g : args.d_final_h;
  if (pass == ScanPass::kWhole) {
    LoadStateF32<DP>(acc, dfin ? dfin + sh * state_elems : nullptr, D, inv_s, warp, lane);
  } else {
    LoadStateF32<DP>(acc, pass == ScanPass::kRescan ? sg.State(sh, which, seg, DP) : nullptr, DP,
                     1.f, warp, lane);
  }
  __half* out = is_g ? args.dgc : args.dhc;
  float log2_decay = 0.f;
  for (int ci = end - 1; ci >= begin; --ci) {
    const int chunk = sinfo.z + ci;
    const int4 info = prob.chunks[chunk];
    if (pass != ScanPass::kLocal) {
      StoreStateHalf<DP>(acc, out + (static_cast<size_t>(chunk) * H + h) * DP * DP, warp, lane);
    }
    GateRegs gr;
    if (warp == 0) LoadGateRegs(gr, args.log_gamma, nullptr, info.y, info.z, H, h);
    {
      RawTile<DP, float> rq;
      LoadRaw<DP, float>(rq, args.q_star, info.y, info.z, H, h, D);
      __syncthreads();  // previous chunk's tiles and gates are no longer read
      if (warp == 0) ScanGates(gr, s_b2, s_scale, false);
      StoreRaw<DP, float>(s_b, rq, 1.f, nullptr);
    }
    __syncthreads();
    if (is_g) {
      RawTile<DP, T> rt;
      LoadRaw<DP, T>(rt, static_cast<const T*>(args.d_o), info.y, info.z, H, h, D);
      StoreRaw<DP, T>(s_a, rt, inv_s, s_scale);
    } else {
      RawTile<DP, __half> rt;
      LoadRaw<DP, __half>(rt, args.estar16, info.y, info.z, H, h, D);
      StoreRaw<DP, __half>(s_a, rt, -1.f, s_scale);
    }
    __syncthreads();
    log2_decay += s_b2[kChunk - 1];
    DecayAndAccumulate<DP>(acc, exp2f(s_b2[kChunk - 1]), s_a, s_b, warp, lane);
  }
  if (pass == ScanPass::kLocal) {
    StoreLocal<DP>(acc, sg, sh, which, seg, log2_decay, warp, lane);
    return;
  }
  if (begin != 0) return;  // a later segment: the initial state's gradient is the first one's
  float* d0 = is_g ? args.dg0 : args.dh0;
  if (d0 != nullptr) StoreStateF32<DP>(acc, d0 + sh * state_elems, D, args.scale[sh], warp, lane);
}

// The combine pass: per (sequence, head, state) and state element, the state entering each
// segment, written over the segment's local contribution. `forward`: segments in order from the
// initial state `init` (may be null: zero); else in reverse from `init` (the final-state gradient,
// may be null) times `init_scale` (1 / the backward's do scale).
__global__ void CombineSegmentsKernel(KernelProblem prob, SegmentScratch sg, const float* init_h,
                                      const float* init_g, const float* scale, bool forward) {
  const int pair = blockIdx.x;  // (seq * H + h) * 2 + which
  const int which = pair & 1;
  const size_t sh = static_cast<size_t>(pair >> 1);
  const int seq = static_cast<int>(sh / prob.heads), DP = prob.padded_dim, D = prob.head_dim;
  const int e = blockIdx.y * blockDim.x + threadIdx.x;
  if (e >= DP * DP) return;
  const int row = e / DP, col = e % DP;
  const int n = max(1, (prob.seqs[seq].w + sg.seg_chunks - 1) / sg.seg_chunks);
  const float* init = which ? init_g : init_h;
  float run = (init != nullptr && row < D && col < D)
                  ? init[sh * D * D + row * D + col] * (scale ? 1.f / scale[sh] : 1.f)
                  : 0.f;
  for (int i = 0; i < n; ++i) {
    const int j = forward ? i : n - 1 - i;
    float* cell = sg.State(sh, which, j, DP) + e;
    const bool has_local = forward ? j < n - 1 : j > 0;
    const float local = has_local ? *cell : 0.f;
    *cell = run;
    if (i + 1 < n) run = exp2f(sg.log2_decay[sh * sg.segments + j]) * run + local;
  }
}

// Both scans: one CTA per (sequence, head, H or G) and segment, 2 DP threads, StateSmem<DP> of
// dynamic smem.
template <int DP, typename Args>
cudaError_t LaunchScan(void (*kernel)(KernelProblem, Args, SegmentScratch, ScanPass),
                       const KernelProblem& p, const Args& a, const SegmentScratch& sg,
                       ScanPass pass, cudaStream_t s) {
  constexpr int kBytes = StateSmem<DP>::kBytes;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes);
  if (e != cudaSuccess) return e;
  const int segments = pass == ScanPass::kWhole ? 1 : sg.segments;
  kernel<<<dim3(p.num_seqs, p.heads, 2 * segments), DP * 2, kBytes, s>>>(p, a, sg, pass);
  return cudaGetLastError();
}

// One pass, or local pass + combine + rescan (PlanStateScan).
template <int DP, typename Args>
cudaError_t RunScan(void (*kernel)(KernelProblem, Args, SegmentScratch, ScanPass),
                    const KernelProblem& p, const Args& a, const float* init_h, const float* init_g,
                    const float* scale, bool forward, cudaStream_t s) {
  const StateScanPlan plan = PlanStateScan(p);
  SegmentScratch sg;
  if (plan.segments <= 1 || a.scratch == nullptr) {
    return LaunchScan<DP>(kernel, p, a, sg, ScanPass::kWhole, s);
  }
  sg.seg_chunks = plan.seg_chunks;
  sg.segments = plan.segments;
  sg.states = a.scratch;
  sg.log2_decay =
      a.scratch + static_cast<int64_t>(p.num_seqs) * p.heads * 2 * plan.segments * DP * DP;
  if (cudaError_t e = LaunchScan<DP>(kernel, p, a, sg, ScanPass::kLocal, s); e != cudaSuccess) {
    return e;
  }
  CombineSegmentsKernel<<<dim3(p.num_seqs * p.heads * 2, DP * DP / 256), 256, 0, s>>>(
      p, sg, init_h, init_g, scale, forward);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  return LaunchScan<DP>(kernel, p, a, sg, ScanPass::kRescan, s);
}

template <int DP, typename T>
cudaError_t LaunchFwd(const KernelProblem& p, const StateForwardArgs& a, cudaStream_t s) {
  return RunScan<DP>(StateForwardKernel<DP, T>, p, a, a.h0, a.g0, nullptr, true, s);
}

template <int DP, typename T>
cudaError_t LaunchBwd(const KernelProblem& p, const StateBackwardArgs& a, cudaStream_t s) {
  return RunScan<DP>(StateBackwardKernel<DP, T>, p, a, a.d_final_h, a.d_final_g, a.scale, false, s);
}

}  // namespace

StateScanPlan PlanStateScan(const KernelProblem& p) {
  // Segments only when the (sequence, head, state) CTAs fill less than half of what the GPU holds
  // at once (2 per SM), and never shorter than 8 chunks (512 tokens).
  constexpr int kMinSegChunks = 8;
  const int ctas = p.num_seqs * p.heads * 2, resident = 2 * SmCount();
  if (ctas <= 0 || 2 * ctas > resident || p.max_seq_chunks < 2 * kMinSegChunks) return {};
  const int want = resident / ctas;
  const int seg_chunks = std::max(kMinSegChunks, (p.max_seq_chunks + want - 1) / want);
  const int segments = (p.max_seq_chunks + seg_chunks - 1) / seg_chunks;
  if (segments < 2) return {};
  return {seg_chunks, segments};
}

int64_t StateScanScratchFloats(const KernelProblem& p) {
  const StateScanPlan plan = PlanStateScan(p);
  if (plan.segments <= 1) return 0;
  const int64_t pairs = int64_t{p.num_seqs} * p.heads;
  return pairs * plan.segments * (2 * int64_t{p.padded_dim} * p.padded_dim + 1);
}

cudaError_t LaunchStateForward(const KernelProblem& p, const StateForwardArgs& a, cudaStream_t s) {
  if (p.num_seqs == 0) return cudaSuccess;
  const bool bf16 = p.dtype == DType::kBF16;
  if (p.padded_dim == 64)
    return bf16 ? LaunchFwd<64, __nv_bfloat16>(p, a, s) : LaunchFwd<64, float>(p, a, s);
  return bf16 ? LaunchFwd<128, __nv_bfloat16>(p, a, s) : LaunchFwd<128, float>(p, a, s);
}

cudaError_t LaunchStateBackward(const KernelProblem& p, const StateBackwardArgs& a,
                                cudaStream_t s) {
  if (p.num_seqs == 0) return cudaSuccess;
  const bool bf16 = p.dtype == DType::kBF16;
  if (p.padded_dim == 64)
    return bf16 ? LaunchBwd<64, __nv_bfloat16>(p, a, s) : LaunchBwd<64, float>(p, a, s);
  return bf16 ? LaunchBwd<128, __nv_bfloat16>(p, a, s) : LaunchBwd<128, float>(p, a, s);
}

}  // namespace mesa::kernels::cuda
