// Bucket bounds of the Prometheus latency histograms of every binary: start, start*factor, ...
// (n bounds). A quantile read by Prometheus's linear interpolation inside a bucket is off by less
// than (factor - 1) of the true value: 2^(1/4) (four buckets per doubling) keeps it within 19%.
#ifndef MESA_BASE_EXPONENTIAL_BUCKETS_H_
#define MESA_BASE_EXPONENTIAL_BUCKETS_H_

#include <cmath>
#include <vector>

namespace mesa::base {

inline std::vector<double> ExponentialBuckets(double start, double factor, int n) {
  std::vector<double> bounds;
  for (int i = 0; i < n; ++i) bounds.push_back(start * std::pow(factor, i));
  return bounds;
}

}  // namespace mesa::base

#endif  // MESA_BASE_EXPONENTIAL_BUCKETS_H_
