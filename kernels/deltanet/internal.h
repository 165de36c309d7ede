// Helpers shared by the CPU implementations (not part of the public API).
#ifndef MESANET_KERNELS_DELTANET_INTERNAL_H_
#define MESANET_KERNELS_DELTANET_INTERNAL_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <thread>
#include <vector>

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

inline int ResolveThreads(int requested, size_t tasks) {
  int threads = requested > 0 ? requested : static_cast<int>(std::thread::hardware_concurrency());
  threads = std::max(1, threads);
  return static_cast<int>(std::min<size_t>(threads, std::max<size_t>(tasks, 1)));
}

// Runs fn(task, worker) for task in [0, n) on `threads` workers (the caller is worker 0).
inline void ParallelFor(int64_t n, int threads, const std::function<void(int64_t, int)>& fn) {
  if (threads <= 1) {
    for (int64_t i = 0; i < n; ++i) fn(i, 0);
    return;
  }
  std::atomic<int64_t> next{0};
  auto work = [&](int worker) {
    for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) fn(i, worker);
  };
  std::vector<std::thread> pool;
  for (int w = 1; w < threads; ++w) pool.emplace_back(work, w);
  work(0);
  for (std::thread& t : pool) t.join();
}

}  // namespace mesa::kernels::deltanet::internal

#endif  // MESANET_KERNELS_DELTANET_INTERNAL_H_
