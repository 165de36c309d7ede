// Rotary position embeddings on the CPU (docs/math.md §8.3): rotate-half pairs (i, i + D/2) of
// each head's vector turned by the angle position * base^(-2i/D), base spec::kRotaryBase.
#ifndef MESANET_MODEL_MIXERS_ATTENTION_ROTARY_H_
#define MESANET_MODEL_MIXERS_ATTENTION_ROTARY_H_

#include <cstdint>
#include <span>

namespace mesa::model {

// x [batch, seq_len, heads, head_dim] (head_dim even) in place: token t of row b is at position
// starts[b] + t (starts empty: 0 + t). `inverse` rotates by the negative angles (the backward).
void RotaryCpu(float* x, int64_t batch, int64_t seq_len, int64_t heads, int64_t head_dim,
               std::span<const int64_t> starts, bool inverse);

// The angle of pair i at `position` in float64: what RotaryCpu and the CUDA kernel both use.
double RotaryAngle(int64_t position, int64_t pair, int64_t head_dim);

}  // namespace mesa::model

#endif  // MESANET_MODEL_MIXERS_ATTENTION_ROTARY_H_
