// Forward CG + output kernel: one CTA per (chunk, head) solves (H_t + Λ) q*_t = q_t for the
// chunk's 64 tokens with the chunk operator on tensor cores, then computes
// o = diag(e^b) (Q* G_c^T) + ((Q* K^T) ⊙ M) V in the same CTA (docs/math.md §2.2, eq. 12).
#include "kernels/mesa/cuda/mesa_cg.cuh"

namespace mesa::kernels::cuda {
namespace {

// kWgmma: the wgmma CG (sm_90a; launched on compute capability 9.x only); else the mma.sync
// fallback (sm_80 devices, MESA_CUDA_NO_WGMMA=1).
template <int DP, typename T, bool kWgmma>
__global__ void __launch_bounds__(kCgThreads, 2)
    CgForwardKernel(KernelProblem prob, CgForwardArgs args) {
  using L = CgSmemLayout<DP, kWgmma>;
  extern __shared__ __align__(16) unsigned char smem[];
  __half* s_mat = reinterpret_cast<__half*>(smem + L::kMat);
  __half* s_key = reinterpret_cast<__half*>(smem + L::kKey);
  __half* s_p = reinterpret_cast<__half*>(smem + L::kP);
  float* s_x = reinterpret_cast<float*>(smem + L::kX);
  __half* s_val = s_p;
  float* s_b2 = reinterpret_cast<float*>(smem + L::kB2);
  float* s_beta = reinterpret_cast<float*>(smem + L::kBeta);
  float* s_lambda = reinterpret_cast<float*>(smem + L::kLambda);
  __half* s_kt = reinterpret_cast<__half*>(smem + L::kKt);

  const int chunk = blockIdx.x, h = blockIdx.y;
  const int4 info = prob.chunks[chunk];
  const int64_t tok0 = info.y;
  const int len = info.z;
  const int H = prob.heads, D = prob.head_dim;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2;
  const T* q = static_cast<const T*>(args.q);
  const T* k = static_cast<const T*>(args.k);
  const T* v = static_cast<const T*>(args.v);
  const size_t state_off = (static_cast<size_t>(chunk) * H + h) * DP * DP;

  for (int d = threadIdx.x; d < DP; d += blockDim.x)
    s_lambda[d] = d < D ? args.lambda[h * D + d] : 1.f;
  if constexpr (kWgmma) {
    StageStateTileCmAsync<DP, kCgThreads>(s_mat,
                                          args.hc + state_off);  // in flight while K is staged
    StageTokenTileCmBatched<DP, kCgThreads>(s_key, k, tok0, len, H, h, D);
    CpAsyncWaitAll();  // published by the barrier in LoadChunkGatesWith
    // x's smem as the gates' scratch (x is zeroed below): no static smem, 2 CTAs/SM.
    LoadChunkGatesWith(s_x, s_b2, s_beta, args.log_gamma, args.beta, tok0, len, H, h);  // syncs
    TransposeKeyTile<DP>(s_kt, s_key);  // published by the CG's first barrier
  } else {
    StageTokenTileCm<DP>(s_key, k, tok0, len, H, h, D, 1.f, nullptr);
    StageStateTileCm<DP>(s_mat, args.hc + state_off);
    LoadChunkGates(s_b2, s_beta, args.log_gamma, args.beta, tok0, len, H, h);  // syncs
  }

  CgVec<DP> x;
  if (args.max_steps > 0) {
    CgVec<DP> p, r;
    LoadRowsAcc<DP>(r, q, tok0, len, H, h, D, warp, lane);
    p = r;
    XZero<DP, kWgmma>(s_x);
    int steps0, steps1;
    if constexpr (kWgmma) {
      RunCgWgmma<DP>(p, r, s_x, s_p, s_mat, s_key, s_kt, s_b2, s_beta, s_lambda, args.max_steps,
                     args.tolerance, warp, lane, steps0, steps1);
    } else {
      RunCg<DP>(p, r, s_x, s_mat, s_key, s_b2, s_beta, s_lambda, args.max_steps, args.tolerance,
                warp, lane, steps0, steps1);
    }
    XRead<DP, kWgmma>(x, s_x);
    if (args.token_steps != nullptr && (lane & 3) == 0) {  // the quad's lane 0 holds the counts
      const int row0 = warp * 16 + g, row1 = row0 + 8;
      if (row0 < len) args.token_steps[(tok0 + row0) * H + h] = steps0;
      if (row1 < len) args.token_steps[(tok0 + row1) * H + h] = steps1;
    }
    if (args.steps != nullptr) {
      // One count per row: the quad's lane 0 holds it.
      int s = (lane & 3) == 0 ? steps0 + steps1 : 0;
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
      if (lane == 0 && s > 0) atomicAdd(args.steps, static_cast<unsigned long long>(s));
    }
  } else {
    LoadRowsAcc<DP>(x, q, tok0, len, H, h, D, warp, lane);  // max_steps == 0: q* = q (GLA)
  }
  if (args.q_star != nullptr) StoreRowsAcc<DP>(x, args.q_star, tok0, len, H, h, D, warp, lane);

  // Output pass: reuse the H tile for G_c and the P tile for V.
  __syncthreads();
  if constexpr (kWgmma) {
    // G_c by cp.async, in flight while V is staged (V not batched here: its 8 x 8 staged floats
    // next to x cost ptxas ~30 B more spills).
    StageStateTileCmAsync<DP, kCgThreads>(s_mat, args.gc + state_off);
    StageTokenTileCm<DP>(s_val, v, tok0, len, H, h, D, 1.f, nullptr);
    CpAsyncWaitAll();
  } else {
    StageStateTileCm<DP>(s_mat, args.gc + state_off);
    StageTokenTileCm<DP>(s_val, v, tok0, len, H, h, D, 1.f, nullptr);
  }
  __syncthreads();
  float n0, n1;
  RowDot<DP>(x, x, n0, n1);
  const float sc0 = SafeRsqrt(n0), sc1 = SafeRsqrt(n1);
  const float rs0 = exp2f(s_b2[warp * 16 + g]), rs1 = exp2f(s_b2[warp * 16 + g + 8]);
  CgVec<DP> o;
  ApplyChunkOperator<DP, false>(o, x, sc0, sc1, rs0, rs1, s_mat, s_key, s_val, s_b2, s_beta, warp,
                                lane);
  StoreRowsAcc<DP>(o, static_cast<T*>(args.o), tok0, len, H, h, D, warp, lane, sqrtf(n0),
                   sqrtf(n1));
}

template <int DP, typename T, bool kWgmma>
cudaError_t LaunchOne(const KernelProblem& p, const CgForwardArgs& a, cudaStream_t s) {
  constexpr int kBytes = CgSmemLayout<DP, kWgmma>::kBytes;
  auto* kernel = CgForwardKernel<DP, T, kWgmma>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes);
  if (e != cudaSuccess) return e;
  static bool reported = false;
  ReportCgOccupancy(reported, "CgForward", DP, kWgmma, reinterpret_cast<const void*>(kernel),
                    kBytes);
  kernel<<<dim3(p.num_chunks, p.heads), kCgThreads, kBytes, s>>>(p, a);
  return cudaGetLastError();
}

template <int DP, typename T>
cudaError_t Launch(const KernelProblem& p, const CgForwardArgs& a, cudaStream_t s) {
  if (CgUseWgmma() && CgDeviceIsSm90()) return LaunchOne<DP, T, true>(p, a, s);
  return LaunchOne<DP, T, false>(p, a, s);
}

}  // namespace

cudaError_t LaunchCgForward(const KernelProblem& p, const CgForwardArgs& a, cudaStream_t s) {
  if (p.num_chunks == 0) return cudaSuccess;
  const bool bf16 = p.dtype == DType::kBF16;
  if (p.padded_dim == 64)
    return bf16 ? Launch<64, __nv_bfloat16>(p, a, s) : Launch<64, float>(p, a, s);
  return bf16 ? Launch<128, __nv_bfloat16>(p, a, s) : Launch<128, float>(p, a, s);
}

}  // namespace mesa::kernels::cuda
