// Kernel launchers for the fused Mesa operator (plain C++ so the host code needs no nvcc).
// Every launcher returns the launch error (cudaGetLastError) and never synchronises.
//
// Internal conventions (on top of kernels/mesa/mesa_types.h):
//   - Chunks of kChunk = 64 tokens never straddle a sequence; chunk c has an entry in `chunks`
//     {seq, first token (flat b*T+t), length, global id of the sequence's first chunk}, and
//     sequence s has {first token, length, first chunk, number of chunks} in `seqs`.
//   - Head dims D < 64 run padded to DP = 64, 64 < D < 128 to DP = 128 (zero keys/values/queries
//     in the padding and lambda = 1 there give exactly the unpadded solution).
//   - Chunk-start states (H_c, G_c) and state gradients are fp16 [chunk][head][DP][DP].
//   - The backward works in units of do / s where s = 2^round(log2 max|do|) per (sequence, head),
//     so fp16 tensor-core operands never under- or overflow; outputs are scaled back.
#ifndef MESANET_KERNELS_MESA_CUDA_MESA_KERNELS_H_
#define MESANET_KERNELS_MESA_CUDA_MESA_KERNELS_H_

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/cuda/kernel_problem.h"

namespace mesa::kernels::cuda {

// The state scans walk a sequence's chunks one after another. When (sequence, head) pairs are too
// few to fill the GPU (one long sequence), a sequence is cut into segments of seg_chunks chunks:
// a first pass scans each segment but the last from a zero state (its contribution to the state
// after it) and sums its log decay, a combine pass carries the states across the segments (the
// decay is a scalar per token and head: S_in[j+1] = e^{decay_j} S_in[j] + local_j), and a second
// pass rescans every segment from its true starting state. Twice the scan's arithmetic, spread
// over segments x the CTAs. segments == 1: one pass, as before.
struct StateScanPlan {
  int seg_chunks = 0;  // chunks per segment (0: no segments)
  int segments = 1;    // of the longest sequence
};
StateScanPlan PlanStateScan(const KernelProblem& p);
// Floats of scratch the segmented scans need (0 when the plan has one segment): per (sequence,
// head, state) and segment a DP x DP fp32 state, and per (sequence, head) and segment a log decay.
int64_t StateScanScratchFloats(const KernelProblem& p);

// Forward state scan: writes chunk-start H_c, G_c (fp16) and optional fp32 final states. When
// d_final_h/g are given (backward recompute with final-state gradients) it also accumulates
// r_final: <dH_final, H_T> + <dG_final, G_T> per (seq, head), as kRFinalSlots partial sums (one
// per state and warp, zeroed by the caller) that LaunchGateScan adds in a fixed order: no float
// atomics, so the sum repeats bit for bit.
struct StateForwardArgs {
  const void* k;
  const void* v;
  const float* log_gamma;
  const float* beta;
  const float* h0;  // optional [S,H,D,D]
  const float* g0;
  __half* hc;  // [chunks][H][DP][DP]
  __half* gc;
  float* h_final;  // optional
  float* g_final;
  const float* d_final_h;  // optional
  const float* d_final_g;
  float* r_final;            // [S*H*kRFinalSlots], needed if d_final_* given
  float* scratch = nullptr;  // StateScanScratchFloats(p) floats
};
cudaError_t LaunchStateForward(const KernelProblem& p, const StateForwardArgs& a, cudaStream_t s);

// Partial sums per (seq, head) of r_final: 2 states × at most 8 warps of the state pass.
inline constexpr int kRFinalSlots = 16;

// CG solve of every token plus the output pass: q_star (fp32) and o.
struct CgForwardArgs {
  const void* q;
  const void* k;
  const void* v;
  const float* log_gamma;
  const float* beta;
  const float* lambda;
  const __half* hc;
  const __half* gc;
  float* q_star;              // [B,T,H,D]
  void* o;                    // [B,T,H,D] dtype
  unsigned long long* steps;  // += CG steps over all tokens
  int32_t* token_steps;       // optional [B,T,H]: each token's steps (pre-zeroed)
  int max_steps;
  float tolerance;
};
cudaError_t LaunchCgForward(const KernelProblem& p, const CgForwardArgs& a, cudaStream_t s);

// s[seq*H+h] = power-of-two scale of max|do| over the sequence and head.
cudaError_t LaunchGradScale(const KernelProblem& p, const void* d_o, float* scale, cudaStream_t s);

// Second solve e* = (H+Λ)^{-1} G^T e with the U = G^T e product fused in; writes dq = e*,
// estar16 = e*/s (fp16 [B,T,H,D]), dlambda (with CG steps: overwritten by a fixed-order sum of
// each chunk and warp's part, kept in dlambda_partials; without: left as it is) and
// r[tok*H+h] = e^T o - e*^T H q*  (the row term of dlog_gamma).
struct CgBackwardArgs {
  const void* q;
  const void* k;
  const void* v;
  const void* d_o;
  const float* q_star;
  const float* log_gamma;
  const float* beta;
  const float* lambda;
  const float* scale;
  const __half* hc;
  const __half* gc;
  void* dq;
  __half* estar16;
  float* dlambda;
  float* r;
  unsigned long long* steps;
  int max_steps;
  float tolerance;
  float* dlambda_partials = nullptr;  // CgDlambdaPartialFloats(p) floats of scratch (with CG steps)
};
cudaError_t LaunchCgBackward(const KernelProblem& p, const CgBackwardArgs& a, cudaStream_t s);
size_t CgDlambdaPartialFloats(const KernelProblem& p);

// Reverse state scan: chunk-end state gradients dG, dH (fp16, scaled units) and dg0/dh0.
struct StateBackwardArgs {
  const void* d_o;
  const float* q_star;
  const __half* estar16;
  const float* log_gamma;
  const float* scale;
  const float* d_final_h;  // optional [S,H,D,D]
  const float* d_final_g;
  __half* dhc;  // [chunks][H][DP][DP], gradient w.r.t. the state after chunk c
  __half* dgc;
  float* dh0;  // optional
  float* dg0;
  float* scratch = nullptr;  // StateScanScratchFloats(p) floats
};
cudaError_t LaunchStateBackward(const KernelProblem& p, const StateBackwardArgs& a, cudaStream_t s);

// Per-chunk GLA backward: dv, dk, dbeta, and dlog_gamma_pre[tok*H+h] = r - beta*dbeta
// (to be reverse-cumsummed by LaunchGateScan).
struct GlaBackwardArgs {
  const void* k;
  const void* v;
  const void* d_o;
  const float* q_star;
  const __half* estar16;
  const float* log_gamma;
  const float* beta;
  const float* scale;
  const float* r;
  const __half* dhc;
  const __half* dgc;
  void* dk;
  void* dv;
  float* dbeta;
  float* dlog_gamma;  // receives the pre-scan values
};
cudaError_t LaunchGlaBackward(const KernelProblem& p, const GlaBackwardArgs& a, cudaStream_t s);

// In place: dlog_gamma[s] = r_final + sum_{j >= s in the sequence} dlog_gamma[j].
cudaError_t LaunchGateScan(const KernelProblem& p, float* dlog_gamma, const float* r_final,
                           cudaStream_t s);

}  // namespace mesa::kernels::cuda

#endif  // MESANET_KERNELS_MESA_CUDA_MESA_KERNELS_H_
