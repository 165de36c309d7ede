// Types of the RG-LRU operator (Griffin's real-gated linear recurrent unit, the recurrence of the
// Hawk mixer). Users include kernels/rglru/rglru_op.h, which includes this file.
//
// ---------------------------------------------------------------------------------------------
// CONVENTIONS (every implementation follows them exactly; docs/math.md §8.8,
// kernels/rglru/README.md)
//
// Per batch row and channel d, t = 0..T-1, c = 8 (kRgLruC):
//   r_t = sigmoid(ρ_t)   i_t = sigmoid(ι_t)   ℓ_t = -c r_t softplus(p)   a_t = exp(ℓ_t)
//   m_t = sqrt(1 - a_t²)                         (m_t = 1 and ℓ_t = -30 at a restart)
//   h_t = a_t h_{t-1} + m_t i_t u_t              h_{-1} = h0 (or 0)
// A restart is t = 0 of a row that has not started (started absent or 0), or a token marked in
// `reset` (a document start). At a restart ℓ is the constant -30: no gradient reaches ρ or p.
// The op returns h (the layer multiplies it by the GeLU branch and projects it out).
//
// Layouts (row-major, contiguous, float32; channels fastest):
//   u (x), rho (r), iota (i), h, dh, du, drho, diota : [B, T, D]
//   p, dp                                            : [D]
//   h0, h_final, dh0, dh_final                       : [B, D]
//   started                                          : [B]    (uint8, optional)
//   reset                                            : [B, T] (uint8, optional)
// dp is summed over every row and token, in a fixed order (deterministic).
// ---------------------------------------------------------------------------------------------
#ifndef MESANET_KERNELS_RGLRU_RGLRU_TYPES_H_
#define MESANET_KERNELS_RGLRU_RGLRU_TYPES_H_

#include <cstdint>
#include <span>

#include "absl/status/status.h"

namespace mesa::kernels::rglru {

struct RgLruDims {
  int64_t batch = 0;
  int64_t seq_len = 0;
  int64_t width = 0;  // D_rnn channels

  int64_t TokenElems() const { return batch * seq_len * width; }
  int64_t StateElems() const { return batch * width; }
};

enum class RgLruImpl {
  kReference,  // float64 per-token oracle (single-threaded)
  kChunked,    // float32 three-phase chunked scan, threads over (row, chunk) and (row, channel)
  kCuda,       // CUDA kernels; needs //kernels/rglru/cuda:rglru_cuda_register and a GPU
};

inline constexpr int kMaxRgLruChunkSize = 1024;

struct RgLruOptions {
  RgLruImpl impl = RgLruImpl::kChunked;
  int num_threads = 0;  // CPU threads; 0 => hardware_concurrency
  int chunk_size = 64;  // chunked and CUDA: tokens per chunk of the scan, [1, kMaxRgLruChunkSize]
};

struct RgLruInputs {
  RgLruDims dims;
  std::span<const float> u;          // [B,T,D] the recurrent branch after its convolution
  std::span<const float> rho;        // [B,T,D] recurrence-gate pre-activation
  std::span<const float> iota;       // [B,T,D] input-gate pre-activation
  std::span<const float> p;          // [D]     softplus(p) = -log a
  std::span<const float> h0;         // optional [B,D]
  std::span<const uint8_t> started;  // optional [B]: 1 = the row continues h0 (no restart at 0)
  std::span<const uint8_t> reset;    // optional [B,T]: 1 = a document starts at this token

  // Whether token t of row b restarts the recurrence.
  bool Restart(int64_t b, int64_t t) const {
    if (!reset.empty() && reset[b * dims.seq_len + t] != 0) return true;
    return t == 0 && (started.empty() || started[b] == 0);
  }
};

struct RgLruForwardOutputs {
  std::span<float> h;        // required [B,T,D]
  std::span<float> h_final;  // optional [B,D] (may alias h0: in-place carry)
};

struct RgLruBackwardInputs {
  std::span<const float> dh;  // required [B,T,D], ∂L/∂h_t from above (not through h_{t+1})
  std::span<const float> dh_final;  // optional [B,D]
};

struct RgLruGradients {
  std::span<float> du, drho, diota;  // required [B,T,D]
  std::span<float> dp;               // required [D]
  std::span<float> dh0;              // optional [B,D]
};

// Checks dims (≥ 1), options, every span's size and that every float is finite; InvalidArgument
// naming the tensor.
absl::Status ValidateRgLruInputs(const RgLruInputs& in, const RgLruOptions& options);
absl::Status ValidateRgLruForwardOutputs(const RgLruInputs& in, const RgLruForwardOutputs& out);
absl::Status ValidateRgLruBackward(const RgLruInputs& in, const RgLruBackwardInputs& bwd,
                                   const RgLruGradients& grads);

// Backend registration seam for CUDA, as for the other operators: host memory in and out.
struct RgLruCudaBackend {
  absl::Status (*forward)(const RgLruInputs&, const RgLruOptions&, RgLruForwardOutputs*) = nullptr;
  absl::Status (*backward)(const RgLruInputs&, const RgLruOptions&, const RgLruBackwardInputs&,
                           RgLruGradients*) = nullptr;
};
void RegisterRgLruCudaBackend(const RgLruCudaBackend& backend);
const RgLruCudaBackend* GetRgLruCudaBackend();  // nullptr when none was linked in

}  // namespace mesa::kernels::rglru

#endif  // MESANET_KERNELS_RGLRU_RGLRU_TYPES_H_
