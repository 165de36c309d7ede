// The coordinator's histograms give usable quantiles: Prometheus's histogram_quantile (linear
// interpolation inside the bucket that holds the rank) over a known distribution of observations
// lands close to the true quantile.
#include "coordinator/metrics.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"

namespace mesa::coordinator {
namespace {

// (upper bound, cumulative count) of histogram `name` in the text exposition, +Inf last.
std::vector<std::pair<double, double>> Buckets(const std::string& exposition,
                                               const std::string& name) {
  std::vector<std::pair<double, double>> out;
  const std::string prefix = name + "_bucket{le=\"";
  for (absl::string_view line : absl::StrSplit(exposition, '\n')) {
    if (!absl::ConsumePrefix(&line, prefix)) continue;
    std::vector<absl::string_view> parts = absl::StrSplit(line, absl::MaxSplits("\"} ", 1));
    if (parts.size() != 2) continue;
    double le = INFINITY, count = 0;
    if (parts[0] != "+Inf") {
      EXPECT_TRUE(absl::SimpleAtod(parts[0], &le)) << line;
    }
    EXPECT_TRUE(absl::SimpleAtod(parts[1], &count)) << line;
    out.emplace_back(le, count);
  }
  return out;
}

// Prometheus's histogram_quantile (promql/quantile.go, bucketQuantile) over cumulative buckets.
double HistogramQuantile(double q, const std::vector<std::pair<double, double>>& buckets) {
  if (buckets.size() < 2) return NAN;
  const double total = buckets.back().second;
  const double rank = q * total;
  size_t b = 0;
  while (b < buckets.size() - 1 && buckets[b].second < rank) ++b;
  if (b == buckets.size() - 1) return buckets[buckets.size() - 2].first;
  double start = 0, below = 0;
  if (b > 0) {
    start = buckets[b - 1].first;
    below = buckets[b - 1].second;
  }
  const double in_bucket = buckets[b].second - below;
  return start + (buckets[b].first - start) * ((rank - below) / in_bucket);
}

double TrueQuantile(double q, std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[static_cast<size_t>(std::ceil(q * values.size())) - 1];
}

// Queue waits spread over 0.05 s .. `longest` s (uniform in log space, like a queue that is
// sometimes empty and sometimes backed up).
std::vector<double> Waits(double longest) {
  std::vector<double> v;
  const int n = 2000;
  for (int i = 0; i < n; ++i) v.push_back(0.05 * std::pow(longest / 0.05, (i + 0.5) / n));
  return v;
}

TEST(MetricsTest, QueueWaitQuantilesAreClose) {
  // The case: the longest wait was 177 s, the old buckets (factor 4) read p99 as 596 s.
  for (double longest : {177.0, 3.0, 3600.0}) {
    Metrics m;
    const std::vector<double> waits = Waits(longest);
    for (double w : waits) m.ObserveQueueWait(w);
    const auto buckets = Buckets(m.Serialize(), "mesa_coordinator_queue_wait_seconds");
    for (double q : {0.5, 0.9, 0.99}) {
      const double want = TrueQuantile(q, waits);
      const double got = HistogramQuantile(q, buckets);
      EXPECT_NEAR(got, want, 0.1 * want) << "p" << q * 100 << " longest " << longest;
      EXPECT_LE(got, longest * 1.05) << "p" << q * 100 << " above the longest wait";
    }
  }
}

TEST(MetricsTest, SchedulingPassQuantilesAreClose) {
  // Passes of 0.2 ms .. 30 ms: the p99 must say whether the 20 ms target holds.
  Metrics m;
  std::vector<double> passes;
  for (int i = 0; i < 1000; ++i) passes.push_back(0.0002 * std::pow(150.0, (i + 0.5) / 1000));
  for (double p : passes) m.ObserveSchedulingPass(p);
  const auto buckets = Buckets(m.Serialize(), "mesa_coordinator_scheduling_pass_seconds");
  for (double q : {0.5, 0.99}) {
    const double want = TrueQuantile(q, passes);
    EXPECT_NEAR(HistogramQuantile(q, buckets), want, 0.15 * want) << "p" << q * 100;
  }
}

TEST(MetricsTest, BucketsCoverSecondsToDays) {
  const auto b = ExponentialBuckets(0.05, std::pow(2.0, 0.25), 88);
  ASSERT_EQ(b.size(), 88u);
  EXPECT_DOUBLE_EQ(b.front(), 0.05);
  EXPECT_NEAR(b[4], 0.1, 1e-12);     // four buckets per doubling
  EXPECT_GT(b.back(), 2 * 86400.0);  // two days in the queue still land in a finite bucket
}

TEST(MetricsTest, LeaseExpiriesStartAtZero) {
  // The alert takes increase() of the counter: it must exist at 0 before the first loss.
  Metrics m;
  EXPECT_NE(m.Serialize().find("mesa_coordinator_worker_lease_expiries_total 0"),
            std::string::npos);
  m.CountLeaseExpiry();
  EXPECT_NE(m.Serialize().find("mesa_coordinator_worker_lease_expiries_total 1"),
            std::string::npos);
}

}  // namespace
}  // namespace mesa::coordinator
