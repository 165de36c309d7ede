// Types of the mLSTM operator (xLSTM's matrix memory, docs/math.md §8.9). Users include
// kernels/mlstm/mlstm_op.h, which includes this file.
//
// ---------------------------------------------------------------------------------------------
// CONVENTIONS (every implementation follows them exactly)
//
// Per batch row and head, t = 0..T-1, keys of Dk and values of Dv entries, the stabilised form
// with state (C' [Dv, Dk], n' [Dk], m), C' = n' = 0 and m = 0 before the first token:
//   log f_t = logsigmoid(f̃_t)          (sigmoid forget gate; f̃ = the input `f`)
//   m_t  = max(log f_t + m_{t-1}, ĩ_t)  (ĩ = the input `i`, the exponential input gate's log)
//   f'_t = exp(log f_t + m_{t-1} - m_t)  i'_t = exp(ĩ_t - m_t)
//   C'_t = f'_t C'_{t-1} + i'_t v_t k_tᵀ     n'_t = f'_t n'_{t-1} + i'_t k_t
//   h_t  = C'_t q_t / (max(|n'_t·q_t|, exp(-m_t)) + eps)        eps = 1e-6 (kMlstmEps)
// k comes already scaled by 1/sqrt(Dk). m rescales and is not differentiated (stop-gradient),
// which is the exact gradient of the eps-free formula. A token marked in `reset` (a document
// start) forgets exactly: f = 0, so m_t = ĩ_t, C'_t = v_t k_tᵀ, n'_t = k_t, and no gradient
// reaches f̃_t or the earlier state.
//
// Layouts (row-major, float32): q, k, dq, dk [B, T, H, Dk]; v, h (o), dv, do [B, T, H, Dv];
// i, f, di, df [B, T, H]; reset [B, T] (uint8, optional); states c0, c_final [B, H, Dv, Dk],
// n0, n_final [B, H, Dk], m0, m_final [B, H] (optional; absent initial states are zero).
// ---------------------------------------------------------------------------------------------
#ifndef MESANET_KERNELS_MLSTM_MLSTM_TYPES_H_
#define MESANET_KERNELS_MLSTM_MLSTM_TYPES_H_

#include <cstdint>
#include <span>

#include "absl/status/status.h"

namespace mesa::kernels::mlstm {

inline constexpr double kMlstmEps = 1e-6;

struct MlstmDims {
  int64_t batch = 0, seq_len = 0, heads = 0, key_dim = 0, value_dim = 0;

  int64_t KeyElems() const { return batch * seq_len * heads * key_dim; }
  int64_t ValueElems() const { return batch * seq_len * heads * value_dim; }
  int64_t GateElems() const { return batch * seq_len * heads; }
  int64_t CElems() const { return batch * heads * value_dim * key_dim; }
  int64_t NElems() const { return batch * heads * key_dim; }
  int64_t MElems() const { return batch * heads; }
};

enum class MlstmImpl {
  kReference,  // float64, the same recurrence (the test oracle)
  kRecurrent,  // float32 recurrence with the state checkpointed every chunk_size tokens
  kChunked,    // float32 chunked form (chunk_size tokens a chunk; the CUDA kernel's shape)
  kCuda,       // CUDA kernels (64-token chunks); needs //kernels/mlstm/cuda:mlstm_cuda_register
};

struct MlstmOptions {
  MlstmImpl impl = MlstmImpl::kRecurrent;
  int num_threads = 0;  // threads over (row, head); 0 = hardware_concurrency
  // Recurrent: tokens between the backward's state checkpoints; chunked: Q. [1, 1024]
  int chunk_size = 64;
  double eps = kMlstmEps;  // the denominator's eps (tests set 0 for the unstabilised identity)
};

struct MlstmInputs {
  MlstmDims dims;
  std::span<const float> q, k, v;     // [B,T,H,Dk], [B,T,H,Dk], [B,T,H,Dv]
  std::span<const float> i, f;        // [B,T,H] pre-activations
  std::span<const uint8_t> reset;     // optional [B,T]
  std::span<const float> c0, n0, m0;  // optional initial state (all three or none)
};

struct MlstmForwardOutputs {
  std::span<float> h;                          // required [B,T,H,Dv]
  std::span<float> c_final, n_final, m_final;  // optional (all three or none)
};

struct MlstmBackwardInputs {
  std::span<const float> dh;                  // required [B,T,H,Dv]
  std::span<const float> dc_final, dn_final;  // optional (both or none)
};

struct MlstmGradients {
  std::span<float> dq, dk, dv, di, df;  // required
  std::span<float> dc0, dn0;            // optional (both or none)
};

absl::Status ValidateMlstmInputs(const MlstmInputs& in, const MlstmOptions& options);
absl::Status ValidateMlstmForwardOutputs(const MlstmInputs& in, const MlstmForwardOutputs& out);
absl::Status ValidateMlstmBackward(const MlstmInputs& in, const MlstmBackwardInputs& bwd,
                                   const MlstmGradients& grads);

// Backend registration seam for CUDA, as for the other operators: host memory in and out.
struct MlstmCudaBackend {
  absl::Status (*forward)(const MlstmInputs&, const MlstmOptions&, MlstmForwardOutputs*) = nullptr;
  absl::Status (*backward)(const MlstmInputs&, const MlstmOptions&, const MlstmBackwardInputs&,
                           MlstmGradients*) = nullptr;
};
void RegisterMlstmCudaBackend(const MlstmCudaBackend& backend);
const MlstmCudaBackend* GetMlstmCudaBackend();  // nullptr when none was linked in

}  // namespace mesa::kernels::mlstm

#endif  // MESANET_KERNELS_MLSTM_MLSTM_TYPES_H_
