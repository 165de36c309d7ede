// Wall-clock timing of the CPU benchmarks: one warm-up run, then the median of `repeats` runs.
#ifndef MESANET_BENCH_CPU_TIMING_H_
#define MESANET_BENCH_CPU_TIMING_H_

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

namespace mesa::bench {

inline double MedianWallMs(const std::function<void()>& fn, int repeats) {
  fn();  // warm-up
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace mesa::bench

#endif  // MESANET_BENCH_CPU_TIMING_H_
