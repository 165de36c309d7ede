// The RG-LRU's CUDA kernels, device-pointer API (no CUDA headers needed by callers): the streaming
// or the chained scan of kernels/rglru/README.md ("CUDA"), whichever fills the GPU, on one stream.
// h is kept in float32 inside the scan; u, ρ, ι, h and their gradients are in the activation type
// (float32 or bf16). dp is reduced over rows and chunks in a fixed order (no atomics): the result
// does not depend on scheduling.
#ifndef MESANET_KERNELS_RGLRU_CUDA_RGLRU_KERNELS_H_
#define MESANET_KERNELS_RGLRU_CUDA_RGLRU_KERNELS_H_

#include <cstddef>
#include <cstdint>

namespace mesa::kernels::rglru::cuda {

// Tokens per step (tile) of the CUDA scans; the workspace keeps the state entering every step,
// from which the backward recomputes h.
inline constexpr int kCudaChunk = 64;

// Which scan runs a problem. kAuto: the streaming scan where the rows alone fill the GPU (one block
// per row and 16 channels, at least two per SM), else the chained scan. The others force one
// (tests, benchmarks). A backward reusing a forward's workspace must run the same scan.
enum class RgLruScan { kAuto, kStreaming, kChained };

struct DeviceProblem {
  int64_t batch = 0, seq_len = 0, width = 0;
  bool bf16 = false;  // the activation type of u, rho, iota, h and the gradients
  const void* u = nullptr;
  const void* rho = nullptr;
  const void* iota = nullptr;
  const float* p = nullptr;            // [D]
  const float* h0 = nullptr;           // [B,D] or null (zero)
  const float* started = nullptr;      // [B] float 0/1 or null (every row starts)
  const int32_t* doc_start = nullptr;  // [B*T] or null
  RgLruScan scan = RgLruScan::kAuto;

  int64_t Chunks() const { return (seq_len + kCudaChunk - 1) / kCudaChunk; }
};

// The scan a problem runs (kAuto resolved on the current device).
RgLruScan ScanFor(const DeviceProblem& problem);

// Scratch of the problem's scan: the step states both directions need, and the scan's own (segment
// summaries, or published maps with their flags).
size_t WorkspaceBytes(const DeviceProblem& problem);

// h [B,T,D] (activation type); h_final [B,D] (null: not written; may alias h0); started_out [B]
// set to 1 (null: not written; may alias started). `workspace` holds WorkspaceBytes(); after the
// call it holds the carried states a Backward of the same problem may reuse.
int RgLruForwardDevice(const DeviceProblem& problem, void* h, float* h_final, float* started_out,
                       void* workspace, void* stream);

// dh [B,T,D] (activation type), dh_final [B,D] (null: zero) -> du, drho, diota (overwritten),
// dp [D] (accumulated), dh0 [B,D] (null: not written). `carried_valid`: the workspace still
// holds the carried states of a Forward of this very problem (else they are recomputed).
// `dp_partials` holds DpPartialBytes() of float32 scratch.
size_t DpPartialBytes(const DeviceProblem& problem);
int RgLruBackwardDevice(const DeviceProblem& problem, const void* dh, const float* dh_final,
                        void* du, void* drho, void* diota, float* dp, float* dh0, void* workspace,
                        bool carried_valid, float* dp_partials, void* stream);

}  // namespace mesa::kernels::rglru::cuda

#endif  // MESANET_KERNELS_RGLRU_CUDA_RGLRU_KERNELS_H_
