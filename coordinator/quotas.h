// Quotas (docs/coordinator.md "Quotas"): per user and per queue, a bound on queued jobs,
// on GPUs in use and a submission rate (token bucket). The coordinator applies them under its lock;
// this file holds the limits, the buckets and the refusal messages.
#ifndef MESANET_COORDINATOR_QUOTAS_H_
#define MESANET_COORDINATOR_QUOTAS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace mesa::coordinator {

// One set of limits; 0 means unlimited.
struct QuotaLimits {
  int64_t max_queued_jobs = 0;  // jobs QUEUED or RETRYING at once
  int64_t max_gpus = 0;         // GPUs of SCHEDULED and RUNNING jobs together
  double submit_rate = 0;       // submissions per minute (refill of the bucket)
  int64_t submit_burst = 0;     // bucket size; 0: max(1, ceil(submit_rate))
  bool any() const { return max_queued_jobs > 0 || max_gpus > 0 || submit_rate > 0; }
  int64_t burst() const;
};

// One user's entry `quota:` of --tokens_file: each field given replaces the flag's value.
struct QuotaOverride {
  std::optional<int64_t> max_queued_jobs, max_gpus, submit_burst;
  std::optional<double> submit_rate;
  QuotaLimits Apply(QuotaLimits base) const;
};

// Per user (keyed by Job.owner; without --tokens_file every caller is the one user "") and per
// queue (the spec's queue, "default" when empty).
struct Quotas {
  QuotaLimits user;
  QuotaLimits queue;
  absl::flat_hash_map<std::string, QuotaOverride> user_overrides;  // by user name
  // `user` with the user's override applied.
  QuotaLimits ForUser(const std::string& name) const;
  // Whether any user may have a GPU quota.
  bool any_user_max_gpus() const;
};

// `scope` is "user" or "queue"; `name` the user or queue. RESOURCE_EXHAUSTED naming the quota
// (its flag) and its value.
absl::Status QuotaExceeded(absl::string_view scope, absl::string_view name, absl::string_view quota,
                           absl::string_view value, absl::string_view detail);

// Token buckets by key: each holds up to burst() submissions and refills at submit_rate a minute.
class SubmitBuckets {
 public:
  // OK and one token taken, or RESOURCE_EXHAUSTED naming `<scope>_submit_rate` and when to retry.
  // Does nothing when limits.submit_rate is 0.
  absl::Status Take(absl::string_view scope, const std::string& key, const QuotaLimits& limits,
                    absl::Time now);
  // Whether Take would succeed (no token taken).
  absl::Status Check(absl::string_view scope, const std::string& key, const QuotaLimits& limits,
                     absl::Time now);

 private:
  struct Bucket {
    double tokens = 0;
    absl::Time last;
  };
  Bucket& Refill(const std::string& key, const QuotaLimits& limits, absl::Time now);
  absl::flat_hash_map<std::string, Bucket> buckets_;
};

}  // namespace mesa::coordinator

#endif  // MESANET_COORDINATOR_QUOTAS_H_
