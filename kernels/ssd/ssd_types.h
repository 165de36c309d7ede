// Types of the SSD operator (Mamba-2's scan, docs/math.md §8.10). Users include
// kernels/ssd/ssd_op.h, which includes this file.
//
// ---------------------------------------------------------------------------------------------
// CONVENTIONS (every implementation follows them exactly)
//
// Per batch row and head h (P value entries), reading group g(h) = ⌊h / (H/G)⌋ of B and C (N
// entries each), t = 0..T-1, the state S [P, N] zero (or s0) before the first token:
//   dt_t = softplus(dt̃_t + dt_bias_h)      (dt̃ = the input `dt`: before softplus and bias)
//   A_h  = -exp(A_log_h) < 0
//   a_t  = exp(dt_t A_h)                     a_t = 0 at a token marked in `reset`
//   S_t  = a_t S_{t-1} + dt_t x_t B_tᵀ
//   y_t  = S_t C_t + D_h x_t
// A reset (a document start) forgets exactly: nothing of the earlier state survives and no
// gradient reaches dt_t through the decay (dt_t still scales the write). There is no dt clamp.
//
// Layouts (row-major, float32): x, y, dx, dy [B, T, H, P]; dt, ddt [B, T, H]; B, C, dB, dC
// [B, T, G, N]; A_log, dt_bias, D and their gradients [H] (summed over rows and tokens);
// reset [B, T] (uint8, optional); s0, s_final, ds0, ds_final [B, H, P, N] (optional).
// ---------------------------------------------------------------------------------------------
#ifndef MESANET_KERNELS_SSD_SSD_TYPES_H_
#define MESANET_KERNELS_SSD_SSD_TYPES_H_

#include <cstdint>
#include <span>

#include "absl/status/status.h"

namespace mesa::kernels::ssd {

struct SsdDims {
  int64_t batch = 0, seq_len = 0, heads = 0, head_dim = 0, groups = 0, state_dim = 0;

  int64_t XElems() const { return batch * seq_len * heads * head_dim; }
  int64_t GateElems() const { return batch * seq_len * heads; }
  int64_t BcElems() const { return batch * seq_len * groups * state_dim; }
  int64_t StateElems() const { return batch * heads * head_dim * state_dim; }
  int64_t HeadsPerGroup() const { return heads / groups; }
};

enum class SsdImpl {
  kReference,  // float64, the same recurrence (the test oracle)
  kRecurrent,  // float32 recurrence with the state checkpointed every chunk_size tokens
  kChunked,    // float32 chunked form (chunk_size tokens a chunk; the CUDA kernel's shape)
  kCuda,       // CUDA kernels (64-token chunks); needs //kernels/ssd/cuda:ssd_cuda_register
};

struct SsdOptions {
  SsdImpl impl = SsdImpl::kRecurrent;
  int num_threads = 0;  // threads over (row, head); 0 = hardware_concurrency
  // Recurrent: tokens between the backward's state checkpoints; chunked: Q. [1, 1024]
  int chunk_size = 64;
};

struct SsdInputs {
  SsdDims dims;
  std::span<const float> x;                  // [B,T,H,P]
  std::span<const float> dt;                 // [B,T,H], before softplus and dt_bias
  std::span<const float> a_log, dt_bias, d;  // [H]
  std::span<const float> b, c;               // [B,T,G,N]
  std::span<const uint8_t> reset;            // optional [B,T]
  std::span<const float> s0;                 // optional [B,H,P,N]
};

struct SsdForwardOutputs {
  std::span<float> y;        // required [B,T,H,P]
  std::span<float> s_final;  // optional [B,H,P,N]
};

struct SsdBackwardInputs {
  std::span<const float> dy;        // required [B,T,H,P]
  std::span<const float> ds_final;  // optional [B,H,P,N]
};

struct SsdGradients {
  std::span<float> dx, ddt, da_log, ddt_bias, dd, db, dc;  // required
  std::span<float> ds0;                                    // optional [B,H,P,N]
};

absl::Status ValidateSsdInputs(const SsdInputs& in, const SsdOptions& options);
absl::Status ValidateSsdForwardOutputs(const SsdInputs& in, const SsdForwardOutputs& out);
absl::Status ValidateSsdBackward(const SsdInputs& in, const SsdBackwardInputs& bwd,
                                 const SsdGradients& grads);

// Backend registration seam for CUDA, as for the other operators: host memory in and out.
struct SsdCudaBackend {
  absl::Status (*forward)(const SsdInputs&, const SsdOptions&, SsdForwardOutputs*) = nullptr;
  absl::Status (*backward)(const SsdInputs&, const SsdOptions&, const SsdBackwardInputs&,
                           SsdGradients*) = nullptr;
};
void RegisterSsdCudaBackend(const SsdCudaBackend& backend);
const SsdCudaBackend* GetSsdCudaBackend();  // nullptr when none was linked in

}  // namespace mesa::kernels::ssd

#endif  // MESANET_KERNELS_SSD_SSD_TYPES_H_
