// Helpers shared by the CPU implementations (not part of the public API).
#ifndef MESANET_KERNELS_DELTANET_INTERNAL_H_
#define MESANET_KERNELS_DELTANET_INTERNAL_H_

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/common/parallel_for.h"

namespace mesa::kernels::deltanet::internal {

// One (sequence, head) pair: tokens [begin, end) of batch row `batch_index`.
struct Slice {
  int64_t batch_index;  // b
  int64_t state_index;  // index of the sequence into [S, H, D, D]
  int64_t head;
  int64_t begin, end;
};

// Slices in state order: slice i has state offset i * D * D.
inline std::vector<Slice> MakeSlices(int64_t batch, int64_t seq_len, int64_t heads,
                                     std::span<const int32_t> cu_seqlens) {
  std::vector<Slice> slices;
  const int64_t num_seq = cu_seqlens.empty() ? batch : int64_t(cu_seqlens.size()) - 1;
  for (int64_t s = 0; s < num_seq; ++s) {
    for (int64_t h = 0; h < heads; ++h) {
      if (!cu_seqlens.empty()) {
        slices.push_back({0, s, h, cu_seqlens[s], cu_seqlens[s + 1]});
      } else {
        slices.push_back({s, s, h, 0, seq_len});
      }
    }
  }
  return slices;
}

// Token-major addressing for one slice: gate index of token t (absolute along T), and the offset
// of its D-vector.
struct SliceIndex {
  int64_t seq_len, heads, head_dim;
  const Slice* slice;
  int64_t gate(int64_t t) const { return (slice->batch_index * seq_len + t) * heads + slice->head; }
  int64_t token(int64_t t) const { return gate(t) * head_dim; }
  int64_t state() const { return (slice->state_index * heads + slice->head) * head_dim * head_dim; }
};

using ::mesa::kernels::ParallelFor;
using ::mesa::kernels::ResolveThreads;

}  // namespace mesa::kernels::deltanet::internal

#endif  // MESANET_KERNELS_DELTANET_INTERNAL_H_
