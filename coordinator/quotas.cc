#include "coordinator/quotas.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace mesa::coordinator {

int64_t QuotaLimits::burst() const {
  if (submit_burst > 0) return submit_burst;
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(submit_rate)));
}

QuotaLimits QuotaOverride::Apply(QuotaLimits base) const {
  if (max_queued_jobs) base.max_queued_jobs = *max_queued_jobs;
  if (max_gpus) base.max_gpus = *max_gpus;
  if (submit_rate) base.submit_rate = *submit_rate;
  if (submit_burst) base.submit_burst = *submit_burst;
  return base;
}

QuotaLimits Quotas::ForUser(const std::string& name) const {
  auto it = user_overrides.find(name);
  return it == user_overrides.end() ? user : it->second.Apply(user);
}

bool Quotas::any_user_max_gpus() const {
  if (user.max_gpus > 0) return true;
  for (const auto& [name, o] : user_overrides) {
    if (o.max_gpus.value_or(0) > 0) return true;
  }
  return false;
}

absl::Status QuotaExceeded(absl::string_view scope, absl::string_view name, absl::string_view quota,
                           absl::string_view value, absl::string_view detail) {
  return absl::ResourceExhaustedError(absl::StrCat("quota ", scope, "_", quota, "=", value, " of ",
                                                   scope, " \"", name, "\" exceeded: ", detail));
}

SubmitBuckets::Bucket& SubmitBuckets::Refill(const std::string& key, const QuotaLimits& limits,
                                             absl::Time now) {
  auto [it, inserted] = buckets_.try_emplace(key);
  Bucket& b = it->second;
  const double burst = static_cast<double>(limits.burst());
  if (inserted) {
    b.tokens = burst;
  } else if (now > b.last) {
    b.tokens = std::min(burst, b.tokens + absl::ToDoubleMinutes(now - b.last) * limits.submit_rate);
  }
  b.last = std::max(b.last, now);
  return b;
}

absl::Status SubmitBuckets::Check(absl::string_view scope, const std::string& key,
                                  const QuotaLimits& limits, absl::Time now) {
  if (limits.submit_rate <= 0) return absl::OkStatus();
  Bucket& b = Refill(key, limits, now);
  if (b.tokens >= 1) return absl::OkStatus();
  const double wait_s = (1 - b.tokens) * 60 / limits.submit_rate;
  return QuotaExceeded(
      scope, key.empty() ? "(anonymous)" : key, "submit_rate",
      absl::StrCat(limits.submit_rate, "/min"),
      absl::StrCat("at most ", limits.burst(), " submissions at once, then ", limits.submit_rate,
                   " a minute; retry in ", static_cast<int64_t>(std::ceil(wait_s)), " s"));
}

absl::Status SubmitBuckets::Take(absl::string_view scope, const std::string& key,
                                 const QuotaLimits& limits, absl::Time now) {
  if (absl::Status s = Check(scope, key, limits, now); !s.ok()) return s;
  if (limits.submit_rate > 0) buckets_[key].tokens -= 1;
  return absl::OkStatus();
}

}  // namespace mesa::coordinator
