// The chunked scan of a scalar-gated linear recurrence with a stabiliser: the GPU core that the
// mLSTM (kernels/mlstm/cuda) and Mamba-2's SSD (kernels/ssd/cuda) share. Per row and head, the
// state (S' [Dv, Dk], n' [Dk], m):
//   m_t = max(log f_t + m_{t−1}, lw_t)           (the operator may fix m ≡ 0 instead)
//   S'_t = e^{log f_t + m_{t−1} − m_t} S'_{t−1} + e^{lw_t − m_t} v_t k_tᵀ    (n' likewise with k_t)
//   num_t = S'_t q_t,  den_t = n'_t·q_t
//   kNormalised: h_t = num_t / (max(|den_t|, e^{−m_t}) + eps)      (the mLSTM)
//   kPlain:      h_t = num_t + skip_h v_t                            (the SSD, with m ≡ 0)
// computed chunk by chunk (docs/math.md §8.9), parallel over (row, head, chunk) but for two
// element-wise passes over the chunks. The operator writes the per-token gates into the workspace
// with its own kernel (Buffers' first six arrays); the scan does the rest, and its backward leaves
// ∂lw (dig) and ∂log f (dlf) per token for the operator to map onto its own gate parameters.
// q, k, v and their gradients are [B,T,H,D] in the activation type (float32 or bf16); states and
// every sum are float32. Deterministic: no atomics. Plain C++: callers need no CUDA headers.
#ifndef MESANET_KERNELS_COMMON_CUDA_GATED_SCAN_H_
#define MESANET_KERNELS_COMMON_CUDA_GATED_SCAN_H_

#include <cstddef>
#include <cstdint>

namespace mesa::kernels::cuda::gated_scan {

inline constexpr int kChunk = 64;    // tokens a chunk
inline constexpr int kMaxDim = 128;  // the largest key or value width

enum class Readout { kNormalised, kPlain };

struct Problem {
  int64_t batch = 0, seq_len = 0, heads = 0, key_dim = 0, value_dim = 0;
  bool bf16 = false;
  const void *q = nullptr, *k = nullptr, *v = nullptr;
  float k_scale = 1.f;  // k is multiplied by it on load (and dk by it on store)
  float eps = 0.f;
  Readout readout = Readout::kNormalised;
  const float* skip = nullptr;                              // kPlain: [H] or null
  const float *c0 = nullptr, *n0 = nullptr, *m0 = nullptr;  // [B,H,Dv,Dk], [B,H,Dk], [B,H]
  // [B*T] or null: token t restarts (f = 0) where doc_start[b*T + t] == t and (t > 0 or
  // restart_at_row_start).
  const int32_t* doc_start = nullptr;
  bool restart_at_row_start = false;

  int64_t Chunks() const { return (seq_len + kChunk - 1) / kChunk; }
  int64_t StateFloats() const { return value_dim * key_dim + key_dim; }
};

// The workspace's float32 arrays. The operator's gate kernel fills lw, bc, ml, lr, bend, mlend
// before Forward or Backward:
//   lw[b,h,t]   the write's log-scale (the mLSTM's ĩ; the SSD's log dt)
//   bc[b,h,t]   Σ log f over the chunk's tokens up to t (restarting after a document start,
//               whose own log f does not count)
//   ml[b,h,t]   the stabiliser of the chunk's tokens alone (the recursion from −∞ at the chunk's
//               first token, or at the last document start); 0 everywhere for m ≡ 0
//   lr[b,t]     the last document start in t's chunk at or before t (chunk-relative), or −1
//   bend, mlend [b,h,c]  bc and ml of the chunk's last token; bend −∞ if the chunk has a start
struct Buffers {
  float *lw, *bc, *ml;
  int32_t* lr;
  float *bend, *mlend;
  float* mstart;       // [B,H,C+1]: m before chunk c; [C]: the final m
  float* states;       // [B,H,C,S]: S'_c | n'_c, the state before chunk c
  float* final_state;  // [B,H,S]
  float* dstates;      // [B,H,C,S]: ∂ of the state after chunk c
  float* ehat;         // [B,T,H,Dv]
  float *dden, *rescale;
  float* dig;  // [B,H,T] ∂L/∂lw (the backward's result)
  float* dlf;  // [B,H,T] ∂L/∂log f, 0 at a document start (the backward's result)
};

// Key and value widths in [1, kMaxDim], every size ≥ 1.
bool Supported(const Problem& problem);
size_t WorkspaceBytes(const Problem& problem);
Buffers Carve(const Problem& problem, void* workspace);

// The chunk states (c_final, n_final: null or [B,H,Dv,Dk], [B,H,Dk]; n_final only with c_final;
// may alias c0, n0) and the readout h [B,T,H,Dv]; m_final [B,H] (null: not written; may alias m0).
// c0, n0 and m0 come together or not at all.
int Forward(const Problem& problem, const Buffers& buffers, void* h, float* c_final, float* n_final,
            float* m_final, void* stream);

// dh [B,T,H,Dv], dc_final/dn_final (both or neither; null: zero) -> dq, dk (of the unscaled k),
// dv (overwritten), dc0, dn0 (null: not written; dn0 only with dc0), and buffers.dig, .dlf.
// `states_valid`: the workspace holds the states of a Forward of this very problem (else they are
// recomputed from the gates).
int Backward(const Problem& problem, const Buffers& buffers, const void* dh, const float* dc_final,
             const float* dn_final, void* dq, void* dk, void* dv, float* dc0, float* dn0,
             bool states_valid, void* stream);

}  // namespace mesa::kernels::cuda::gated_scan

#endif  // MESANET_KERNELS_COMMON_CUDA_GATED_SCAN_H_
