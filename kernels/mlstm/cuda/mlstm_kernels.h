// The mLSTM's CUDA kernels, device-pointer API (no CUDA headers needed by callers): the chunked
// form of kernels/mlstm/chunked.h on one stream, parallel over (row, head, chunk) everywhere but
// two element-wise passes over the chunks (the chunk-state pass and its reverse), so that one long
// row keeps the GPU as busy as many short ones. q, k, v, the gates and their gradients are in the
// activation type (float32 or bf16); states, stabilisers and every accumulation are float32.
// Deterministic: no atomics, every sum in a fixed order.
#ifndef MESANET_KERNELS_MLSTM_CUDA_MLSTM_KERNELS_H_
#define MESANET_KERNELS_MLSTM_CUDA_MLSTM_KERNELS_H_

#include <cstddef>
#include <cstdint>

namespace mesa::kernels::mlstm::cuda {

inline constexpr int kCudaChunk = 64;    // tokens a chunk
inline constexpr int kCudaMaxDim = 128;  // the largest key or value width

struct DeviceProblem {
  int64_t batch = 0, seq_len = 0, heads = 0, key_dim = 0, value_dim = 0;
  bool bf16 = false;        // the activation type of q, k, v, i, f, h and the gradients
  const void* q = nullptr;  // [B,T,H,Dk]
  const void* k = nullptr;  // [B,T,H,Dk], multiplied by k_scale on load
  const void* v = nullptr;  // [B,T,H,Dv]
  const void* i = nullptr;  // [B,T,H] ĩ
  const void* f = nullptr;  // [B,T,H] f̃ (sigmoid forget gate)
  float k_scale = 1.f;
  float eps = 1e-6f;
  const float *c0 = nullptr, *n0 = nullptr, *m0 = nullptr;  // [B,H,Dv,Dk], [B,H,Dk], [B,H] or null
  // [B*T] or null: token t of a row restarts (f = 0) where doc_start[b*T + t] == t and t > 0
  // (the layers' convention: a row's first token continues the carried state), or also at t = 0
  // with restart_at_row_start (the operator's `reset` mask).
  const int32_t* doc_start = nullptr;
  bool restart_at_row_start = false;

  int64_t Chunks() const { return (seq_len + kCudaChunk - 1) / kCudaChunk; }
};

// Whether the kernels take this shape (key and value widths in [1, kCudaMaxDim]).
bool Supported(const DeviceProblem& problem);

// Float32 scratch of both passes: gate prefixes, chunk states, and the backward's buffers.
size_t WorkspaceBytes(const DeviceProblem& problem);

// h [B,T,H,Dv] (activation type); c_final, n_final, m_final (null: not written; may alias c0,
// n0, m0). After the call the workspace holds the chunk states a Backward of the same problem
// may reuse.
int MlstmForwardDevice(const DeviceProblem& problem, void* h, float* c_final, float* n_final,
                       float* m_final, void* workspace, void* stream);

// dh [B,T,H,Dv] (activation type), dc_final/dn_final (null: zero) -> dq, dk (of the unscaled k),
// dv, di, df (activation type, overwritten), dc0, dn0 (null: not written). `states_valid`: the
// workspace still holds the chunk states of a Forward of this very problem (else recomputed).
int MlstmBackwardDevice(const DeviceProblem& problem, const void* dh, const float* dc_final,
                        const float* dn_final, void* dq, void* dk, void* dv, void* di, void* df,
                        float* dc0, float* dn0, void* workspace, bool states_valid, void* stream);

}  // namespace mesa::kernels::mlstm::cuda

#endif  // MESANET_KERNELS_MLSTM_CUDA_MLSTM_KERNELS_H_
