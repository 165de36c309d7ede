// CUDA kernels of the attention mixer's model side (attention_cache_kernels.cu): rotary position
// embeddings on bf16/fp32 activations and the KV cache append of one decoding token. The
// attention operator itself is kernels/attention/cuda. Host-callable; no CUDA headers needed.
#ifndef MESANET_MODEL_MIXERS_ATTENTION_ATTENTION_CACHE_KERNELS_H_
#define MESANET_MODEL_MIXERS_ATTENTION_ATTENTION_CACHE_KERNELS_H_

#include <cstdint>

namespace mesa::model::attention_cuda {

// x [b, t, h, d] (bf16 when `bf16`, else fp32) in place: token j of row r turned by position
// starts[r] + j (starts: device int64 [b], or null for 0), as RotaryCpu (rotary.h). Returns the
// launch's cudaError_t as int.
int LaunchRotary(void* x, bool bf16, int64_t b, int64_t t, int64_t h, int64_t d,
                 const int64_t* starts, bool inverse, void* stream);

// Token `token` of the new keys and values [b, t, h·d] of rows r = 0..b-1 into slot
// (lengths[r] + token) % capacity of cache rows r ([b, capacity, h·d], same dtype), and
// valid[r] = min(lengths[r] + token + 1, capacity) (int32). lengths: device int64 [b].
int LaunchAppendKv(const void* k, const void* v, bool bf16, int64_t b, int64_t t, int64_t hd,
                   int64_t token, void* k_cache, void* v_cache, int64_t capacity,
                   const int64_t* lengths, int32_t* valid, void* stream);

}  // namespace mesa::model::attention_cuda

#endif  // MESANET_MODEL_MIXERS_ATTENTION_ATTENTION_CACHE_KERNELS_H_
