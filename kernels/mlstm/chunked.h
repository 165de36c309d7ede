// The mLSTM in its chunked form (docs/math.md §8.9; the shape of the CUDA kernel), float32 on the
// CPU. Per chunk of Q tokens, with b_r the chunk's cumulative log forget gate and m_r the
// per-token stabiliser (the recurrence's own m, computed by its scalar recursion):
//   W[r, i] = exp(b_r − b_i + ĩ_i − m_r) (i ≤ r),   g_r = exp(b_r + m_c − m_r)   (all ≤ 1)
//   num_r = g_r C'_c q_r + Σ_i W[r, i] (q_r·k_i) v_i,   den_r likewise with v ≡ 1 and n'_c
//   h_r   = num_r / (max(|den_r|, exp(−m_r)) + eps)
// and the state pass to the chunk's end. The backward walks the chunks in reverse with the
// chunk-start states of a forward pass; ∂ĩ_i = k_i·∂k_i, and ∂log f_t is the reverse cumulative
// sum Σ_{s≥t, same document} (R_s − ∂ĩ_s) + <∂C'_T, C'_T> + ∂n'_T·n'_T, where
// R_s = ê_s·num_s + δden_s den_s is the readout's response to rescaling the whole memory (m is
// not differentiated). Exact resets: a weight that crosses a document start is zero.
#ifndef MESANET_KERNELS_MLSTM_CHUNKED_H_
#define MESANET_KERNELS_MLSTM_CHUNKED_H_

#include "kernels/mlstm/mlstm_types.h"

namespace mesa::kernels::mlstm {

// Validated arguments; options.chunk_size is Q.
void ChunkedForward(const MlstmInputs& in, const MlstmOptions& options,
                    const MlstmForwardOutputs& out);
void ChunkedBackward(const MlstmInputs& in, const MlstmOptions& options,
                     const MlstmBackwardInputs& bwd, const MlstmGradients& grads);

}  // namespace mesa::kernels::mlstm

#endif  // MESANET_KERNELS_MLSTM_CHUNKED_H_
