// Types shared by the implementations of the DeltaNet family operator (DeltaNet and Gated
// DeltaNet) on the CPU. Users include kernels/deltanet/deltanet_op.h, which includes this file.
//
// ---------------------------------------------------------------------------------------------
// CONVENTIONS (every implementation follows them exactly; see kernels/deltanet/README.md)
//
// Per sequence and head, with t = 1..T, D = head dim (keys and values both have D entries):
//   S_t = g_t S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T          S_0 = s0 (or 0)
//   o_t = S_t q_t                                                        (no scale inside the op)
//   g_t = exp(log_gamma_t) for Gated DeltaNet; g_t = 1 for DeltaNet (log_gamma empty).
// S is D x D with S[i][j]: row i = VALUE dimension, column j = KEY dimension (like Mesa's G).
//
// Layouts (row-major, contiguous, float32):
//   q, k, v, o, dq, dk, dv, do             : [B, T, H, D]   (token-major, like Mesa and FLA)
//   beta, log_gamma, dbeta, dlog_gamma     : [B, T, H]
//   s0, s_final, ds0, ds_final             : [S, H, D, D], S = B, or S = N (the number of packed
//                                            sequences) in varlen mode.
//
// Varlen packing (as Mesa): cu_seqlens (int32, N+1 entries, cu_seqlens[0] = 0, non-decreasing,
// cu_seqlens[N] = T) requires B = 1. Sequence n occupies tokens [cu[n], cu[n+1]) and starts from
// its own initial state (s0[n] or zero); no state flows between sequences. Chunks never straddle
// a sequence boundary. Empty sequences are allowed (final state = initial state, ds0 = ds_final).
//
// Aliasing: outputs must not overlap inputs, except that s_final may be the very same buffer as
// s0 and ds0 the very same buffer as ds_final (in-place state carry between calls).
//
// The op does not normalise k and does not restrict beta or log_gamma: any finite values are
// accepted (the model feeds L2-normalised k, beta in (0, 1) and log_gamma <= 0, for which the
// transition is contractive and the chunked float32 form is well conditioned).
// ---------------------------------------------------------------------------------------------
#ifndef MESANET_KERNELS_DELTANET_DELTANET_TYPES_H_
#define MESANET_KERNELS_DELTANET_DELTANET_TYPES_H_

#include <cstdint>
#include <span>

#include "absl/status/status.h"

namespace mesa::kernels::deltanet {

struct DeltaDims {
  int64_t batch = 0;
  int64_t seq_len = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;

  int64_t TokenElems() const { return batch * seq_len * heads * head_dim; }  // q, k, v, o
  int64_t GateElems() const { return batch * seq_len * heads; }              // beta, log_gamma
};

enum class DeltaImpl {
  kReference,  // float64 recurrent oracle (single-threaded, O(T D^2) per head).
  kChunked,    // float32 chunkwise WY / UT-transform form, threads over (sequence, head).
  kCuda,       // CUDA kernels (bf16 tensor cores, host memory staged); needs the registered
               // backend (//kernels/deltanet/cuda:deltanet_cuda_register) and a GPU.
};

inline constexpr int kMaxDeltaChunkSize = 256;

struct DeltaOptions {
  DeltaImpl impl = DeltaImpl::kChunked;
  int num_threads = 0;  // CPU threads over (sequence, head); 0 => hardware_concurrency.
  int chunk_size = 64;  // chunked only; any value in [1, kMaxDeltaChunkSize].
};

// Forward inputs. Spans must have exactly the sizes in the layout table above; optional spans
// are empty when absent.
struct DeltaInputs {
  DeltaDims dims;
  std::span<const float> q, k, v;       // [B,T,H,D]
  std::span<const float> beta;          // [B,T,H]
  std::span<const float> log_gamma;     // [B,T,H] for Gated DeltaNet; empty => DeltaNet (g = 1)
  std::span<const float> s0;            // optional [S,H,D,D]
  std::span<const int32_t> cu_seqlens;  // optional, N+1 offsets (then batch must be 1)

  bool is_gated() const { return !log_gamma.empty(); }
  bool is_varlen() const { return !cu_seqlens.empty(); }
  int64_t num_sequences() const {  // S: B, or N in varlen mode
    return is_varlen() ? static_cast<int64_t>(cu_seqlens.size()) - 1 : dims.batch;
  }
  int64_t StateElems() const {
    return num_sequences() * dims.heads * dims.head_dim * dims.head_dim;
  }
};

struct DeltaForwardOutputs {
  std::span<float> o;        // required [B,T,H,D]
  std::span<float> s_final;  // optional [S,H,D,D]
};

struct DeltaBackwardInputs {
  std::span<const float> d_o;       // required [B,T,H,D], dL/do
  std::span<const float> ds_final;  // optional [S,H,D,D], dL/ds_final (absent => 0)
};

struct DeltaGradients {
  std::span<float> dq, dk, dv;  // required [B,T,H,D]
  std::span<float> dbeta;       // required [B,T,H]
  std::span<float> dlog_gamma;  // [B,T,H]: required when gated, must be empty when ungated
  std::span<float> ds0;         // optional [S,H,D,D] (valid even when s0 was absent)
};

// Checks dims (B, T, H, D >= 1; B == 1 in varlen mode), options (num_threads >= 0, chunk_size in
// [1, kMaxDeltaChunkSize]), every span size, cu_seqlens (N+1 >= 2 entries, starts at 0, ends at
// T, non-decreasing) and that every float is finite. Returns InvalidArgument naming the tensor
// (and, for a non-finite value, its flat index).
absl::Status ValidateDeltaInputs(const DeltaInputs& in, const DeltaOptions& options);
absl::Status ValidateDeltaForwardOutputs(const DeltaInputs& in, const DeltaForwardOutputs& out);
absl::Status ValidateDeltaBackward(const DeltaInputs& in, const DeltaBackwardInputs& bwd,
                                   const DeltaGradients& grads);

// Backend registration seam for CUDA, as for Mesa (kernels/mesa/mesa_types.h):
// //kernels/deltanet/cuda:deltanet_cuda_register (alwayslink) registers it from a static
// initialiser; without it, impl = kCuda is FailedPrecondition. The functions receive validated
// arguments in host memory.
struct DeltaCudaBackend {
  absl::Status (*forward)(const DeltaInputs&, DeltaForwardOutputs*) = nullptr;
  absl::Status (*backward)(const DeltaInputs&, const DeltaBackwardInputs&,
                           DeltaGradients*) = nullptr;
  absl::Status (*device_available)() = nullptr;
};
void RegisterDeltaCudaBackend(const DeltaCudaBackend& backend);
const DeltaCudaBackend* GetDeltaCudaBackend();  // nullptr when none was linked in

}  // namespace mesa::kernels::deltanet

#endif  // MESANET_KERNELS_DELTANET_DELTANET_TYPES_H_
