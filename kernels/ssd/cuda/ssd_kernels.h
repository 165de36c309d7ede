// Mamba-2's SSD scan on the GPU, device-pointer API (no CUDA headers needed by callers): its gate
// kernel (dt = softplus(dt̃ + dt_bias), log a = dt A, the write's log-scale log dt, no stabiliser)
// and its finishing kernels around the gated scan (kernels/common/cuda/gated_scan.h) with the
// plain readout y = S C + D x. Heads read their group's B and C (packed per head first). x, B, C,
// dt and their gradients are in the activation type (float32 or bf16); S and every sum float32.
// Deterministic: the head and row sums run in a fixed order.
#ifndef MESANET_KERNELS_SSD_CUDA_SSD_KERNELS_H_
#define MESANET_KERNELS_SSD_CUDA_SSD_KERNELS_H_

#include <cstddef>
#include <cstdint>

namespace mesa::kernels::ssd::cuda {

struct DeviceProblem {
  int64_t batch = 0, seq_len = 0, heads = 0, head_dim = 0, groups = 0, state_dim = 0;
  bool bf16 = false;
  // x of head h at x + (b*T + t) * x_stride + h * P; B and C of group g at
  // b_ptr / c_ptr + (b*T + t) * bc_stride + g * N (the model's rows [x | B | C] or separate
  // tensors).
  const void* x = nullptr;
  int64_t x_stride = 0;
  const void *b_ptr = nullptr, *c_ptr = nullptr;
  int64_t bc_stride = 0;
  const void* dt = nullptr;  // [B,T,H] before softplus and dt_bias
  const float *a_log = nullptr, *dt_bias = nullptr, *d = nullptr;  // [H]
  const float* s0 = nullptr;                                       // [B,H,P,N] or null
  // [B*T] or null: token t restarts where doc_start[b*T + t] == t and (t > 0 or
  // restart_at_row_start).
  const int32_t* doc_start = nullptr;
  bool restart_at_row_start = false;
};

// Widths the kernels take (P and N in [1, 128], H a multiple of G).
bool Supported(const DeviceProblem& problem);
size_t WorkspaceBytes(const DeviceProblem& problem);

// y [B,T,H,P] (contiguous, activation type), s_final [B,H,P,N] (null: not written; may alias
// s0). The workspace then holds the chunk states a Backward of the same problem may reuse.
int SsdForwardDevice(const DeviceProblem& problem, void* y, float* s_final, void* workspace,
                     void* stream);

// dy [B,T,H,P] (contiguous), ds_final (null: zero) -> dx (x's layout), ddt [B,T,H], db, dc (B's
// and C's layout; overwritten), da_log, ddt_bias, dd [H] (accumulated), ds0 (null: not written).
int SsdBackwardDevice(const DeviceProblem& problem, const void* dy, const float* ds_final, void* dx,
                      void* ddt, void* db, void* dc, float* da_log, float* ddt_bias, float* dd,
                      float* ds0, void* workspace, bool states_valid, void* stream);

}  // namespace mesa::kernels::ssd::cuda

#endif  // MESANET_KERNELS_SSD_CUDA_SSD_KERNELS_H_
