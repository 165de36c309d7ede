// The small thread fan-out of the CPU operators (kernels/mesa, kernels/deltanet, ...): independent
// tasks (one per sequence and head, or per batch row) spread over a few std::threads.
#ifndef MESANET_KERNELS_PARALLEL_FOR_H_
#define MESANET_KERNELS_PARALLEL_FOR_H_

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace mesa::kernels {

// The threads to use for `tasks` tasks: `requested`, or every hardware thread when 0; at least 1
// and at most one per task.
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

}  // namespace mesa::kernels

#endif  // MESANET_KERNELS_PARALLEL_FOR_H_
